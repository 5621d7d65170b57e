"""mtok's pure-Python tokenizer runtime on its own: no ``tokenizers`` needed (the ``core`` flavour).

Expected values were produced once with ``tokenizers`` 0.23.3 and are kept here so
that the runtime is checked where that library is not installed.
"""

from __future__ import annotations

import copy
import json
import os

import pytest
from prompts import prompts

from mtok.tokenizer import DEFAULT_TOKENIZER_DIR, TokenizerError
from mtok.tokenizer.load import load_tokenizer
from mtok.tokenizer.pyrt import Tokenizer
from mtok.tokenizer.pyrt import _split
from mtok.tokenizer.pyrt.bpe import BPE
from mtok.tokenizer.pyrt.decoders import decoder_from_json
from mtok.tokenizer.pyrt.pre_tokenizers import pre_tokenizer_from_json

DEFAULT_JSON = os.path.join(DEFAULT_TOKENIZER_DIR, "tokenizer.json")
pytestmark = [pytest.mark.fast, pytest.mark.unit]

GOLDEN = [
    ("Hello, world!", [5823, 12, 3791, 1580, 1]),
    ("The quick brown fox jumps over the lazy dog.",
     [500, 6241, 2755, 78, 275, 79, 88, 7617, 83, 883, 264, 323, 7247, 510, 71, 14]),
    ("def add(a, b):\n    return a + b\n", [888, 645, 8, 65, 12, 281, 1181, 455, 477, 259, 1226, 281, 199]),
    ("Ünïcödé: 日本語, Привет, 😀!",
     [128, 251, 78, 128, 108, 67, 128, 115, 68, 128, 103, 26, 221, 163, 246, 99, 163, 251, 106, 165, 104, 253,
      12, 221, 141, 254, 142, 223, 141, 117, 141, 111, 141, 114, 142, 225, 12, 221, 173, 254, 247, 223, 1]),
    ("  leading and trailing  ", [221, 2934, 330, 2543, 261]),
    ("<|endoftext|>", [0]),
    ("end of text<|endoftext|>next", [471, 315, 823, 0, 3408]),
    ("", []),
]  # fmt: skip

PROMPTS = [
    "Hello! Can you tell me a joke about computers?",
    "<|system|>You are a helpful assistant.\n<|user|>Summarise this:\n\n\tIt was a dark and stormy night.",
    "def fib(n):\n    if n < 2:\n        return n\n    return fib(n - 1) + fib(n - 2)\r\n",
    "Translate to French: 'The cat sat on the mat.' → « Le chat … »",
    "Числа: 1, 22, 333, 4444; 数字：一二三；숫자: 일이삼; अंक: १२३; ตัวเลข ๑๒๓",
    "emoji 👩‍👩‍👧‍👦 🏳️‍🌈 👍🏿 and combining é (e\u0301) and\u00a0nbsp\u3000ideographic space",
    "   spaces   everywhere   \n\n\n",
    "control \x00\x01\x1f\x7f chars and a lone \ufffd",
]


@pytest.fixture(scope="module")
def default() -> Tokenizer:
    return Tokenizer.from_file(DEFAULT_JSON)


@pytest.mark.parametrize("text,ids", GOLDEN)
def test_default_golden_ids(default, text, ids):
    assert default.encode(text) == ids
    assert default.encode(text, add_special_tokens=False) == ids  # no post-processor: nothing added


@pytest.mark.parametrize("text", PROMPTS)
def test_default_round_trips_prompts(default, text):
    ids = default.encode(text)
    assert default.decode(ids) == text
    assert default.decode(ids, skip_special_tokens=False) == text


def test_default_round_trips_the_test_prompts(default):
    """The echo engine returns the prompt: the default tokenizer must give it back exactly."""
    for text in prompts():
        assert default.decode(default.encode(text)) == text


def test_default_eos_and_special_skipping(default):
    ids = default.encode("a<|endoftext|>b")
    assert ids[1] == default.token_to_id("<|endoftext|>") == 0
    assert default.decode(ids) == "ab"
    assert default.decode(ids, skip_special_tokens=False) == "a<|endoftext|>b"
    assert default.get_vocab_size() == 8192
    decoder = default.get_added_tokens_decoder()
    assert decoder[0].content == "<|endoftext|>" and decoder[0].special


def test_load_tokenizer_python_backend_finds_default():
    tok = load_tokenizer(None, backend="python")
    assert tok.backend == "python"
    assert tok.eos_token_ids == {0}
    assert tok.special_ids == {0}
    assert tok.decode(tok.encode(PROMPTS[0])) == PROMPTS[0]
    assert tok.decode([5823, 0, 12], spaces_between_special_tokens=False, skip_special_tokens=False) == "Hello<|endoftext|>,"


