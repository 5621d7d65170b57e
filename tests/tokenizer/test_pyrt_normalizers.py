"""Normalizers of the pure-Python runtime: unit tests, then differential tests against ``tokenizers``."""

from __future__ import annotations

import json
import os
import unicodedata

import pytest

from mtok.tokenizer import TokenizerError
from mtok.tokenizer.pyrt import crate_tables
from mtok.tokenizer.pyrt.normalizers import NORMALIZERS, aligned_prefix, lowercase, normalizer_from_json
from mtok.tokenizer.pyrt.precompiled import CharsMap, Precompiled
from support import ROOT, import_real, skip_real

pytestmark = pytest.mark.unit

SHARED = os.path.join(ROOT, "..", "shared", "tokenizers")

CORPUS = [
    "Hello World! HÉLLO wörld ÀÉÎÕÜ àéîõü Ççñ",
    "  \t leading and trailing \u3000\u00a0\n",
    "\x00nul \x01\x07\x0b\x0c\x1c\x1f\x7f\x85\x8f\x9f\ufffd\ufeff\u200b\u200d\u00ad end",
    "ΣΑΣ ΌΣΟΣ σας Σ ΑΣ.Σ İstanbul İ ẞ ß Ǆǅǆ K Å ﬁ ﬃ Ⅷ ⓐⒶ",
    "中文字符 日本語のテキスト 한국어 텍스트 𠀀𪜀 丽",
    "e\u0301 a\u0308 n\u0303 \u1e9b\u0323 \u0344 Z\u0351\u0352 o\u0338 =\u0338 <\u0338",
    "ｆｕｌｌｗｉｄｔｈ ＡＢＣ １２３ ｶﾀｶﾅ ㍿ ㌀ ½ ² ℌ ℡",
    "emoji 😀👍🏽👨‍👩‍👧‍👦🇫🇷🇩🇪🇺 ❤️ ✊🏿 #️⃣ 🏳️‍🌈 ©\u200d© a\ufe0f",
    "\r\n\r\n\r \n\u2028\u2029 x\u2581y",
    "हिन्दी क्ष बंगाली অসমীয়া தமிழ் ไทย ພາສາລາວ",
    "Arabic \u0600\u0661 عربي مُشَكَّل \u06dd\u0662 Hebrew עִבְרִית",
    "jamo \u1100\u1161\u11a8 \u1100\u1161 \u1100 \u11a8 \uac00\u11a8 ㄱㅏ ﾡ",
    "x" * 3 + " the  quick   brown\tfox  ",
    "",
    " ",
]

CONFIGS = [
    {"type": "NFC"}, {"type": "NFD"}, {"type": "NFKC"}, {"type": "NFKD"}, {"type": "Lowercase"},
    {"type": "Strip", "strip_left": True, "strip_right": True},
    {"type": "Strip", "strip_left": True, "strip_right": False},
    {"type": "Strip", "strip_left": False, "strip_right": True},
    {"type": "StripAccents"}, {"type": "Nmt"}, {"type": "ByteLevel"},
    {"type": "Replace", "pattern": {"String": " "}, "content": "\u2581"},
    {"type": "Replace", "pattern": {"String": ""}, "content": "_"},
    {"type": "Replace", "pattern": {"Regex": " {2,}"}, "content": " "},
    {"type": "Replace", "pattern": {"Regex": r"\s+"}, "content": " "},
    {"type": "Replace", "pattern": {"Regex": r"(?<=\p{L})\b|^"}, "content": "|"},
    {"type": "Prepend", "prepend": "\u2581"},
    {"type": "BertNormalizer", "clean_text": True, "handle_chinese_chars": True, "strip_accents": None, "lowercase": True},
    {"type": "BertNormalizer", "clean_text": True, "handle_chinese_chars": True, "strip_accents": None, "lowercase": False},
    {"type": "BertNormalizer", "clean_text": False, "handle_chinese_chars": False, "strip_accents": True, "lowercase": False},
    {"type": "BertNormalizer", "clean_text": True, "handle_chinese_chars": False, "strip_accents": False, "lowercase": True},
    {"type": "Sequence", "normalizers": [
        {"type": "Prepend", "prepend": "\u2581"}, {"type": "Replace", "pattern": {"String": " "}, "content": "\u2581"}]},
    {"type": "Sequence", "normalizers": [{"type": "NFD"}, {"type": "StripAccents"}, {"type": "Lowercase"}]},
    {"type": "Sequence", "normalizers": []},
]


