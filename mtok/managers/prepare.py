"""What a request becomes before it is sent: token ids checked against its
model, one message for the scheduler per prompt and sample.

The TokenizerManager calls these between a route's validation and the send;
they are kept apart from it because they only compute (no state, no I/O but
a look at the client's connection between slices of a long batch).  Every
problem is a 400 naming the field, found before anything is sent.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable, Dict, List, Optional

from ..api.connections import ClientDisconnected
from .limits import (check_batch_size, check_client_rids, check_logprob_entries, check_stop_regexes,
                          check_stops, check_top_logprobs, logprob_entry_limit)
from ..validate import bad, show
from ..wire.args import ServerArgs
from ..wire.io_struct import (GenerateReqInput, SamplingParams, TokenizedEmbeddingReqInput, TokenizedGenerateReqInput,
                              side_top_n)
from ..models import ModelEntry

ENCODE_SLICE = 256  # prompts tokenized between two looks at the client's connection


def prompt_texts(obj: GenerateReqInput, model: ModelEntry, args: ServerArgs) -> Optional[List[str]]:
    """The checks of ``obj`` that need no token, and its prompts' texts to
    tokenize (None when it gives token ids: those are checked here)."""
    check_skip_tokenizer_init(obj, args)
    if obj.logprobs is not None:  # before tokenizing: it needs no prompt
        check_top_logprobs(obj.logprobs.top_n, args.max_logprobs, obj.logprobs.param)
        check_top_logprobs(obj.logprobs.prompt_top_n or 0, args.max_logprobs, "prompt_logprobs")
    if not obj.rid_is_ours:
        check_client_rids(obj.rid if isinstance(obj.rid, list) else [obj.rid] if obj.rid else None)
    if obj.text is not None:
        texts = obj.text if obj.is_batch else [obj.text]
        check_batch_size(len(texts), args.max_prompts_per_request, "text")  # type: ignore[arg-type]
        return texts  # type: ignore[return-value]
    prompts = obj.input_ids if obj.is_batch else [obj.input_ids]  # type: ignore[list-item]
    check_batch_size(len(prompts), args.max_prompts_per_request, "input_ids")  # type: ignore[arg-type]
    model.check_ids(prompts, "input_ids")  # type: ignore[arg-type]
    return None


def given_ids(obj: GenerateReqInput) -> List[List[int]]:
    """The prompts of a request given as token ids (checked by :func:`prompt_texts`)."""
    return obj.input_ids if obj.is_batch else [obj.input_ids]  # type: ignore[list-item,return-value]


def generate_reqs(obj: GenerateReqInput, prompts: List[List[int]], model: ModelEntry, args: ServerArgs
                  ) -> List[TokenizedGenerateReqInput]:
    """One message per prompt and sample; ``obj`` has its rids by now."""
    if obj.logprobs is not None:
        check_logprob_entries(logprob_entries(obj, prompts),
                              logprob_entry_limit(args.max_logprob_entries, args.max_logprobs), obj.logprobs.param)
    rids = obj.rid if isinstance(obj.rid, list) else [obj.rid]
    out = []
    checked = None
    for i, ids in enumerate(prompts):
        sp = obj.params_at(i)
        if sp is not checked:
            check_stops(sp.stop, args.max_stop_strings, args.max_stop_chars)
            check_stop_regexes(sp.stop_regex, args.max_stop_regexes, args.max_stop_regex_length)
            if sp.logit_bias:
                sp.logit_bias = logit_bias(sp.logit_bias, model)
            checked = sp
        where = f" (prompt {i})" if obj.is_batch else ""
        if not ids:
            raise bad(f"the prompt is empty{where}", "text" if obj.text is not None else "input_ids")
        if len(ids) + sp.max_new_tokens > model.context_length:
            raise context_error(len(ids), sp.max_new_tokens, model.context_length, where,
                                "text" if obj.text is not None else "input_ids")
        model.check_ids([sp.stop_token_ids], "stop_token_ids")
        # n > 1: parallel samples, each its own request "<rid>-<j>" (abort_request takes <rid>)
        samples = [rids[i]] if sp.n == 1 else [f"{rids[i]}-{j}" for j in range(sp.n)]
        for j, rid in enumerate(samples):
            out.append(TokenizedGenerateReqInput(rid=rid, input_ids=ids, sampling_params=sample_params(sp, j),
                                                 stream=obj.stream, model=model.name, logprobs=obj.logprobs,
                                                 lora_path=obj.lora_path))
    return out


def sample_params(sp: SamplingParams, j: int) -> SamplingParams:
    """The parameters of sample ``j`` of ``n``: with a ``seed``, sample j is seeded
    ``seed + j`` (as vLLM seeds its parallel samples), so the n samples differ
    and each is reproducible; the same seed for all would give n equal choices."""
    if j == 0 or sp.seed is None:
        return sp
    return dataclasses.replace(sp, seed=sp.seed + j)


def context_error(prompt: int, new: int, context: int, where: str, prompt_param: str) -> Exception:
    """SGLang's words (tokenizer_manager.py): an input at or over the context
    length, else its tokens and the new ones together over it."""
    if prompt >= context:
        return bad(f"The input ({prompt} tokens) is longer than the model's context length ({context} tokens)."
                   f"{where}", prompt_param)
    return bad(f"Requested token count exceeds the model's maximum context length of {context} tokens. You "
               f"requested a total of {show(prompt + new)} tokens: {prompt} tokens from the input messages and "
               f"{show(new)} tokens for the completion. Please reduce the number of tokens in the input messages "
               f"or the completion to fit within the limit.{where}", "max_new_tokens")


def logprob_entries(obj: GenerateReqInput, prompts: List[List[int]]) -> int:
    """The logprob values ``obj`` asks for: per prompt, ``n`` x (its tokens
    scored from ``logprob_start_len`` on x the values per prompt token +
    ``max_new_tokens``, unless it asks for the prompt's only, x the values per
    new token); a token's values are its own + the top ones + those asked for by id."""
    total = 0
    for i, ids in enumerate(prompts):
        sp = obj.params_at(i)
        new = sp.max_new_tokens if obj.logprobs.output else 0  # type: ignore[union-attr]
        total += sp.n * (_scored(obj, ids) * _per_token(obj, True) + new * _per_token(obj, False))
    return total


