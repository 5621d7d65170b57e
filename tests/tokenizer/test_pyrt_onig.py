"""The Oniguruma-to-``re`` translation: unit tests, then differential tests against ``tokenizers``."""

from __future__ import annotations

import glob
import json
import os
import re
import sys
import unicodedata

import pytest

from mtok.tokenizer import TokenizerError
from mtok.tokenizer.pyrt.onig import OnigError, OnigUnsupported, compile_onig, find_spans, translate
from support import ROOT, import_real, skip_real

pytestmark = pytest.mark.unit

SHARED = os.path.join(ROOT, "..", "shared", "tokenizers")

GPT2 = r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"
CL100K = r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
CL100K_POSSESSIVE = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?+\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]++[\r\n]*+|\s*[\r\n]|\s+(?!\S)|\s+"
)
QWEN2 = r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
O200K = (
    r"[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?"
    r"|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?"
    r"|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+"
)
DEEPSEEK = (
    r"[!\"#$%&'()*+,\-./:;<=>?@\[\\\]^_`{|}~][A-Za-z]+|[^\r\n\p{L}\p{P}\p{S}]?[\p{L}\p{M}]+"
    r"| ?[\p{P}\p{S}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
)
BLOOM = r" ?[^(\s|[.,!?…。，、।۔،])]+"
MISC = [
    r"\p{N}{1,3}", r"[一-龥\u3040-ゟ゠-ヿ]+", r"\w+|[^\w\s]+", r"\s+", r" {2,}", r"\d+(?:[.,]\d+)*", r"\b\w", r"\w\b",
    r"(?i)[a-z]+", r"(?i:hello|straße|ﬁ)", r"\R", r"[[:punct:]]+", r"[[:alpha:]&&[^aeiou]]+".replace("alpha", "lower"),
    r"(?<=\n)[^\n]*", r"(?<!\s)\s", r"(?>a+|b)+c", r"x*+y|x", r"\h+", r"^\s+|\s+$", r"\A\s+|\s+\z|\n\Z",
    r"a{2}?b|a{1,2}+", r"a{3,2}a?|x{4,1}?", r"[\x{4e00}-\x{9fff}]|\u00e9|\x41|\101", r"(?x) \p{Lu} \p{Ll}+  # a word",
    r"(?m:.)+", r".+", r"\N+\O", r"(a|b)\1", r"(?<q>['\"]).*?\k<q>", r"[^\P{L}\p{Lu}]+", r"\p{^N}+",
]
PATTERNS = [GPT2, CL100K, CL100K_POSSESSIVE, QWEN2, O200K, DEEPSEEK, BLOOM] + MISC

CORPUS = [
    "Hello world! It's a test: don't, I'LL, she'S, they'RE ſ'ſ 'ſ.",
    "  leading and trailing spaces   \n\n\tTabs\tand\r\nCRLF\r\n\r\n   ",
    "numbers 1234567 3.14159 1,000,000 ١٢٣٤٥ ۱۲۳ ०१२३ ๑๒๓ ⅠⅡⅢ ½ ² ³ ⁴ ①②",
    "Ελληνικά κείμενο, русский текст, עברית, العربية, हिन्दी, বাংলা, தமிழ், ไทย",
    "中文字符和标点。日本語のテキスト、カタカナ！한국어 텍스트입니다.",
    "emoji 😀👍🏽👨‍👩‍👧‍👦🇫🇷 ❤️ ✊🏿 #️⃣ 🏳️‍🌈",
    "combining e\u0301 a\u0308 n\u0303 \u0915\u094d\u0937 Z\u0351\u0352\u0353 x\u20dd",
    "controls \x00\x01\x07\x1b\x1c\x1d\x1e\x1f\x7f\x85\x9f end",
    "spaces \u00a0\u1680\u2000\u2001\u2002\u200a\u200b\u2028\u2029\u202f\u205f\u3000\ufeff.",
    "code: def f(x):\n    return x**2  # comment\n\tif a != b: pass\n",
    "URLs https://example.com/path?q=1&r=2#frag and e-mail: a.b@c.de",
    "straße STRASSE ﬁle ﬂow İstanbul ıi K k Å ǅungla ΣΑΣ σας",
    "mixed123abc ABC123 a1b2c3 _under_score_ ‿tie‿ x\u200dy x\u200cy",
    "\n\n\n  \n \r \r\r\n\x0b\x0c\u0085line\u2028sep\u2029para",
    "quotes «guillemets» “curly” ‘single’ — dash – en … ellipsis ¿qué? ¡sí!",
    "math ∑∫√∞≠≤≥ ± × ÷ ∂ ∇ ∈ ∉ ⊂ ⊃ ∪ ∩ ∧ ∨ ¬ → ⇒ ⇔ ∀ ∃",
    "'s 't 're 've 'm 'll 'd 'S 'T 'RE 'VE 'M 'LL 'D 'x ''",
    "xyz aab aaab aaaab b ab xxy \"quoted\" 'single' \u00e9A",
    "",
    " ",
    "\n",
]