def test_decode_skips_unknown_ids(default):
    assert default.decode([5823, 10**6, 12]) == "Hello,"


# -- load-time refusal ---------------------------------------------------------------

def _config() -> dict:
    with open(DEFAULT_JSON, encoding="utf-8") as f:
        return json.load(f)


@pytest.mark.parametrize(
    "field,value,words",
    [
        ("pre_tokenizer", {"type": "NoSuchPreTokenizer"}, ["pre_tokenizer", "NoSuchPreTokenizer"]),
        ("decoder", {"type": "NoSuchDecoder"}, ["decoder", "NoSuchDecoder"]),
        ("post_processor", {"type": "NoSuchProcessor"}, ["post_processor", "NoSuchProcessor"]),
        ("normalizer", {"type": "NoSuchNormalizer"}, ["NoSuchNormalizer"]),
        ("pre_tokenizer", {"type": "Sequence", "pretokenizers": [{"type": "Bogus"}]}, ["pre_tokenizer", "Bogus"]),
        ("decoder", {"type": "Sequence", "decoders": [{"type": "ByteFallback"}, {"type": "Bogus"}]}, ["decoder", "Bogus"]),
        ("pre_tokenizer", {"type": "Split", "pattern": {"Regex": "a"}, "behavior": "Sideways", "invert": False},
         ["Split", "Sideways"]),
    ],
)
def test_unknown_components_refused_at_load(field, value, words):
    config = _config()
    config[field] = value
    with pytest.raises(TokenizerError) as err:
        Tokenizer(config)
    for w in words:
        assert w in str(err.value)


def test_unknown_model_type_and_bad_merges_refused():
    config = _config()
    config["model"]["type"] = "Quantum"
    with pytest.raises(TokenizerError, match="Quantum"):
        Tokenizer(config)
    config = _config()
    config["model"]["merges"] = [["not-in-vocab-\u2603", "x"]]
    with pytest.raises(TokenizerError, match="vocabulary"):
        Tokenizer(config)


def test_model_type_inferred_when_missing():
    config = _config()
    del config["model"]["type"]
    assert Tokenizer(config).encode("Hello, world!") == GOLDEN[0][1]
    with pytest.raises(TokenizerError, match="model type"):
        Tokenizer(dict(config, model={"vocab": 3}))


def test_python_backend_names_the_file_and_component(tmp_path):
    config = _config()
    config["decoder"] = {"type": "Mystery"}
    path = tmp_path / "tokenizer.json"
    path.write_text(json.dumps(config), encoding="utf-8")
    with pytest.raises(TokenizerError) as err:
        load_tokenizer(str(path), backend="python")
    assert "Mystery" in str(err.value) and "tokenizer.json" in str(err.value)


# -- components ------------------------------------------------------------------------

def test_bpe_merge_forms_and_options():
    vocab = {"<unk>": 0, "a": 1, "b": 2, "ab": 3, "c": 4, "abc": 5, "<0x64>": 6}
    pairs = BPE.from_json({"vocab": vocab, "merges": [["a", "b"], ["ab", "c"]]})
    strings = BPE.from_json({"vocab": vocab, "merges": ["a b", "ab c"]})
    for word, ids in [("abc", [5]), ("abab", [3, 3]), ("cab", [4, 3]), ("", [])]:
        assert pairs.tokenize(word) == strings.tokenize(word) == ids
    unk = BPE.from_json({"vocab": vocab, "merges": ["a b"], "unk_token": "<unk>", "fuse_unk": True})
    assert unk.tokenize("axyb") == [1, 0, 2]
    no_fuse = BPE.from_json({"vocab": vocab, "merges": ["a b"], "unk_token": "<unk>"})
    assert no_fuse.tokenize("axyb") == [1, 0, 0, 2]
    fallback = BPE.from_json({"vocab": vocab, "merges": ["a b"], "unk_token": "<unk>", "byte_fallback": True})
    assert fallback.tokenize("adx") == [1, 6, 0]
    whole = BPE.from_json({"vocab": vocab, "merges": [], "ignore_merges": True})
    assert whole.tokenize("abc") == [5] and whole.tokenize("cab") == [4, 1, 2]
    with pytest.raises(TokenizerError):
        BPE.from_json({"vocab": vocab, "merges": ["a b c"]})


def test_bpe_prefix_suffix():
    vocab = {"a": 0, "##b": 1, "##b</w>": 2, "a##b": 3, "ab</w>": 4, "b": 5}
    prefixed = BPE.from_json({"vocab": {"a": 0, "##b": 1, "ab": 2}, "merges": ["a ##b"], "continuing_subword_prefix": "##"})
    assert prefixed.tokenize("ab") == [2]
    suffixed = BPE.from_json({"vocab": vocab, "merges": [], "end_of_word_suffix": "</w>"})
    assert suffixed.tokenize("b") == []  # "b</w>" unknown and no unk token: dropped


