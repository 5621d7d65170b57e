"""The normalizers of ``tokenizer.json``, each ``normalize(str) -> str`` exactly as ``tokenizers``.

Only the resulting text matters to mtok (it returns ids, not offsets), so each
normalizer is a plain string function.  Character tests follow the Rust side:
``char::is_whitespace`` (White_Space, not ``str.isspace``), ``char::to_lowercase``
one character at a time (no final-sigma rule), and the frozen crate tables of
:mod:`.crate_tables`.  Lowercasing uses this Python's ``unicodedata``, whose
Unicode version may trail Rust's (16.0): characters it does not know yet are left as
they are.
"""

from __future__ import annotations

import functools
import re
import unicodedata
from typing import Dict, List, Optional, Pattern, Tuple

from .. import TokenizerError
from . import crate_tables
from . import unicode as U
from .onig import compile_onig, find_spans
from .precompiled import Precompiled

__all__ = ["NORMALIZERS", "Normalizer", "aligned_prefix", "normalizer_from_json", "lowercase", "unicode_normalize"]

_WHITE_SPACE = "".join(chr(c) for lo, hi in U.WHITE_SPACE for c in range(lo, hi + 1))


class Normalizer:
    """Base class: a normalizer with no parameters."""

    @classmethod
    def from_json(cls, d: dict) -> "Normalizer":
        return cls()

    def normalize(self, s: str) -> str:
        raise NotImplementedError

    def lead(self, s: str, z: int) -> int:
        """Given that the first ``z`` characters of ``s`` map to the start of the original text,
        how many leading characters of ``normalize(s)`` do (tokenizers' alignments).

        This default suits normalizers that rewrite each character on its own: the output
        of a character inherits that character's alignment.
        """
        return len(self.normalize(s[:z])) if z < len(s) else len(self.normalize(s))

    def keeps_start(self, s: str) -> bool:
        """Whether ``normalize(s)`` still begins at the start of ``s`` (Metaspace "first" asks)."""
        return aligned_prefix(self, s) > 0

    def __repr__(self) -> str:
        return f"{type(self).__name__}()"


def unicode_normalize(form: str, s: str) -> str:
    """``unicodedata.normalize`` as tokenizers' Unicode 9.0 normalization tables do it.

    Characters those tables lack pass through as unassigned starters, which nothing
    reorders or composes across, so the text between them normalizes on its own.
    """
    unknown = _table_regex(crate_tables.NORMALIZATION_UNKNOWN)
    if unknown.search(s) is None:
        return unicodedata.normalize(form, s)
    parts = []
    prev = 0
    for m in unknown.finditer(s):
        parts.append(unicodedata.normalize(form, s[prev : m.start()]))
        parts.append(m.group())
        prev = m.end()
    parts.append(unicodedata.normalize(form, s[prev:]))
    return "".join(parts)


class _UnicodeForm(Normalizer):
    form = "NFC"

    def normalize(self, s: str) -> str:
        return unicode_normalize(self.form, s)


class NFC(_UnicodeForm):
    form = "NFC"


class NFD(_UnicodeForm):
    form = "NFD"


class NFKC(_UnicodeForm):
    form = "NFKC"


class NFKD(_UnicodeForm):
    form = "NFKD"


def lowercase(s: str) -> str:
    """Rust's ``char::to_lowercase`` applied to each character.

    ``str.lower`` agrees except for the one contextual rule it implements: a final
    capital sigma becomes ``ς``.  Lowering the pieces between sigmas avoids it.
    """
    if "\u03a3" not in s:
        return s.lower()
    return "\u03c3".join(part.lower() for part in s.split("\u03a3"))


class Lowercase(Normalizer):
    def normalize(self, s: str) -> str:
        return lowercase(s)


class Strip(Normalizer):
    def __init__(self, left: bool = True, right: bool = True):
        self.left = left
        self.right = right

    @classmethod
    def from_json(cls, d: dict) -> "Strip":
        return cls(bool(d.get("strip_left", True)), bool(d.get("strip_right", True)))

    def normalize(self, s: str) -> str:
        if self.left:
            s = s.lstrip(_WHITE_SPACE)
        if self.right:
            s = s.rstrip(_WHITE_SPACE)
        return s

    def lead(self, s: str, z: int) -> int:
        start = len(s) - len(s.lstrip(_WHITE_SPACE)) if self.left else 0
        end = len(s.rstrip(_WHITE_SPACE)) if self.right else len(s)
        return max(0, min(z, end) - start)