# -- unit tests: no tokenizers needed ------------------------------------------------

def _spans(pattern, text, native=None):
    return [text[s:e] for s, e in find_spans(compile_onig(pattern, native_atomic=native), text)]


NATIVE_CHOICES = [False] + ([True] if sys.version_info >= (3, 11) else [])


def test_white_space_is_the_unicode_property_not_str_isspace():
    rx = compile_onig(r"\s")
    assert all(rx.match(c) for c in "\t\n\x0b\x0c\r \x85\xa0\u1680\u2000\u200a\u2028\u2029\u202f\u205f\u3000")
    assert not any(rx.match(c) for c in "\x1c\x1d\x1e\x1f\u180e\u200b\ufeff")
    assert compile_onig(r"\S").match("\x1c")


def test_unicode_classes():
    assert _spans(r"\p{L}+", "abc ΣΑΣ 中文 ١٢") == ["abc", "ΣΑΣ", "中文"]
    assert _spans(r"\p{N}+", "1² ½ Ⅷ ١٢ x") == ["1²", "½", "Ⅷ", "١٢"]
    assert _spans(r"[^\s\p{L}\p{N}]+", "a, b!? ½") == [",", "!?"]
    assert _spans(r"\p{Lu}", "aBǅ") == ["B"]
    assert _spans(r"\P{L}+", "ab12") == ["12"]
    assert _spans(r"\p{^L}+", "ab12") == ["12"]
    assert _spans(r"\d+", "12 ١٢ ²") == ["12", "١٢"]
    assert _spans(r"\h+", "0fAg") == ["0fA"]
    assert _spans(r"\w+", "a²\u0301_‿ ½ \u200d") == ["a²\u0301_‿", "½"]
    assert _spans(r"[\w]+", "a² x") == ["a", "x"]  # in a bracket, \w loses the Latin-1 digits


def test_ruby_quantifier_syntax():
    assert _spans(r"a{2}?b", "b aab") == ["b", "aab"]  # {n}? is an optional {n}
    assert _spans(r"a{1,2}?", "aaa") == ["a", "a", "a"]  # {n,m}? is lazy
    assert _spans(r"a{1,2}+", "aaaaa") == ["aaaaa"]  # {n,m}+ repeats, it is not possessive
    assert _spans(r"a{,2}", "aaa") == ["aa", "a"]
    assert _spans(r"x{,}y{", "x{,}y{") == ["x{,}y{"]
    assert _spans(r"a**", "aa") == ["aa"]
    assert _spans(r"a{3,2}", "aa aaaa") == ["aa", "aaa"]  # {n,m} with n > m: a possessive {m,n}
    assert _spans(r"a{3,2}a", "aaaa") == ["aaaa"]
    assert _spans(r"a{3,2}?", "aaaa") == ["aaa", ""]