def test_bpe_long_words_match_the_linear_merge():
    vocab = {c: i for i, c in enumerate("abcd")}
    merges = []
    for a in "abcd":
        for b in "abcd":
            vocab[a + b] = len(vocab)
            merges.append((a, b))
    for x in ("ab", "cd", "ba"):
        for y in ("ab", "cd", "dc"):
            if x + y not in vocab:
                vocab[x + y] = len(vocab)
            merges.append((x, y))
    model = BPE(vocab, merges)
    word = "abcdabdcbadcabaaaabbbbcdcdcd" * 20
    assert len(word) > 256  # tokenize() takes the heap path
    assert model.tokenize(word) == _linear_reference(model, word)
    assert model.tokenize(word[:100]) == _linear_reference(model, word[:100])


def _linear_reference(model: BPE, word: str):
    ids = model._symbols(word)
    while len(ids) > 1:
        best = None
        for i in range(len(ids) - 1):
            v = model._merges.get(ids[i] * model._width + ids[i + 1])
            if v is not None and (best is None or v < best[0]):
                best = (v, i)
        if best is None:
            break
        v, i = best
        ids[i : i + 2] = [model._merged[v]]  # v: the merge's rank
    return ids


@pytest.mark.parametrize(
    "behavior,pieces",
    [
        ("Removed", ["the", "final", "countdown"]),
        ("Isolated", ["the", "-", "final", "-", "-", "countdown"]),
        ("MergedWithPrevious", ["the-", "final-", "-", "countdown"]),
        ("MergedWithNext", ["the", "-final", "-", "-countdown"]),
        ("Contiguous", ["the", "-", "final", "--", "countdown"]),
    ],
)
def test_split_behaviors(behavior, pieces):
    split = pre_tokenizer_from_json({"type": "Split", "pattern": {"String": "-"}, "behavior": behavior, "invert": False})
    assert split.split("the-final--countdown", True) == pieces


def test_split_spans_empty_matches():
    # tokenizers: Split(Regex("x|(?=b)"), "merged_with_next") gives ['xa', 'b'] and ['xb'].
    from mtok.tokenizer.pyrt.onig import compile_onig

    regex = compile_onig("x|(?=b)")
    assert _split.split("xab", _split.regex_spans(regex, "xab"), "MergedWithNext") == ["xa", "b"]
    assert _split.split("xb", _split.regex_spans(regex, "xb"), "MergedWithNext") == ["xb"]


@pytest.mark.parametrize(
    "config,text,words",
    [
        ({"type": "Whitespace"}, "Hey man!  How're\tyou?", ["Hey", "man", "!", "How", "'", "re", "you", "?"]),
        ({"type": "WhitespaceSplit"}, "a\u3000b\x1cc\u00a0d", ["a", "b\x1cc", "d"]),
        ({"type": "BertPreTokenizer"}, "Hey friend!  How?!", ["Hey", "friend", "!", "How", "?", "!"]),
        ({"type": "Digits", "individual_digits": True}, "a123b", ["a", "1", "2", "3", "b"]),
        ({"type": "Digits", "individual_digits": False}, "a123b4", ["a", "123", "b", "4"]),
        ({"type": "Punctuation", "behavior": "Contiguous"}, "Hey!! you?", ["Hey", "!!", " you", "?"]),
        ({"type": "CharDelimiterSplit", "delimiter": "x"}, "axxbx", ["a", "b"]),
        ({"type": "Metaspace", "replacement": "\u2581", "prepend_scheme": "always", "split": True},
         "Hey  friend", ["\u2581Hey", "\u2581", "\u2581friend"]),
        ({"type": "Metaspace", "replacement": "\u2581", "prepend_scheme": "never", "split": False},
         "Hey friend", ["Hey\u2581friend"]),
        ({"type": "FixedLength", "length": 2}, "abcde", ["ab", "cd", "e"]),
    ],
)
def test_pre_tokenizers(config, text, words):
    assert pre_tokenizer_from_json(config).pre_tokenize(text) == words


def test_metaspace_first_only_prepends_at_the_start():
    meta = pre_tokenizer_from_json({"type": "Metaspace", "replacement": "_", "prepend_scheme": "first"})
    assert meta.pre_tokenize("a b", True) == ["_a", "_b"]
    assert meta.pre_tokenize("a b", False) == ["a", "_b"]


