"""Unigram, WordPiece and WordLevel models of the pure-Python runtime, against ``tokenizers``."""

from __future__ import annotations

import json
import os
import random

import pytest

from mtok.tokenizer import TokenizerError
from mtok.tokenizer.pyrt.unigram import Unigram, serde_f64
from mtok.tokenizer.pyrt.wordlevel import WordLevel
from mtok.tokenizer.pyrt.wordpiece import WordPiece
from support import ROOT, import_real, skip_real

pytestmark = pytest.mark.unit

SHARED = os.path.join(ROOT, "..", "shared", "tokenizers")

_SYLLABLES = {
    "latin": ["ka", "to", "ri", "ne", "sa", "mo", "lu", "pe", "di", "ga", "the", "ing", "er", "st", "qu"],
    "accents": ["é", "è", "ü", "ö", "ñ", "ç", "ß", "å", "ø", "ł"],
    "greek": ["κα", "λη", "με", "ρα", "σο", "τι", "ος", "ου"],
    "cyrillic": ["при", "вет", "мир", "до", "ска", "ть", "ый"],
    "cjk": ["中", "文", "字", "日", "本", "語", "学", "生"],
    "kana": ["か", "な", "カ", "タ", "ナ", "の", "は"],
    "hangul": ["한", "국", "어", "텍", "스", "트"],
    "devanagari": ["हि", "न्", "दी", "क्ष", "मा", "रा"],
    "arabic": ["عر", "بي", "سل", "ام"],
    "emoji": ["😀", "👍🏽", "🇫🇷", "❤️"],
    "digits": ["0", "1", "2", "3", "42", "١٢", "७"],
}


def _corpus(n_lines=300, seed=7):
    rng = random.Random(seed)
    scripts = list(_SYLLABLES)
    lines = []
    for _ in range(n_lines):
        words = []
        for _ in range(rng.randint(3, 12)):
            script = rng.choice(scripts)
            words.append("".join(rng.choice(_SYLLABLES[script]) for _ in range(rng.randint(1, 4))))
        lines.append(" ".join(words))
    return lines


CORPUS = _corpus()
WORDS = sorted({w for line in CORPUS for w in line.split()}) + [
    "", "x", "zzzz", "qqqq", "∰", "a\u0301", "€€", "\U0001f9ff", "ka" * 60, "中" * 120, "Ω", "the", "theing",
]


# -- unit tests -------------------------------------------------------------------------

def _unigram_example(**kw):
    pieces = [("<unk>", 0.0), ("a", 0.0), ("b", 0.0), ("c", 0.0), ("d", 0.0), ("cd", 1.0), ("ab", 2.0),
              ("abc", 5.0), ("abcd", 10.0)]
    return Unigram(pieces, **kw)


def test_unigram_viterbi_and_unknown_fusion():
    model = _unigram_example(unk_id=0)
    assert model.segment("abcdacdxx") == [("abcd", 8), ("a", 1), ("cd", 5), ("xx", None)]
    assert model.tokenize("abcdacdxx") == [8, 1, 5, 0]
    assert model.tokenize("") == []
    assert model.id_to_token(8) == "abcd" and model.id_to_token(99) is None
    assert model.get_vocab_size() == 9


def test_unigram_byte_fallback_and_missing_unk():
    pieces = [("<unk>", 0.0), ("a", -1.0)] + [(f"<0x{b:02X}>", -5.0) for b in range(256)]
    model = Unigram(pieces, unk_id=0, byte_fallback=True)
    assert model.tokenize("aé") == [1, 2 + 0xC3, 2 + 0xA9]
    partial = Unigram(pieces[:2] + [("<0xC3>", -5.0)], unk_id=0, byte_fallback=True)
    assert partial.tokenize("aé") == [1, 0]  # a byte token is missing: the whole run is unknown
    with pytest.raises(TokenizerError):
        _unigram_example(unk_id=None).tokenize("ax")
    with pytest.raises(TokenizerError):
        Unigram([("a", 0.0)], unk_id=3)