@pytest.mark.parametrize("native", NATIVE_CHOICES)
def test_possessive_and_atomic(native):
    assert _spans(r"a*+a", "aaa", native) == []
    assert _spans(r"a++b", "aab", native) == ["aab"]
    assert _spans(r"a?+a", "a aa", native) == ["aa"]
    assert _spans(r"(?>a+|b)+c", "aabc ac", native) == ["aabc", "ac"]
    assert _spans(r"(?>ab|a)b", "abb ab", native) == ["abb"]
    assert _spans(r"(?:ab)*+b", "ababb abab", native) == ["ababb", "b", "b"]
    assert _spans(r"(?:ab|a)++b", "abab aab", native) == []
    assert _spans(r"[^\r\n\p{L}\p{N}]?+\p{L}+", "!ab", native) == ["!ab"]
    assert _spans(r"a{3,1}a", "a aa aaa aaaa", native) == ["aaaa"]
    assert _spans(r"(?:ab){3,1}b", "abb ababb", native) == ["abb", "ababb"]


def test_emulated_atomic_uses_no_python_311_syntax():
    text = translate(CL100K_POSSESSIVE, native_atomic=False)
    assert "(?>" not in text and "++" not in text and "*+" not in text and "?+" not in text


def test_isolated_option_runs_to_the_end_of_the_group():
    assert _spans(r"a(?i)b|c", "aB C ab aC") == ["aB", "ab", "aC"]  # a(?i:b|c)
    assert _spans(r"(?:x(?i)y)z", "xYz xYZ") == ["xYz"]
    assert _spans(r"(?i:ab)c", "ABc ABC") == ["ABc"]
    assert _spans(r"(?i)a(?-i)b", "AB Ab") == ["Ab"]


def test_case_folding_follows_full_case_folds():
    assert _spans(r"(?i:'s)", "'s 'S 'ſ") == ["'s", "'S", "'ſ"]
    assert _spans(r"(?i)k", "kK\u212a") == ["k", "K", "\u212a"]
    assert _spans(r"(?i)ß", "ß ẞ ss SS sſ") == ["ß", "ẞ", "ss", "SS", "sſ"]
    assert _spans(r"(?i)s(?:s)", "ß") == ["ß"]  # literal runs merge across plain groups
    assert _spans(r"(?i)[s][s]", "ß") == []
    assert _spans(r"(?i)[a-z]+", "İıſ\u212a") == ["ſ\u212a"]
    assert _spans(r"(?i)[ßx]", "ss") == ["ss"]
    assert _spans(r"(?i)[^ß]", "sß") == ["s"]
    assert _spans(r"(?i)\p{Lu}", "aA") == ["A"]  # properties fold only inside brackets
    assert _spans(r"(?i)[\p{Lu}]", "aA") == ["a", "A"]


def test_brackets_nest_and_intersect():
    assert _spans(r"[a-z&&[^aeiou]]+", "abcdefg") == ["bcd", "fg"]
    assert _spans(BLOOM, "hi, there(x)") == ["hi", " there", "x"]
    assert _spans(r"[]a]+", "a]b") == ["a]"]
    assert _spans(r"[a-c-e]+", "b-ex") == ["b-e"]
    assert _spans(r"[[:^alpha:][:digit:]]+".replace("alpha", "lower"), "ab1C") == ["1C"]
    assert _spans("[\\r\\n]+", "a\r\nb") == ["\r\n"]


def test_escapes():
    assert _spans(r"\x41\x{42}\u0043\103\cA\e", "ABCC\x01\x1b") == ["ABCC\x01\x1b"]
    assert _spans(r"\xe2\x82\xac", "€") == ["€"]
    assert _spans(r"\R", "a\r\nb\nc\x85\r") == ["\r\n", "\n", "\x85", "\r"]
    assert _spans(r"\N+", "ab\ncd") == ["ab", "cd"]