@functools.lru_cache(maxsize=None)
def _table_regex(table: str) -> Pattern[str]:
    return re.compile(U.CharSet(crate_tables.ranges(table)).regex())


class StripAccents(Normalizer):
    """Removes every mark (no decomposition first), by the Unicode 9.0 table."""

    def normalize(self, s: str) -> str:
        return _table_regex(crate_tables.MARK_9).sub("", s)


class Replace(Normalizer):
    """Replaces each match of a literal string or an Oniguruma regex with ``content``.

    Also serves as the Replace decoder, which applies the same replacement per token.
    """

    def __init__(self, content: str, literal: Optional[str] = None, regex: Optional[Pattern[str]] = None):
        self.content = content
        self.literal = literal
        self.regex = regex

    @classmethod
    def from_json(cls, d: dict) -> "Replace":
        pattern = d.get("pattern")
        content = d.get("content")
        if not isinstance(pattern, dict) or not isinstance(content, str):
            raise TokenizerError(f"Replace needs a pattern and a content: {d!r}")
        if isinstance(pattern.get("String"), str):
            return cls(content, literal=pattern["String"])
        if isinstance(pattern.get("Regex"), str):
            return cls(content, regex=compile_onig(pattern["Regex"]))
        raise TokenizerError(f"Replace pattern must be a String or a Regex: {pattern!r}")

    def normalize(self, s: str) -> str:
        if not s:  # tokenizers never searches an empty string, not even for an empty pattern
            return s
        if self.literal is not None:
            return s.replace(self.literal, self.content)
        parts: List[str] = []
        prev = 0
        for start, end in find_spans(self.regex, s):
            parts.append(s[prev:start])
            parts.append(self.content)
            prev = end
        parts.append(s[prev:])
        return "".join(parts)

    def spans(self, s: str) -> List[Tuple[int, int]]:
        if self.literal is None:
            return find_spans(self.regex, s) if s else []
        if not self.literal:
            return [(i, i) for i in range(len(s) + 1)] if s else []
        return [m.span() for m in re.finditer(re.escape(self.literal), s)]

    def lead(self, s: str, z: int) -> int:
        # Inserted content takes the alignment of the last character it replaces (of the
        # one before it, for an empty match; of the origin, at position 0).
        count, prev = 0, 0
        for start, end in self.spans(s):
            if start > prev:
                if start > z or prev >= z:
                    return count + max(0, min(z, start) - prev)
                count += start - prev
            origin = end - 1 < z if end > start else start == 0 or start - 1 < z
            if self.content:
                if not origin:
                    return count
                count += len(self.content)
            prev = end
        return count + max(0, min(z, len(s)) - prev)


class Prepend(Normalizer):
    def __init__(self, prepend: str):
        self.prepend = prepend

    @classmethod
    def from_json(cls, d: dict) -> "Prepend":
        prepend = d.get("prepend")
        if not isinstance(prepend, str):
            raise TokenizerError(f"Prepend needs a string to prepend: {d!r}")
        return cls(prepend)

    def normalize(self, s: str) -> str:
        return self.prepend + s if s else s

    def lead(self, s: str, z: int) -> int:
        # the prepended text aligns like the character it precedes
        return z + len(self.prepend) if s and z else 0


class Nmt(Normalizer):
    """SentencePiece's nmt_nfkc control-character rules (without the NFKC)."""

    _TABLE: Dict[int, Optional[str]] = {
        **{c: None for c in (*range(0x01, 0x09), 0x0B, *range(0x0E, 0x20), 0x7F, 0x8F, 0x9F)},
        **{c: " " for c in (0x09, 0x0A, 0x0C, 0x0D, 0x1680, *range(0x200B, 0x2010), 0x2028, 0x2029)},
        **{c: " " for c in (0x2581, 0xFEFF, 0xFFFD)},
    }

    def normalize(self, s: str) -> str:
        return s.translate(self._TABLE)


_CJK = (
    (0x4E00, 0x9FFF), (0x3400, 0x4DBF), (0x20000, 0x2A6DF), (0x2A700, 0x2B73F),
    (0x2B740, 0x2B81F), (0x2B920, 0x2CEAF), (0xF900, 0xFAFF), (0x2F800, 0x2FA1F),
)