@pytest.mark.parametrize(
    "config,tokens,text",
    [
        ({"type": "ByteFallback"}, ["a", "<0xE2>", "<0x82>", "<0xAC>", "b"], "a€b"),
        ({"type": "ByteFallback"}, ["a", "<0xE2>", "<0x82>", "<0xAC>", "<0xFF>", "b"], "a\ufffd\ufffd\ufffd\ufffdb"),
        ({"type": "Strip", "content": " ", "start": 1, "stop": 0}, [" a", "  b"], "a b"),
        ({"type": "Metaspace", "replacement": "_", "prepend_scheme": "always"}, ["_a_b", "_c"], "ab c"),
        ({"type": "WordPiece", "prefix": "##", "cleanup": True},
         ["Hello", "##s", ",", "it", "'", "s", "me", "!", "do", "not"], "Hellos, it ' s me! do not"),
        ({"type": "BPEDecoder", "suffix": "</w>"}, ["a</w>", "b</w>"], "a b"),
        ({"type": "CTC", "pad_token": "<pad>", "word_delimiter_token": "|", "cleanup": True},
         ["h", "h", "<pad>", "i", "|", "|", "y"], "hi y"),
        ({"type": "ByteLevel"}, ["Ġhello", "âĦ¢", "<not-bytes>", "ðŁ", "Ĳ"], " hello™<not-bytes>\ufffd"),
    ],
)
def test_decoders(config, tokens, text):
    assert decoder_from_json(config).decode(tokens) == text


def test_added_tokens_lstrip_rstrip_single_word():
    config = _config()
    config["added_tokens"] = config["added_tokens"] + [
        {"id": 8192, "content": "<L>", "single_word": False, "lstrip": True, "rstrip": False, "normalized": False, "special": False},
        {"id": 8193, "content": "<R>", "single_word": False, "lstrip": False, "rstrip": True, "normalized": False, "special": True},
        {"id": 8194, "content": "cat", "single_word": True, "lstrip": False, "rstrip": False, "normalized": False, "special": False},
        {"id": 8195, "content": "qq", "single_word": True, "lstrip": False, "rstrip": False, "normalized": False, "special": False},
    ]
    tok = Tokenizer(config)
    plain = Tokenizer(_config())
    assert tok.encode("a  <L>b") == plain.encode("a") + [8192] + plain.encode("b")
    assert tok.encode("a<R>  b") == plain.encode("a") + [8193] + plain.encode("b")
    # "cat" is in the model's vocabulary, so it keeps the model's id.
    cat = plain.token_to_id("cat")
    assert tok.encode("cat concat cat.") == [cat] + plain.encode(" concat ") + [cat] + plain.encode(".")
    assert tok.encode("qq qqq-qq") == [8194] + plain.encode(" qqq-") + [8194]
    assert tok.get_vocab_size() == 8195
    assert tok.decode(tok.encode("x<R> y"), skip_special_tokens=False) == "x<R>y"


def test_template_processing_and_truncation():
    config = _config()
    config["post_processor"] = {
        "type": "TemplateProcessing",
        "single": [{"SpecialToken": {"id": "<|endoftext|>", "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}}],
        "pair": [{"Sequence": {"id": "A", "type_id": 0}}, {"Sequence": {"id": "B", "type_id": 1}}],
        "special_tokens": {"<|endoftext|>": {"id": "<|endoftext|>", "ids": [0], "tokens": ["<|endoftext|>"]}},
    }
    config["truncation"] = {"direction": "Left", "max_length": 3, "strategy": "LongestFirst", "stride": 0}
    tok = Tokenizer(copy.deepcopy(config))
    body = GOLDEN[1][1]
    assert tok.encode(GOLDEN[1][0]) == [0] + body[-2:]
    assert tok.encode(GOLDEN[1][0], add_special_tokens=False) == body[-3:]
    config["padding"] = {"strategy": {"Fixed": 5}, "direction": "Right", "pad_to_multiple_of": None,
                         "pad_id": 7, "pad_type_id": 0, "pad_token": "x"}
    assert Tokenizer(config).encode("") == [0, 7, 7, 7, 7]


def test_lone_surrogates_refused(default):
    with pytest.raises(TokenizerError):
        default.encode("a\ud800b")


def test_bpe_cuts_long_sentencepiece_words_without_changing_them():
    mark = "\u2581"
    vocab = {c: i for i, c in enumerate([mark, "a", "b", mark + "a", mark + mark, "ab", mark + "ab", "ba"])}
    model = BPE(vocab, [(mark, "a"), (mark, mark), ("a", "b"), (mark + "a", "b"), ("b", "a")])
    assert model._cuts is not None
    word = (mark + "ab" + mark * 3 + "bab" + "aba" + mark) * 20
    assert model.tokenize(word) == model._merge(model._symbols(word))
    glued = BPE(dict(vocab, **{"a" + mark: len(vocab)}), [(mark, "a"), ("a", mark)])
    # a token joins "a" to the mark: the mark run after an "a" stays in its piece
    pieces = [mark + "ab", mark + "ba" + mark * 2 + "b"]
    assert glued._cuts.coarse.findall("".join(pieces)) == pieces
    assert glued.tokenize(word) == glued._merge(glued._symbols(word))