def test_anchors_are_line_anchors():
    assert _spans(r"^a", "a\na ba") == ["a", "a"]
    assert _spans(r"a$", "a\na\nba") == ["a", "a", "a"]
    assert _spans(r"a\Z", "a\na\n") == ["a"]
    assert _spans(r"a\z", "a\na\n") == []
    assert _spans(r".\b", "a²b ½x") == ["b", " ", "x"]


def test_find_spans_follows_rust_onig_empty_match_rule():
    # an empty match right after a match is dropped and the search resumes a character later
    assert find_spans(compile_onig(r"a*|b"), "ab") == [(0, 1), (2, 2)]
    # an empty match elsewhere is kept
    assert find_spans(compile_onig(r"x|(?=z)"), "xyz") == [(0, 1), (2, 2)]
    assert find_spans(compile_onig(r""), "ab") == [(0, 0), (1, 1), (2, 2)]
    assert find_spans(compile_onig(r"\s+"), "a b  c") == [(1, 2), (3, 5)]


@pytest.mark.parametrize(
    "pattern",
    [r"\p{Han}", r"\X", r"\K", r"\G", r"(?<=a+)b", r"\p{Alpha}", r"(?~abc)", r"\g<1>(a)", r"[[:alnum:]]"],
)
def test_unsupported_constructs_raise_at_compile_time(pattern):
    with pytest.raises(OnigUnsupported) as info:
        compile_onig(pattern)
    assert isinstance(info.value, TokenizerError)
    assert pattern[:3] in str(info.value) or "not supported" in str(info.value)


@pytest.mark.parametrize("pattern", ["(ab", "ab)", "[ab", "*a", r"\8", r"\p{L", "(?s)a", "[b-a]", r"[\d-z]"])
def test_invalid_patterns_raise(pattern):
    with pytest.raises(OnigError):
        compile_onig(pattern)


def test_flags_argument():
    assert _spans_with(r"ab", re.IGNORECASE, "AB") == ["AB"]
    with pytest.raises(ValueError):
        compile_onig("a", re.MULTILINE)


def _spans_with(pattern, flags, text):
    return [text[s:e] for s, e in find_spans(compile_onig(pattern, flags), text)]


# -- differential tests against tokenizers ---------------------------------------------

def _hf_pieces(pattern, text):
    from tokenizers import Regex, pre_tokenizers

    isolated = pre_tokenizers.Split(Regex(pattern), "isolated").pre_tokenize_str(text)
    removed = pre_tokenizers.Split(Regex(pattern), "removed").pre_tokenize_str(text)
    return [(s, tuple(o)) for s, o in isolated], [tuple(o) for _, o in removed]


def _py_pieces(rx, text):
    isolated, removed, prev = [], [], 0
    for s, e in find_spans(rx, text):
        if s > prev:
            isolated.append((text[prev:s], (prev, s)))
            removed.append((prev, s))
        if e > s:
            isolated.append((text[s:e], (s, e)))
        prev = e
    if prev < len(text):
        isolated.append((text[prev:], (prev, len(text))))
        removed.append((prev, len(text)))
    return isolated, removed


def _check(pattern, texts, native=None):
    rx = compile_onig(pattern, native_atomic=native)
    for text in texts:
        assert _py_pieces(rx, text) == _hf_pieces(pattern, text), (pattern, text)


def _hf_replace(pattern, text):
    from tokenizers import Regex, normalizers

    return normalizers.Replace(Regex(pattern), "<>").normalize_str(text)


def _py_replace(pattern, text):
    out, prev = [], 0
    for s, e in find_spans(compile_onig(pattern), text):
        out.append(text[prev:s] + "<>")
        prev = e
    return "".join(out) + text[prev:]


def _shared_patterns():
    found = []
    for path in sorted(glob.glob(os.path.join(SHARED, "*.json"))):
        with open(path, encoding="utf-8") as f:
            data = json.load(f)
        stack = [{k: v for k, v in data.items() if k != "model"}]
        while stack:
            node = stack.pop()
            if isinstance(node, dict):
                if isinstance(node.get("Regex"), str):
                    found.append(node["Regex"])
                stack.extend(node.values())
            elif isinstance(node, list):
                stack.extend(node)
    return found


