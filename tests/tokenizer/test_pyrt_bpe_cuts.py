"""Where the BPE model cuts SentencePiece-style text (mtok/tokenizer/pyrt/bpe_cuts.py).

A cut is only exact if no merge can join the characters on its two sides.  The
property test builds random vocabularies whose merges mostly stay inside a class
(letters with their combining marks, digits, the rest), as SentencePiece's
trainer does, and now and then cross one, and compares the whole pipeline with
``tokenizers`` on random text: any cut where a merge joins shows as other ids.
The unit tests pin which rules a vocabulary earns.
"""

from __future__ import annotations

import json
import os

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from mtok.tokenizer.pyrt import Tokenizer
from mtok.tokenizer.pyrt.bpe import BPE, BYTE_TOKENS
from mtok.tokenizer.pyrt.bpe_cuts import MARK, find_cuts, split_apart
from support import ROOT, import_real, skip_real

pytestmark = [pytest.mark.fast, pytest.mark.unit]

MISTRAL = os.path.join(ROOT, "..", "shared", "tokenizers", "mistral-7b-v0.1.json")
# the classes a SentencePiece trainer keeps apart, for building vocabularies; "\n" and "ÿ" stay unknown
CLASSES = {"letter": "abé\u0301ж", "digit": "129", "rest": "._()²-"}
CLASS_OF = {c: name for name, chars in CLASSES.items() for c in chars}
ALPHABET = MARK + "".join(CLASSES.values())


def _model(merges, extra_chars: str = "", byte_fallback: bool = True) -> BPE:
    tokens = [MARK] + list(dict.fromkeys(ALPHABET[1:] + extra_chars)) + ["".join(m) for m in merges]
    vocab = {t: i for i, t in enumerate(dict.fromkeys(tokens))}
    if byte_fallback:
        vocab.update({t: len(vocab) + i for i, t in enumerate(BYTE_TOKENS)})
    return BPE(vocab, merges, byte_fallback=byte_fallback)


def _pieces(model: BPE, text: str) -> list:
    cuts = model._cuts
    return cuts.fine.findall(text) if cuts.junctions is None else split_apart(text, cuts.junctions)


def test_llama_like_vocabulary_is_cut_between_classes():
    merges = [(MARK, "a"), (MARK + "a", "b"), ("a", "b"), (".", "_"), ("(", ")"), (MARK, "."), ("²", ".")]
    model = _model(merges)
    assert model._cuts.fine is not None
    assert model._cuts.coarse.findall(f"{MARK}ab.a(){MARK}12\n\tb") == [f"{MARK}ab.a()", f"{MARK}12\n\tb"]
    assert _pieces(model, f"{MARK}ab.a(){MARK}12\n\tb") == [f"{MARK}ab", ".", "a", "()", f"{MARK}1", "2", "\n\t", "b"]
    assert _pieces(model, "a²._b") == ["a", "²._", "b"]  # "²" joins "." here: it counts with the rest
    assert model._cuts.alpha_whole


def test_merged_digits_run_together():
    model = _model([("1", "2"), (MARK, "1")])
    assert _pieces(model, f"{MARK}1212a.") == [f"{MARK}1212", "a", "."]


def test_combining_marks_count_as_letters_when_they_join_them():
    model = _model([("e", "\u0301"), ("a", "\u0301"), ("\u0301", "b"), (".", ".")], extra_chars="e")
    assert _pieces(model, "ae\u0301b..a") == ["ae\u0301b", "..", "a"]


def test_letters_moved_to_the_rest_when_that_keeps_the_classes_apart():
    merges = [(c, p) for c in "bж" for p in "._("] + [(p, c) for c in "bж" for p in "._("]
    model = _model(merges)
    assert _pieces(model, "ab.ж(a1") == ["a", "b.ж(", "a", "1"]
    assert not model._cuts.alpha_whole  # "b" is a letter that counts with the rest


def test_the_other_side_moves_when_moving_the_fewer_characters_still_joins():
    model = _model([("a", "."), ("a", "("), ("b", "a")])  # moving "a" leaves "b" → "a" joined
    assert _pieces(model, "ba.(_1") == ["ba.(", "_", "1"]


def test_classes_joined_every_way_are_cut_at_each_pair_no_junction_holds():
    model = _model([("a", "."), ("a", "b"), (".", "("), ("1", "a")])
    assert model._cuts.fine is None
    assert _pieces(model, f"ab.1\n\t(a{MARK}1a") == ["ab", ".", "1", "\n", "\t", "(", "a", MARK, "1a"]
    assert _pieces(model, "a.(") == ["a.("] and _pieces(model, "") == [""]