# -- unit tests ----------------------------------------------------------------------

def _norm(d, s):
    return normalizer_from_json(d).normalize(s)


def test_registry_and_loading():
    assert set(NORMALIZERS) >= {
        "NFC", "NFD", "NFKC", "NFKD", "Lowercase", "Strip", "StripAccents", "Replace", "Prepend",
        "BertNormalizer", "Precompiled", "Sequence", "Nmt", "ByteLevel",
    }
    assert normalizer_from_json(None) is None
    with pytest.raises(TokenizerError, match="Frobnicate"):
        normalizer_from_json({"type": "Frobnicate"})
    with pytest.raises(TokenizerError):
        normalizer_from_json({"type": "Replace", "pattern": {"Glob": "*"}, "content": ""})
    # files from before the "type" tag
    assert _norm({"clean_text": True, "handle_chinese_chars": False, "strip_accents": None, "lowercase": True}, "ÀB") == "ab"


def test_lowercase_is_per_character():
    assert lowercase("ΣΑΣ ΑΣ.") == "σασ ασ."  # no final sigma
    assert lowercase("İ") == "i\u0307"
    assert lowercase("ABC") == "abc"


def test_strip_uses_white_space_not_isspace():
    assert _norm({"type": "Strip", "strip_left": True, "strip_right": True}, "\x1c a \u3000") == "\x1c a"


def test_bert_normalizer():
    bert = {"type": "BertNormalizer", "clean_text": True, "handle_chinese_chars": True,
            "strip_accents": None, "lowercase": True}
    assert _norm(bert, "Héllo\x00\tWorld中文\ufffd") == "hello world 中  文 "
    assert _norm(dict(bert, lowercase=False), "Héllo") == "Héllo"  # null strip_accents follows lowercase
    assert _norm(dict(bert, lowercase=False, strip_accents=True), "Héllo") == "Hello"
    assert _norm(dict(bert, lowercase=True, strip_accents=False), "Héllo") == "héllo"


def test_replace_and_prepend():
    assert _norm({"type": "Replace", "pattern": {"String": " "}, "content": "\u2581"}, "a b") == "a\u2581b"
    assert _norm({"type": "Replace", "pattern": {"Regex": " {2,}"}, "content": " "}, "a   b  c") == "a b c"
    assert _norm({"type": "Replace", "pattern": {"String": ""}, "content": "_"}, "") == ""
    assert _norm({"type": "Prepend", "prepend": "\u2581"}, "") == ""
    assert _norm({"type": "Prepend", "prepend": "\u2581"}, "x") == "\u2581x"


def test_empty_charsmap_is_identity():
    assert _norm({"type": "Precompiled", "precompiled_charsmap": ""}, "A\r\nb") == "A\r\nb"
    assert _norm({"type": "Precompiled", "precompiled_charsmap": None}, "A") == "A"
    with pytest.raises(TokenizerError):
        normalizer_from_json({"type": "Precompiled", "precompiled_charsmap": "AAA="})


def _t5_normalizer_json():
    path = os.path.join(SHARED, "t5-small.json")
    if not os.path.exists(path):
        skip_real(f"no t5-small.json in {SHARED} (../shared/tokenizers is not on this machine)")
    with open(path, encoding="utf-8") as f:
        return json.load(f)["normalizer"]


def test_precompiled_clusters_and_prefix_rule():
    norm = normalizer_from_json(_t5_normalizer_json())
    assert isinstance(norm, Precompiled) and isinstance(norm.charsmap, CharsMap)
    assert norm.normalize("e\u0301") == "é"  # a two-character key
    assert norm.normalize("\r\n") == " "  # one cluster: the shortest key '\r' replaces all of it
    assert norm.normalize("²\u0301") == "2"  # likewise the mark after a mapped character is dropped
    assert norm.normalize("ｆｕｌｌ") == "full"
    assert norm.normalize("plain ascii") == "plain ascii"


# -- differential tests against tokenizers ----------------------------------------------

def _hf(d):
    tokenizers = import_real("tokenizers")
    doc = {
        "version": "1.0", "truncation": None, "padding": None, "added_tokens": [], "normalizer": d,
        "pre_tokenizer": None, "post_processor": None, "decoder": None,
        "model": {"type": "WordLevel", "vocab": {"[UNK]": 0}, "unk_token": "[UNK]"},
    }
    return tokenizers.Tokenizer.from_str(json.dumps(doc)).normalizer