@pytest.mark.parametrize("pattern", PATTERNS)
def test_matches_tokenizers_on_corpus(pattern):
    import_real("tokenizers")
    _check(pattern, CORPUS)


@pytest.mark.skipif(sys.version_info < (3, 11), reason="native possessive quantifiers need Python 3.11")
@pytest.mark.parametrize("pattern", [CL100K_POSSESSIVE, r"(?>a+|b)+c", r"x*+y|x"])
def test_emulation_matches_tokenizers_on_new_pythons_too(pattern):
    import_real("tokenizers")
    _check(pattern, CORPUS, native=False)


def test_patterns_of_shared_tokenizer_files():
    import_real("tokenizers")
    if not os.path.isdir(SHARED):
        skip_real(f"no tokenizer files at {SHARED} (../shared/tokenizers is not on this machine)")
    patterns = _shared_patterns()
    assert patterns, "expected at least the cl100k Split regex"
    for pattern in patterns:
        _check(pattern, CORPUS)


@pytest.mark.parametrize(
    "pattern", [r"x|(?=z)", r"a*|b", r"^", r"$", r"\b", r"\s*", r"(?<=\n)", r"", r"\B", r" ?(?=\p{Lu})"]
)
def test_empty_matches_as_replace_sees_them(pattern):
    import_real("tokenizers")
    for text in CORPUS + ["xyz", "ab", "a\nb\n", "Hello World", "aB"]:
        if text:  # tokenizers never searches an empty string
            assert _py_replace(pattern, text) == _hf_replace(pattern, text), (pattern, text)


def _assigned_sample():
    """Every assigned code point in a short block, ends of the long uniform runs (CJK, Hangul...)."""
    out, run = [], []
    for cp in range(0x30000):
        cat = unicodedata.category(chr(cp))
        if cat in ("Cn", "Cs", "Co"):
            continue
        if run and (cp != run[-1] + 1 or unicodedata.category(chr(run[-1])) != cat):
            out.extend(run if len(run) < 64 else run[:16] + run[-16:])
            run = []
        run.append(cp)
    out.extend(run)
    return "".join(map(chr, out))


@pytest.mark.parametrize(
    "cls",
    [r"\p{L}", r"\p{N}", r"\p{P}", r"\p{S}", r"\p{M}", r"\p{Z}", r"\p{C}", r"\s", r"\w", r"\d",
     r"[^\s\p{L}\p{N}]", r"\p{Lu}", r"\p{Lo}", r"[\w]", r"[[:punct:]]", r"(?i)[a-z]", r"(?i)[^\s\p{L}]"],
)
def test_classes_agree_on_every_assigned_character(cls):
    import_real("tokenizers")
    _check("(?:%s)+" % cls, [_assigned_sample()])


def _hypothesis_text():
    st = import_real("hypothesis.strategies")
    pieces = (
        "aAzZ09 \t\n\r\x0b\x0c\x1c\x1f\x85\xa0\u2028\u3000'sSſ_-.,!?\"'()[]{}/\\|é\u0301ßẞK\u212a"
        "ΣσςЖжאب٣३中文カ한😀👍🏽\u200d\u200c\ufe0f①½²"
    )
    assigned = st.characters(
        blacklist_categories=("Cs", "Cn", "Co"), max_codepoint=0x2FFFF
    )
    return st.text(st.one_of(st.sampled_from(pieces), assigned), max_size=40)


def test_hypothesis_strings():
    import_real("tokenizers")
    hypothesis = import_real("hypothesis")

    @hypothesis.settings(max_examples=int(os.environ.get("PYRT_EXAMPLES", 300)), deadline=None, derandomize=True)
    @hypothesis.given(text=_hypothesis_text(), index=hypothesis.strategies.integers(0, len(PATTERNS) - 1))
    def run(text, index):
        _check(PATTERNS[index], [text])

    run()