def fit_budget_to_logprobs(obj: GenerateReqInput, prompts: List[List[int]], limit: int) -> None:
    """Lower the budget nobody gave (chat without ``max_tokens``: the rest of
    the context) of a request with logprobs to the new tokens its share of
    ``limit`` (``--max-logprob-entries``) leaves after its prompt logprobs: it
    then ends with finish_reason "length" there, as it would at the context's
    end.  An explicit budget is counted as asked, and refused beyond the bound."""
    if obj.logprobs is None or not obj.logprobs.output:
        return
    room, samples = limit, 0
    for i, ids in enumerate(prompts):
        room -= obj.params_at(i).n * _scored(obj, ids) * _per_token(obj, True)
        samples += obj.params_at(i).n
    fit = room // (samples * _per_token(obj, False))
    for i in range(len(prompts)):
        sp = obj.params_at(i)
        sp.max_new_tokens = max(1, min(sp.max_new_tokens, fit))  # below 1: refused by the check


def _per_token(obj: GenerateReqInput, prompt: bool) -> int:
    lp = obj.logprobs
    return 1 + side_top_n(lp, prompt) + len(lp.token_ids or ())  # type: ignore[union-attr]


def _scored(obj: GenerateReqInput, ids: List[int]) -> int:
    """Prompt tokens of ``ids`` scored: from ``logprob_start_len`` on (-1: none)."""
    start = obj.logprobs.start_len  # type: ignore[union-attr]
    return len(ids) - start if 0 <= start < len(ids) else 0


def logit_bias(bias: Dict[str, Any], model: ModelEntry) -> Dict[str, float]:
    """``logit_bias`` in one spelling: keys token ids in the vocabulary (refused
    like ``stop_token_ids``, naming the id and the vocabulary's size, before any
    engine is asked), written as decimal strings; values numbers, clamped to
    [-100, 100] (OpenAI's range, clamped as vLLM does)."""
    out: Dict[str, float] = {}
    for key, value in bias.items():
        try:
            token = int(key)
        except ValueError:
            raise bad(f"'logit_bias' keys are token ids, not {show(key)}", "logit_bias") from None
        if isinstance(value, bool) or not isinstance(value, (int, float)) or value != value:
            raise bad(f"'logit_bias' values are numbers; token {token} has {show(value)}", "logit_bias")
        out[str(token)] = max(-100.0, min(100.0, float(value)))
    model.check_ids([[int(k) for k in out]], "logit_bias")
    return out


def check_skip_tokenizer_init(obj: GenerateReqInput, args: ServerArgs) -> None:
    """With --skip-tokenizer-init there is no text on either side (as in SGLang,
    tokenizer_manager.py: "cannot accept text prompts"): text and stop strings are 400s."""
    if not args.skip_tokenizer_init:
        return
    if obj.text is not None:
        raise bad("this server runs with --skip-tokenizer-init: give 'input_ids', not text", "text")
    if any(obj.params_at(i).stop or obj.params_at(i).stop_regex for i in range(obj.batch_size)):
        raise bad("this server runs with --skip-tokenizer-init: it cannot match stop strings; "
                  "use 'stop_token_ids'", "stop")


def encode_batch(model: ModelEntry, texts: List[str], watch: Optional[Any]) -> List[List[int]]:
    """Tokenize in slices, and stop if the client has gone meanwhile."""
    out: List[List[int]] = []
    for start in range(0, len(texts), ENCODE_SLICE):
        if start and watch is not None and watch.gone():
            raise ClientDisconnected()
        out.extend(model.tokenizer.encode_batch(texts[start : start + ENCODE_SLICE]))
    return out


def embedding_reqs(inputs: List[Any], model: ModelEntry, args: ServerArgs, new_rid: Callable[[], str]
                   ) -> List[TokenizedEmbeddingReqInput]:
    """One message per input (a text or token ids), each with a rid of ``new_rid()``."""
    check_batch_size(len(inputs), args.max_prompts_per_request, "input")
    texts = [x for x in inputs if isinstance(x, str)]
    encoded = iter(model.tokenizer.encode_batch(texts) if texts else [])
    prompts = [next(encoded) if isinstance(x, str) else x for x in inputs]
    model.check_ids(prompts, "input")
    reqs = []
    for ids in prompts:
        if not ids:
            raise bad("an input is empty", "input")
        if len(ids) > model.context_length:
            raise bad(f"an input has {len(ids)} tokens; the maximum is {model.context_length}", "input")
        reqs.append(TokenizedEmbeddingReqInput(rid=new_rid(), input_ids=ids, model=model.name))
    return reqs