def _check(d, texts):
    ours, theirs = normalizer_from_json(d), _hf(d)
    for text in texts:
        assert ours.normalize(text) == theirs.normalize_str(text), (d, text)


@pytest.mark.parametrize("config", CONFIGS, ids=lambda d: json.dumps(d)[:60])
def test_matches_tokenizers_on_corpus(config):
    _check(config, CORPUS)


def test_t5_precompiled_matches_tokenizers_on_corpus():
    _check(_t5_normalizer_json(), CORPUS)


def _assigned(lo=0, hi=0x30000):
    return [c for c in range(lo, hi) if unicodedata.category(chr(c)) not in ("Cn", "Cs")]


def test_t5_precompiled_clusters_on_every_bmp_character():
    """'²' is a key: a character that joins its cluster is dropped with it, others are kept."""
    d = _t5_normalizer_json()
    ours, theirs = normalizer_from_json(d), _hf(d)
    for cp in _assigned(0x20, 0x10000):
        s = "²" + chr(cp) + "a" + chr(cp) + "\u0301"
        assert ours.normalize(s) == theirs.normalize_str(s), hex(cp)


def _removed(norm, cps):
    """Which of ``cps`` a filtering normalizer drops (each placed between two 'a's)."""
    text = "a" + "a".join(map(chr, cps)) + "a"
    pieces = norm.normalize_str(text).split("a")[1:-1]
    assert len(pieces) == len(cps)
    return {c for c, piece in zip(cps, pieces) if not piece}


def _table(name):
    return {c for lo, hi in crate_tables.ranges(getattr(crate_tables, name)) for c in range(lo, hi + 1)}


def test_crate_tables_match_tokenizers():
    assigned = [c for c in _assigned(0, 0x110000) if c != ord("a")]
    strip_accents = _hf({"type": "StripAccents"})
    assert _removed(strip_accents, assigned) == _table("MARK_9") & set(assigned)
    stable = [c for c in assigned if unicodedata.normalize("NFD", chr(c)) == chr(c)]
    bert_accents = _hf({"type": "BertNormalizer", "clean_text": False, "handle_chinese_chars": False,
                        "strip_accents": True, "lowercase": False})
    assert _removed(bert_accents, stable) == _table("NONSPACING_MARK_8") & set(stable)
    clean = _hf({"type": "BertNormalizer", "clean_text": True, "handle_chinese_chars": False,
                 "strip_accents": False, "lowercase": False})
    visible = [c for c in assigned if not chr(c).isspace() and c not in (0x85, 0xA0)]
    expected = {c for c in visible if unicodedata.category(chr(c)) in ("Cc", "Co")} | {0, 0xFFFD}
    assert _removed(clean, visible) == (expected | _table("FORMAT_8")) & set(visible)


@pytest.mark.parametrize("form", ["NFD", "NFKD", "NFC", "NFKC"])
def test_unicode_forms_match_tokenizers_on_every_assigned_character(form):
    ours, theirs = normalizer_from_json({"type": form}), _hf({"type": form})
    cps = [c for c in _assigned(0, 0x110000) if c != 10]
    text = "\n".join(map(chr, cps))
    assert ours.normalize(text).split("\n") == theirs.normalize_str(text).split("\n")
    # canonical reordering: a mark's combining class against classes 1 and 240
    marks = [c for c in cps if unicodedata.combining(chr(c))]
    text = "\n".join("a%s\u0334 a\u0345%s" % (chr(c), chr(c)) for c in marks)
    assert ours.normalize(text) == theirs.normalize_str(text)


def test_lowercase_matches_rust_on_every_assigned_character():
    theirs = _hf({"type": "Lowercase"})
    cps = [c for c in _assigned(0, 0x110000) if c != 0x7C]
    text = "|".join(map(chr, cps))
    assert lowercase(text).split("|") == theirs.normalize_str(text).split("|")


def _hypothesis_text():
    st = import_real("hypothesis.strategies")
    pieces = "aAzZ09 \t\n\r\x0b\x1c\x85\xa0\u3000\u2028ΣσςİßẞK\u0301\u0308\u200d\ufe0f\ufeff\x00中ｶﾞ가\u1100\u1161\u11a8😀🏽🇫\u0915\u094d\u0937²ﬁ"
    assigned = st.characters(blacklist_categories=("Cs", "Cn"), max_codepoint=0x2FFFF)
    return st.text(st.one_of(st.sampled_from(pieces), assigned), max_size=30)