def test_scores_are_read_as_serde_json_reads_them():
    assert serde_f64("-12.130167007446289") == float.fromhex("-0x1.842a53fffffffp+3")  # Python: ...540000000p+3
    assert serde_f64("-5.129043102264404") == -5.129043102264404
    assert [serde_f64(t) for t in ("0", "-0.0", "1e-05", "1.5E3", "123")] == [0.0, -0.0, 1e-05, 1500.0, 123.0]
    assert serde_f64("1e-400") == 0.0
    # beyond 20 digits serde_json ignores digits, and accepts a fraction digit that fits again
    assert serde_f64("18446744073709551616.5") == 2.0**64
    assert serde_f64("1.00000000000000000000001") == 1.0


NUMBERS = [
    "18446744073709551616.5", "1.00000000000000000000001", "-12.130167007446289", "123456789012345678901234.5",
    "0.000000000000000000000000000123456789123456789", "1844674407370955161.5", "9.999999999999999e-310",
    "2.2250738585072014e-308", "4.9e-324", "-0.1", "0.30000000000000004", "1e22", "1e23", "-3.4028234663852886e38",
]


def test_serde_f64_matches_tokenizers():
    tokenizers = import_real("tokenizers")
    vocab = ",".join('["p%d", %s]' % (i, t) for i, t in enumerate(NUMBERS))
    doc = ('{"version":"1.0","truncation":null,"padding":null,"added_tokens":[],"normalizer":null,'
           '"pre_tokenizer":null,"post_processor":null,"decoder":null,'
           '"model":{"type":"Unigram","unk_id":0,"vocab":[%s]}}' % vocab)
    # tokenizers writes its f64 values back in shortest round-trip form, which Python reads exactly
    back = json.loads(tokenizers.Tokenizer.from_str(doc).to_str())["model"]["vocab"]
    assert [v for _, v in back] == [serde_f64(t) for t in NUMBERS]
    with pytest.raises(TokenizerError):
        serde_f64("1e400")
    # ties between equal-scoring paths fall on those bits
    vocab = [["<unk>", 0.0], ["-", -5.129043102264404], ["---", -12.130167007446289]]
    assert Unigram.from_json({"unk_id": 0, "vocab": vocab}).tokenize("-" * 7) == [2, 2, 1]  # as tokenizers
    assert Unigram([tuple(p) for p in vocab], unk_id=0).tokenize("-" * 7) == [1, 2, 2]  # Python's floats


def test_wordpiece():
    vocab = {"[UNK]": 0, "un": 1, "##aff": 2, "##able": 3, "a": 4, "##a": 5, "aff": 6}
    model = WordPiece(vocab, max_input_chars_per_word=8)
    assert model.tokenize("unaffable") == [0]  # 9 characters > 8
    assert WordPiece(vocab).tokenize("unaffable") == [1, 2, 3]
    assert WordPiece(vocab).tokenize("unaffx") == [0]
    assert WordPiece(vocab).tokenize("aaa") == [4, 5, 5]
    assert WordPiece(vocab).tokenize("") == []
    with pytest.raises(TokenizerError):
        WordPiece({"a": 0}).tokenize("b")


def test_wordlevel():
    model = WordLevel({"hello": 0, "<unk>": 1})
    assert model.tokenize("hello") == [0] and model.tokenize("bye") == [1]
    assert model.id_to_token(1) == "<unk>"
    with pytest.raises(TokenizerError):
        WordLevel({"hello": 0}, unk_token="[UNK]").tokenize("bye")


# -- differential tests ------------------------------------------------------------------

def _hf_model_tokenizer(model):
    tokenizers = import_real("tokenizers")
    return tokenizers.Tokenizer(model)


def _check(ours, theirs, words):
    for word in words:
        if not word:  # the pipeline never hands a model an empty word
            continue
        assert ours.tokenize(word) == theirs.encode(word, add_special_tokens=False).ids, word


