"""Incremental detokenization: the streamed deltas add up to the one-shot decode.

Property-based, over random token sequences and real tokenizers, through the
real DetokenizerManager and the scheduler's stop-string check.
"""

from __future__ import annotations

import os
import uuid
from functools import lru_cache

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from support import SHARED_TOKENIZERS, skip_real
from mtok.wire.args import ServerArgs
from mtok.managers.decoding import find_stop, stop_holdback
from mtok.managers.detokenizer import DetokenizerManager
from mtok.wire.finish import FinishLength, FinishStop
from mtok.wire.io_struct import BatchTokenIDOutput, SamplingParams, TokenizedGenerateReqInput
from mtok.managers.scheduler import Req, Scheduler
from prompts import prompts

pytestmark = pytest.mark.unit

TOKENIZERS = ["built-in"] + [
    f for f in ("gpt2.json", "roberta-base.json", "mistral-7b-v0.1.json", "bert-base-uncased.json",
                "t5-small.json", "dolma2-cl100k.json")
    if os.path.isfile(os.path.join(SHARED_TOKENIZERS, f))
]
SETTINGS = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def path_of(name):
    return None if name == "built-in" else os.path.join(SHARED_TOKENIZERS, name)


@lru_cache(maxsize=None)
def detokenizer(name):
    args = ServerArgs(tokenizer_path=path_of(name))
    return DetokenizerManager(args)


@lru_cache(maxsize=None)
def scheduler(name):
    args = ServerArgs(tokenizer_path=path_of(name))
    return Scheduler(args)


def stream(detok, ids, chunks, skip=True, stop=None, stop_offset=None, reason=None, context=None):
    """Feed ``ids`` to the detokenizer in steps of the given sizes (the first
    after the prompt ids ``context``, as the scheduler sends them); return the deltas."""
    rid, pos, deltas = uuid.uuid4().hex, 0, []
    sizes = list(chunks) or [len(ids)]
    while pos < len(ids) or not deltas:
        size = sizes[len(deltas) % len(sizes)] or 1
        new = ids[pos:pos + size]
        pos += len(new)
        final = pos >= len(ids)
        out = detok.handle_batch_token_id_out(BatchTokenIDOutput(
            rids=[rid], finished_reasons=[(reason or FinishLength(len(ids))) if final else None], decode_ids=[new],
            prompt_tokens=[1], completion_tokens=[pos], skip_special_tokens=[skip],
            spaces_between_special_tokens=[True], no_stop_trim=[False], stop=[stop],
            stop_str_offsets=[stop_offset if final else None],
            decode_contexts=[context] if context and not deltas else None))
        deltas.append(out.output_strs[0])
    assert rid not in detok.states, "finished requests must not keep decode state"
    return deltas


@pytest.mark.parametrize("name", TOKENIZERS)
def test_random_ids_stream_to_the_one_shot_decode(name):
    detok = detokenizer(name)
    tok = detok.decoders[detok.default_model].tokenizer

    @SETTINGS
    @given(ids=st.lists(st.integers(0, tok.vocab_size - 1), min_size=1, max_size=40),
           chunks=st.lists(st.integers(1, 4), max_size=5), skip=st.booleans())
    def check(ids, chunks, skip):
        deltas = stream(detok, ids, chunks, skip)
        assert "".join(deltas) == tok.decode(ids, skip_special_tokens=skip)

    check()


def after(tok, context, ids, skip=True):
    """The text ``ids`` add to ``context``: what SGLang's and vLLM's detokenizers give."""
    head = tok.decode(context, skip_special_tokens=skip)
    full = tok.decode(list(context) + list(ids), skip_special_tokens=skip)
    assert full.startswith(head)
    return full[len(head):]


@pytest.mark.parametrize("name", TOKENIZERS)
def test_random_ids_stream_to_their_text_after_the_prompt(name):
    detok = detokenizer(name)
    decoder = detok.decoders[detok.default_model]
    tok = decoder.tokenizer

    @SETTINGS
    @given(prompt=st.sampled_from(prompts(40)), ids=st.lists(st.integers(0, tok.vocab_size - 1), min_size=1,
                                                               max_size=30),
           chunks=st.lists(st.integers(1, 4), max_size=5), skip=st.booleans())
    def check(prompt, ids, chunks, skip):
        context = decoder.context(tok.encode(prompt, add_special_tokens=True), skip, True)
        deltas = stream(detok, ids, chunks, skip, context=context)
        assert "".join(deltas) == after(tok, context, ids, skip)

    check()