def test_hypothesis_strings():
    import_real("tokenizers")
    hypothesis = import_real("hypothesis")
    configs = CONFIGS + ([_t5_normalizer_json()] if os.path.exists(os.path.join(SHARED, "t5-small.json")) else [])
    pairs = [(normalizer_from_json(d), _hf(d)) for d in configs]

    @hypothesis.settings(max_examples=int(os.environ.get("PYRT_EXAMPLES", 400)), deadline=None, derandomize=True)
    @hypothesis.given(text=_hypothesis_text(), index=hypothesis.strategies.integers(0, len(pairs) - 1))
    def run(text, index):
        ours, theirs = pairs[index]
        assert ours.normalize(text) == theirs.normalize_str(text)

    run()


# -- alignment of the start (Metaspace prepend_scheme="first" depends on it) ------------

def _hf_aligned_prefix(d, text):
    """Leading characters of the normalized text whose original offset is 0, per tokenizers."""
    tokenizers = import_real("tokenizers")
    out = _hf(d).normalize_str(text)
    if not out:
        return 0
    model = {"type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": None,
             "end_of_word_suffix": None, "fuse_unk": False, "byte_fallback": False, "ignore_merges": False,
             "vocab": {c: i for i, c in enumerate(sorted(set(out)))}, "merges": []}
    doc = {"version": "1.0", "truncation": None, "padding": None, "added_tokens": [], "normalizer": d,
           "pre_tokenizer": None, "post_processor": None, "decoder": None, "model": model}
    offsets = tokenizers.Tokenizer.from_str(json.dumps(doc)).encode(text).offsets
    count = 0
    while count < len(offsets) and offsets[count][0] == 0:
        count += 1
    return count


ALIGN_CORPUS = CORPUS + [
    "  hello", "\x01\x02ab½c", "abc", "ab", "½x", "\r\nx", "e\u0301x", "\u4e2d\u6587", "\x00\ufffd a",
    "ﬁx", "ΣA", "İx", "\u2581x", "\u2581\u2581", "x\u2581", "\x01", "\x01\x01\x01", "\x01e\u0301",
]
ALIGN_CONFIGS = CONFIGS + [
    {"type": "Replace", "pattern": {"String": "ab"}, "content": "X"},
    {"type": "Replace", "pattern": {"String": "ab"}, "content": ""},
    {"type": "Replace", "pattern": {"Regex": "^\\s*"}, "content": ""},
    {"type": "Replace", "pattern": {"Regex": "^"}, "content": "<"},
    {"type": "Sequence", "normalizers": [
        {"type": "Prepend", "prepend": "\u2581"}, {"type": "Replace", "pattern": {"String": "\u2581"}, "content": ""}]},
    {"type": "Sequence", "normalizers": [
        {"type": "Strip", "strip_left": True, "strip_right": False}, {"type": "Prepend", "prepend": "\u2581"}]},
]


@pytest.mark.parametrize("config", ALIGN_CONFIGS, ids=lambda d: json.dumps(d)[:60])
def test_aligned_prefix_matches_tokenizers(config):
    ours = normalizer_from_json(config)
    for text in ALIGN_CORPUS:
        assert aligned_prefix(ours, text) == _hf_aligned_prefix(config, text), (config, text)


def test_aligned_prefix_of_t5_precompiled():
    d = _t5_normalizer_json()
    ours = normalizer_from_json(d)
    for text in ALIGN_CORPUS:
        assert aligned_prefix(ours, text) == _hf_aligned_prefix(d, text), text
    assert ours.keeps_start("\x01\x02ab")  # the quirk: deleted leading characters leave no trace


def test_aligned_prefix_hypothesis():
    import_real("tokenizers")
    hypothesis = import_real("hypothesis")
    configs = ALIGN_CONFIGS + ([_t5_normalizer_json()] if os.path.exists(os.path.join(SHARED, "t5-small.json")) else [])
    ours = [normalizer_from_json(d) for d in configs]
    st = hypothesis.strategies
    prefix = st.text(st.sampled_from(" \t\x01\x00\ufffd\u2581e\u0301ab½ﬁ中"), max_size=4)

    @hypothesis.settings(max_examples=int(os.environ.get("PYRT_EXAMPLES", 150)), deadline=None, derandomize=True)
    @hypothesis.given(head=prefix, tail=_hypothesis_text(), index=st.integers(0, len(configs) - 1))
    def run(head, tail, index):
        text = head + tail
        assert aligned_prefix(ours[index], text) == _hf_aligned_prefix(configs[index], text)

    run()