def test_a_mark_after_a_character_keeps_the_run_after_it_in_its_piece():
    # Gemma-3's one such merge: '>' + '▁</'
    model = _model([(MARK, "<"), (">", MARK + "<"), (MARK, "a"), ("a", "b")], extra_chars="<>")
    coarse = model._cuts.coarse
    assert coarse.findall(f"{MARK}ab>{MARK}{MARK}<a{MARK}b>") == [f"{MARK}ab>{MARK}{MARK}<a", f"{MARK}b>"]
    assert coarse.findall(f"a>{MARK}{MARK}") == [f"a>{MARK}{MARK}"] and coarse.findall(MARK * 2) == [MARK * 2]
    assert model._cuts.junctions is not None  # the classes cut before every '▁': the pairs decide
    assert _pieces(model, f"{MARK}ab>{MARK}<1") == [f"{MARK}ab", f">{MARK}<", "1"]


def test_a_mark_after_many_characters_means_no_cut_at_all():
    letters = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJ"
    assert _model([(c, MARK) for c in letters], extra_chars=letters)._cuts is None


def test_merged_bytes_keep_only_the_mark_rule():
    model = _model([("<0x0A>", "<0x0A>"), (MARK, "a")])
    assert not model._inert_bytes
    assert model._cuts.fine is None and model._cuts.coarse.findall(f"{MARK}a.\n{MARK}b") == [f"{MARK}a.\n", f"{MARK}b"]


def test_find_cuts_needs_the_mark_in_the_vocabulary():
    assert find_cuts(["a"], ["b"], "ab", inert_bytes=True) is None


@st.composite
def vocabularies(draw):
    """Merges built in rank order from the tokens so far; a merge across classes
    only where the draw allows it (as a non-SentencePiece trainer would)."""
    tokens = list(ALPHABET)
    merges = []
    for left, right, cross in draw(st.lists(st.tuples(st.integers(0, 400), st.integers(0, 400), st.booleans()),
                                            max_size=60)):
        a, b = tokens[left % len(tokens)], tokens[right % len(tokens)]
        if (a + b) in tokens or (MARK in b[:1] and a[-1] != MARK and not cross):
            continue  # "▁" after another character: only in the draws that allow crossing
        if not cross and CLASS_OF.get(a[-1], "mark") not in ("mark", CLASS_OF.get(b[0])):
            continue
        merges.append((a, b))
        tokens.append(a + b)
    return merges


def _config(merges) -> str:
    vocab = {t: i for i, t in enumerate(dict.fromkeys(["<unk>"] + list(ALPHABET) + ["".join(m) for m in merges]))}
    vocab.update({t: len(vocab) + i for i, t in enumerate(BYTE_TOKENS)})
    return json.dumps({
        "version": "1.0", "truncation": None, "padding": None, "added_tokens": [], "post_processor": None,
        "normalizer": {"type": "Replace", "pattern": {"String": " "}, "content": MARK}, "pre_tokenizer": None,
        "decoder": None,
        "model": {"type": "BPE", "dropout": None, "unk_token": "<unk>", "continuing_subword_prefix": None,
                  "end_of_word_suffix": None, "fuse_unk": True, "byte_fallback": True, "ignore_merges": False,
                  "vocab": vocab, "merges": [list(m) for m in merges]}})


@settings(max_examples=150, deadline=None, suppress_health_check=list(HealthCheck))
@given(merges=vocabularies(), parts=st.lists(st.text(ALPHABET + " \nÿ", max_size=12), min_size=3, max_size=12))
def test_random_vocabularies_and_texts_equal_to_tokenizers(merges, parts):
    tokenizers = import_real("tokenizers")
    config = _config(merges)
    text = " ".join(parts) * 2  # past the length below which a word is merged whole
    assert Tokenizer.from_str(config).encode(text) == tokenizers.Tokenizer.from_str(config).encode(text).ids


def test_mistral_is_cut_between_classes_and_equal_to_tokenizers_on_code():
    tokenizers = import_real("tokenizers")
    if not os.path.exists(MISTRAL):
        skip_real(f"no {MISTRAL}")
    from mtok.bench.tokenizer import documents

    mine, ref = Tokenizer.from_file(MISTRAL), tokenizers.Tokenizer.from_file(MISTRAL)
    assert mine.model._cuts.fine is not None
    docs, _ = documents(40, 0, text="multi")
    for doc in docs + [d.replace(" ", "  ") for d in docs[:5]]:
        assert mine.encode(doc) == ref.encode(doc).ids