@pytest.fixture(scope="module")
def trained():
    tokenizers = import_real("tokenizers")
    from tokenizers import models, pre_tokenizers, trainers

    out = {}
    tok = tokenizers.Tokenizer(models.Unigram())
    tok.pre_tokenizer = pre_tokenizers.Metaspace()
    tok.train_from_iterator(CORPUS, trainers.UnigramTrainer(vocab_size=400, special_tokens=["<unk>"], unk_token="<unk>"))
    out["unigram"] = json.loads(tok.to_str())["model"]
    tok = tokenizers.Tokenizer(models.WordPiece(unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    tok.train_from_iterator(CORPUS, trainers.WordPieceTrainer(vocab_size=500, special_tokens=["[UNK]"]))
    out["wordpiece"] = json.loads(tok.to_str())["model"]
    tok = tokenizers.Tokenizer(models.WordLevel(unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    tok.train_from_iterator(CORPUS, trainers.WordLevelTrainer(vocab_size=200, special_tokens=["<unk>"]))
    out["wordlevel"] = json.loads(tok.to_str())["model"]
    return out


def _hf_unigram(d):
    """tokenizers' Unigram as tokenizers reads it from JSON (its float parsing matters)."""
    tokenizers = import_real("tokenizers")
    doc = {"version": "1.0", "truncation": None, "padding": None, "added_tokens": [], "normalizer": None,
           "pre_tokenizer": None, "post_processor": None, "decoder": None, "model": dict(d, type="Unigram")}
    return tokenizers.Tokenizer.from_str(json.dumps(doc))


def _hf_wordpiece(d):
    models = import_real("tokenizers.models")

    return _hf_model_tokenizer(models.WordPiece(d["vocab"], unk_token=d["unk_token"],
                                                max_input_chars_per_word=d["max_input_chars_per_word"]))


def _meta_words():
    return ["\u2581" + w for w in WORDS] + WORDS


def test_trained_unigram(trained):
    d = trained["unigram"]
    _check(Unigram.from_json(d), _hf_unigram(d), _meta_words())


def test_trained_unigram_with_byte_fallback(trained):
    d = dict(trained["unigram"], byte_fallback=True)
    d["vocab"] = d["vocab"] + [[f"<0x{b:02X}>", -20.0] for b in range(256) if b != 0x9F]
    _check(Unigram.from_json(d), _hf_unigram(d), _meta_words())


def test_trained_wordpiece_and_wordlevel(trained):
    d = trained["wordpiece"]
    _check(WordPiece.from_json(d), _hf_wordpiece(d), WORDS)
    for limit in (3, 10):
        d2 = dict(d, max_input_chars_per_word=limit)
        _check(WordPiece.from_json(d2), _hf_wordpiece(d2), WORDS)
    models = import_real("tokenizers.models")
    d = trained["wordlevel"]
    _check(WordLevel.from_json(d), _hf_model_tokenizer(models.WordLevel(d["vocab"], unk_token=d["unk_token"])), WORDS)


def _shared_model(name):
    path = os.path.join(SHARED, name)
    if not os.path.exists(path):
        skip_real(f"no {name} in {SHARED} (../shared/tokenizers is not on this machine)")
    with open(path, encoding="utf-8") as f:
        return json.load(f)["model"]


def test_t5_unigram_vocabulary():
    d = _shared_model("t5-small.json")
    words = _meta_words() + ["\u2581Hello", "\u2581world!", "\u2581\u2581\u2581"] + ["\u2581" + "-" * n for n in range(1, 60)]
    _check(Unigram.from_json(d), _hf_unigram(d), words)


def test_bert_wordpiece_vocabulary():
    d = _shared_model("bert-base-uncased.json")
    _check(WordPiece.from_json(d), _hf_wordpiece(d), WORDS + ["unaffable", "tokenization", "hello", "##"])


def test_hypothesis_words(trained):
    hypothesis = import_real("hypothesis")
    st = hypothesis.strategies
    alphabet = "".join(sorted({c for line in CORPUS for c in line if c != " "})) + "xyzQ∰\u2581"
    pairs = [
        (Unigram.from_json(trained["unigram"]), _hf_unigram(trained["unigram"])),
        (WordPiece.from_json(trained["wordpiece"]), _hf_wordpiece(trained["wordpiece"])),
    ]

    @hypothesis.settings(max_examples=int(os.environ.get("PYRT_EXAMPLES", 300)), deadline=None, derandomize=True)
    @hypothesis.given(word=st.text(st.sampled_from(alphabet), max_size=24), index=st.integers(0, len(pairs) - 1))
    def run(word, index):
        ours, theirs = pairs[index]
        hypothesis.assume(word)
        assert ours.tokenize(word) == theirs.encode(word, add_special_tokens=False).ids

    run()