@functools.lru_cache(maxsize=None)
def _bert_patterns() -> Dict[str, Pattern[str]]:
    # clean_text drops Cc (bar \t \n \r), Unicode 8.0 Cf, Co, NUL and U+FFFD
    control = (
        U.categories("Cc", "Co") | U.CharSet(crate_tables.ranges(crate_tables.FORMAT_8)) | U.CharSet.of(0xFFFD)
    ) - U.CharSet.of(9, 10, 13)
    return {
        "control": re.compile(control.regex() + "+"),
        "chinese": re.compile(U.CharSet(_CJK).regex()),
        "nonspacing": _table_regex(crate_tables.NONSPACING_MARK_8),
    }


class BertNormalizer(Normalizer):
    def __init__(self, clean_text=True, handle_chinese_chars=True, strip_accents=None, lowercase=True):
        self.clean_text = clean_text
        self.handle_chinese_chars = handle_chinese_chars
        # null means: strip accents exactly when lowercasing
        self.strip_accents = lowercase if strip_accents is None else strip_accents
        self.lowercase = lowercase
        _bert_patterns()  # built at load (~0.1 s), not in the first request

    @classmethod
    def from_json(cls, d: dict) -> "BertNormalizer":
        return cls(
            bool(d.get("clean_text", True)),
            bool(d.get("handle_chinese_chars", True)),
            d.get("strip_accents"),
            bool(d.get("lowercase", True)),
        )

    _SPACES = {ord(c): " " for c in _WHITE_SPACE}

    def normalize(self, s: str) -> str:
        patterns = _bert_patterns()
        if self.clean_text:
            s = patterns["control"].sub("", s).translate(self._SPACES)
        if self.handle_chinese_chars:
            s = patterns["chinese"].sub(r" \g<0> ", s)
        if self.strip_accents:
            s = patterns["nonspacing"].sub("", unicode_normalize("NFD", s))
        if self.lowercase:
            s = lowercase(s)
        return s


class ByteLevel(Normalizer):
    """Each UTF-8 byte as the printable character GPT-2's byte-level alphabet gives it."""

    def normalize(self, s: str) -> str:
        from ..bytelevel import BYTE_TO_CHAR

        return s.encode("utf-8").decode("latin-1").translate(BYTE_TO_CHAR)


class Sequence(Normalizer):
    def __init__(self, normalizers: List[Normalizer]):
        self.normalizers = normalizers

    @classmethod
    def from_json(cls, d: dict) -> "Sequence":
        items = d.get("normalizers")
        if not isinstance(items, list):
            raise TokenizerError(f"Sequence needs a list of normalizers: {d!r}")
        return cls([n for n in map(normalizer_from_json, items) if n is not None])

    def normalize(self, s: str) -> str:
        for n in self.normalizers:
            s = n.normalize(s)
        return s

    def lead(self, s: str, z: int) -> int:
        for n in self.normalizers:
            s, z = n.normalize(s), n.lead(s, z)
        return z

    def __repr__(self) -> str:
        return f"Sequence({self.normalizers!r})"


def aligned_prefix(normalizer, s: str) -> int:
    """How many leading characters of ``normalizer.normalize(s)`` align to the start of ``s``."""
    return normalizer.lead(s, 1) if s else 0


NORMALIZERS: Dict[str, type] = {
    cls.__name__: cls
    for cls in (NFC, NFD, NFKC, NFKD, Lowercase, Strip, StripAccents, Replace, Prepend, Nmt,
                BertNormalizer, ByteLevel, Sequence, Precompiled)
}

# Files written before the "type" tag existed name their normalizer by its fields.
_BY_FIELDS = (
    ("clean_text", BertNormalizer), ("strip_left", Strip), ("precompiled_charsmap", Precompiled),
    ("pattern", Replace), ("prepend", Prepend), ("normalizers", Sequence),
)


def normalizer_from_json(d: Optional[dict]):
    """The normalizer a ``tokenizer.json`` describes (None for null); unknown types raise."""
    if d is None:
        return None
    if not isinstance(d, dict):
        raise TokenizerError(f"a normalizer must be an object, not {d!r}")
    kind = d.get("type")
    if kind is None:
        cls = next((c for field, c in _BY_FIELDS if field in d), None)
    else:
        cls = NORMALIZERS.get(kind)
    if cls is None:
        raise TokenizerError(f"unsupported normalizer type {kind!r}; supported: {', '.join(sorted(NORMALIZERS))}")
    return cls.from_json(d)