def test_a_completion_keeps_the_space_its_first_token_begins_with():
    """Mistral's decoder strips the leading space of the text it decodes: a
    completion's first ``▁Good`` decoded alone is "Good", after the prompt " Good"."""
    name = "mistral-7b-v0.1.json"
    if name not in TOKENIZERS:
        skip_real(f"{name} is not in {SHARED_TOKENIZERS}")
    detok, sched = detokenizer(name), scheduler(name)
    decoder = detok.decoders[detok.default_model]
    tok = decoder.tokenizer
    prompt = tok.encode("Hello", add_special_tokens=True)
    good = tok.encode("Hello Good morning", add_special_tokens=False)[1:]
    context = decoder.context(prompt, True, True)
    assert "".join(stream(detok, good, [1], context=context)) == " Good morning"
    assert "".join(stream(detok, good, [1])) == "Good morning"  # no context: the old text
    # A prompt that ends in byte tokens (maybe inside a character) is context up to them.
    crab = tok.encode("🦀", add_special_tokens=False)
    assert len(crab) > 1 and all(t in decoder.byte_ids for t in crab[1:])
    assert decoder.context(prompt + crab[:-1], True, True) == [prompt[-1], crab[0]]  # the last 5, less 3 bytes
    # The scheduler decodes after the same context: a stop string with the space matches.
    sched.handle_generate(TokenizedGenerateReqInput(
        rid="ctx", input_ids=prompt, model=sched.default_model,
        sampling_params=SamplingParams(max_new_tokens=8, stop=[" Good"], ignore_eos=True)))
    req = sched.reqs.pop("ctx")
    sched.waiting.remove(req)
    assert req.context == context
    req.output_ids.append(good[0])
    sched.check_finished([req])
    assert req.finished_reason == FinishStop(" Good") and req.stop_offset == 0


@pytest.mark.parametrize("name", TOKENIZERS)
def test_natural_text_never_streams_a_broken_character(name):
    detok = detokenizer(name)
    tok = detok.decoders[detok.default_model].tokenizer
    for text in prompts(60):
        ids = tok.encode(text, add_special_tokens=False)
        if not ids:
            continue
        deltas = stream(detok, ids, [1])
        full = tok.decode(ids)
        assert "".join(deltas) == full
        if "\ufffd" not in full:
            assert not any("\ufffd" in d for d in deltas), (text, deltas)


@pytest.mark.parametrize("name", TOKENIZERS[:3])
def test_stop_strings_end_generation_at_the_first_match(name):
    sched = scheduler(name)
    detok = detokenizer(name)
    tok = sched.models[sched.default_model].tokenizer

    @SETTINGS
    @given(text=st.sampled_from(prompts(80)), data=st.data())
    def check(text, data):
        ids = tok.encode(text, add_special_tokens=False)
        full = tok.decode(ids)
        if len(full) < 2 or not ids:
            return
        a = data.draw(st.integers(0, len(full) - 1))
        b = data.draw(st.integers(a + 1, min(len(full), a + 6)))
        stop = full[a:b]
        req = Req(TokenizedGenerateReqInput(rid="r", input_ids=ids, model=sched.default_model,
                                            sampling_params=SamplingParams(max_new_tokens=len(ids), stop=[stop],
                                                                           ignore_eos=True)))
        steps = 0
        while req.finished_reason is None:
            req.output_ids.append(ids[len(req.output_ids)])
            sched.check_finished([req])
            steps += 1
        emitted = req.output_ids
        deltas = stream(detok, emitted, [1], stop=[stop], stop_offset=req.stop_offset, reason=req.finished_reason)
        text_out = "".join(deltas)
        if isinstance(req.finished_reason, FinishStop):
            assert req.finished_reason == FinishStop(stop)
            assert text_out == full[:full.find(stop)]
            # no engine step after the one that completed the stop string
            assert stop not in tok.decode(emitted[:-1])
        else:
            assert stop not in full[:len(text_out)] or full.find(stop) + len(stop) > len(tok.decode(emitted))

    check()


def test_holdback_and_find_stop():
    assert stop_holdback("hello wor", ["world"]) == 3
    assert stop_holdback("hello", ["xyz"]) == 0
    assert stop_holdback("abab", ["abc", "b"]) == 2
    assert find_stop("one two three", ["three", "two"], 0) == (4, "two")
    assert find_stop("one two three", ["two"], 8) is None
    assert find_stop("one two three", ["three"], 9) == (8, "three")


def _holdback_reference(text, stops):
    """The definition: the longest proper prefix of a stop string that ends the text."""
    return max([k for s in stops for k in range(1, min(len(s) - 1, len(text)) + 1) if text.endswith(s[:k])],
               default=0)


@settings(max_examples=400, deadline=None)
@given(st.text(alphabet="ab c", max_size=30), st.lists(st.text(alphabet="ab c", min_size=1, max_size=8), max_size=5))
def test_stop_holdback_matches_its_definition(text, stops):
    from mtok.managers.decoding import stop_holdback

    assert stop_holdback(text, stops) == _holdback_reference(text, stops)
