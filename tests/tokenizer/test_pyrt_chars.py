"""The character classes of mtok's tokenizer runtime, checked code point by code point against tokenizers."""

from __future__ import annotations

import sys
import unicodedata

import pytest

from support import import_real

tokenizers = import_real("tokenizers")

from mtok.tokenizer.pyrt._chars import WHITE_SPACE, charset  # noqa: E402

pytestmark = [pytest.mark.fast, pytest.mark.unit]

# Characters this Python's unicodedata knows; tokenizers' Rust tables may be newer.
KNOWN = [chr(c) for c in range(sys.maxunicode + 1) if unicodedata.category(chr(c)) not in ("Cn", "Cs")]


def _split_sets(pre_tokenizer, make, pieces_if_hit):
    return {c for c in KNOWN if len(pre_tokenizer.pre_tokenize_str(make(c))) == pieces_if_hit}


def test_punctuation_is_tokenizers_on_every_code_point():
    """The embedded Unicode 8.0 table, on every code point (it does not depend on unicodedata)."""
    punct = tokenizers.pre_tokenizers.Punctuation()
    everything = [chr(c) for c in range(sys.maxunicode + 1) if not 0xD800 <= c < 0xE000]
    theirs = {c for c in everything if len(punct.pre_tokenize_str("a" + c + "a")) == 3}
    ours = charset("punctuation")
    assert {c for c in everything if ord(c) in ours} == theirs


def test_numeric_and_whitespace():
    digits = tokenizers.pre_tokenizers.Digits(individual_digits=True)
    assert {c for c in KNOWN if ord(c) in charset("numeric")} == _split_sets(digits, lambda c: "a" + c + "a", 3)
    split = tokenizers.pre_tokenizers.WhitespaceSplit()
    assert set(WHITE_SPACE) == _split_sets(split, lambda c: "a" + c + "a", 2)


def test_regex_word():
    # Whitespace splits on \w+|[^\w\s]+: "a"+c stays one piece exactly when c is \w.
    ws = tokenizers.pre_tokenizers.Whitespace()
    theirs = {c for c in KNOWN if [w for w, _ in ws.pre_tokenize_str("a" + c)] == ["a" + c]}
    assert {c for c in KNOWN if ord(c) in charset("word")} == theirs
