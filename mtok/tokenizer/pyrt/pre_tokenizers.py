"""Pre-tokenizers: cut a normalized string into the words the model sees.

Each class mirrors one tokenizers ``PreTokenizer`` and works on one piece at a
time: ``split(piece, lead)`` returns the words, with empty ones dropped as
tokenizers drops them.  ``lead`` counts the piece's leading characters that
stand for the start of the input text (0: the piece does not start it); only
Metaspace's ``prepend_scheme: "first"`` cares.

A per-word ``transform`` (ByteLevel's bytes-to-characters) is kept apart from
``split`` so that the pipeline can cache model output by the untransformed word
and pay for the transform only on a cache miss.
"""

from __future__ import annotations

import re
from typing import Callable, List, Optional

from .. import TokenizerError
from ..bytelevel import BYTE_TO_CHAR
from . import _split
from ._chars import compiled
from ._dispatch import build
from .onig import compile_onig

# The GPT-2 split; every character falls in one of its branches, so its
# matches cover the text and ``findall`` equals an Isolated split.
GPT2_PATTERN = r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"


def _matches(regex: "re.Pattern[str]", text: str) -> List[str]:
    if regex.groups:
        return [m.group() for m in regex.finditer(text)]
    return regex.findall(text)


def bytelevel_transform(word: str) -> str:
    return word.encode("utf-8").decode("latin-1").translate(BYTE_TO_CHAR)


class PreTokenizer:
    """A step of the pre-tokenization; subclasses implement ``split``."""

    transform: Optional[Callable[[str], str]] = None
    # False for splitters that drop delimiters: their first word may start past the piece's start.
    covers = True
    # True when ``split`` returns the piece unchanged.
    passthrough = False
    # True when ``split`` looks at ``lead``.
    needs_first = False

    def split(self, piece: str, lead: int) -> List[str]:
        raise NotImplementedError

    def pre_tokenize(self, piece: str, lead: int = 1) -> List[str]:
        words = self.split(piece, lead)
        t = self.transform
        return [t(w) for w in words] if t is not None else words


class ByteLevel(PreTokenizer):
    def __init__(self, add_prefix_space: bool = True, use_regex: bool = True):
        self.add_prefix_space = add_prefix_space
        self.regex = compile_onig(GPT2_PATTERN) if use_regex else None
        self.transform = bytelevel_transform
        self.passthrough = not add_prefix_space and not use_regex

    @classmethod
    def from_json(cls, d: dict) -> "ByteLevel":
        return cls(d.get("add_prefix_space", True), d.get("use_regex", True))

    def split(self, piece: str, lead: int) -> List[str]:
        if not piece:  # tokenizers' prepend does nothing to an empty string
            return []
        if self.add_prefix_space and not piece.startswith(" "):
            piece = " " + piece
        if self.regex is None:
            return [piece]
        return _matches(self.regex, piece)


class _FindAll(PreTokenizer):
    """Keeps the matches of a regex and drops what lies between them."""

    covers = False
    pattern = ""

    def __init__(self):
        self.regex = compiled(self.pattern)

    @classmethod
    def from_json(cls, d: dict) -> "_FindAll":
        return cls()

    def split(self, piece: str, lead: int) -> List[str]:
        return self.regex.findall(piece)


class Whitespace(_FindAll):
    pattern = "<word>+|<^word+whitespace>+"


class WhitespaceSplit(_FindAll):
    pattern = "<^whitespace>+"


class BertPreTokenizer(_FindAll):
    """Split on whitespace (removed), then isolate every punctuation character."""

    pattern = "<punctuation>|<^punctuation+whitespace>+"


class CharDelimiterSplit(PreTokenizer):
    covers = False

    def __init__(self, delimiter: str):
        if len(delimiter) != 1:
            raise TokenizerError(f"CharDelimiterSplit: delimiter must be one character, got {delimiter!r}")
        self.delimiter = delimiter

    @classmethod
    def from_json(cls, d: dict) -> "CharDelimiterSplit":
        return cls(d["delimiter"])

    def split(self, piece: str, lead: int) -> List[str]:
        return [w for w in piece.split(self.delimiter) if w]


class _CharClassSplit(PreTokenizer):
    """Every character of a class is a delimiter, handled by a split behavior."""

    def __init__(self, char_regex: "re.Pattern[str]", behavior: str):
        self.char_regex = char_regex
        self.behavior = behavior
        self.covers = behavior != "Removed"

    def split(self, piece: str, lead: int) -> List[str]:
        return _split.split(piece, _split.regex_spans(self.char_regex, piece), self.behavior)


class Punctuation(_CharClassSplit):
    def __init__(self, behavior: str = "Isolated"):
        super().__init__(compiled("<punctuation>"), _split.check_behavior(behavior, "Punctuation"))

    @classmethod
    def from_json(cls, d: dict) -> "Punctuation":
        return cls(d.get("behavior", "Isolated"))


class Digits(PreTokenizer):
    def __init__(self, individual_digits: bool = False):
        self.regex = compiled("<numeric>|<^numeric>+" if individual_digits else "<numeric>+|<^numeric>+")

    @classmethod
    def from_json(cls, d: dict) -> "Digits":
        return cls(bool(d.get("individual_digits", False)))

    def split(self, piece: str, lead: int) -> List[str]:
        return self.regex.findall(piece)


class Metaspace(PreTokenizer):
    """Spaces become ``replacement``, which then starts each word."""

    SCHEMES = ("always", "first", "never")

    def __init__(self, replacement: str = "\u2581", prepend_scheme: str = "always", split: bool = True):
        if len(replacement) != 1:
            raise TokenizerError(f"Metaspace: replacement must be one character, got {replacement!r}")
        if prepend_scheme not in self.SCHEMES:
            raise TokenizerError(f"Metaspace: unknown prepend_scheme {prepend_scheme!r}")
        self.replacement = replacement
        self.prepend_scheme = prepend_scheme
        self.needs_first = prepend_scheme == "first"
        self.do_split = split
        r = re.escape(replacement)
        self.regex = re.compile(f"{r}[^{r}]*|[^{r}]+")  # MergedWithNext on the replacement

    @classmethod
    def from_json(cls, d: dict) -> "Metaspace":
        return cls(d.get("replacement", "\u2581"), metaspace_scheme(d), bool(d.get("split", True)))

    def split(self, piece: str, lead: int) -> List[str]:
        if not piece:
            return []
        rep = self.replacement
        piece = piece.replace(" ", rep)
        if not piece.startswith(rep) and (
            self.prepend_scheme == "always" or (self.prepend_scheme == "first" and lead > 0)
        ):
            piece = rep + piece
        return self.regex.findall(piece) if self.do_split else [piece]


def metaspace_scheme(d: dict) -> str:
    """``prepend_scheme`` of a Metaspace, reading the legacy ``add_prefix_space`` too."""
    scheme = d.get("prepend_scheme", "always")
    if d.get("add_prefix_space") is False:
        if scheme != "never":
            raise TokenizerError("Metaspace: add_prefix_space does not match declared prepend_scheme")
    return scheme


class Split(PreTokenizer):
    def __init__(self, pattern: dict, behavior: str, invert: bool = False):
        # A literal that is not in a piece leaves it whole (Gemma's ' ', which its
        # normalizer has already replaced): one substring search, no spans.
        self._absent: Optional[str] = None
        if "Regex" in pattern:
            self.regex = compile_onig(pattern["Regex"])
        elif "String" in pattern:
            self.regex = re.compile(re.escape(pattern["String"]))
            self._absent = pattern["String"] if pattern["String"] and not invert else None
        else:
            raise TokenizerError(f"Split: pattern must be {{'String': ...}} or {{'Regex': ...}}, got {pattern!r}")
        self.behavior = _split.check_behavior(behavior, "Split")
        self.invert = invert
        self.covers = behavior != "Removed"
        # Keeping only the matches is a findall, when no empty match can sneak in.
        self._findall = invert and behavior == "Removed"

    @classmethod
    def from_json(cls, d: dict) -> "Split":
        return cls(d["pattern"], d["behavior"], bool(d.get("invert", False)))

    def split(self, piece: str, lead: int) -> List[str]:
        if self._absent is not None and piece and self._absent not in piece:
            return [piece]
        if self._findall:
            words = _matches(self.regex, piece)
            if "" not in words:
                return words
        return _split.split(piece, _split.regex_spans(self.regex, piece, self.invert), self.behavior)


class FixedLength(PreTokenizer):
    def __init__(self, length: int = 5):
        if length < 1:
            raise TokenizerError("FixedLength: length must be at least 1")
        self.length = length

    @classmethod
    def from_json(cls, d: dict) -> "FixedLength":
        return cls(int(d.get("length", 5)))

    def split(self, piece: str, lead: int) -> List[str]:
        n = self.length
        return [piece[i : i + n] for i in range(0, len(piece), n)]


class Sequence(PreTokenizer):
    def __init__(self, steps: List[PreTokenizer]):
        self.steps = steps
        self.transform = steps[-1].transform if steps else None
        self.covers = all(s.covers for s in steps)
        self.needs_first = any(s.needs_first for s in steps)
        # A last step that never cuts (ByteLevel without its regex) only contributes its
        # transform, which the pipeline applies lazily.
        self._cutters = steps[:-1] if steps and steps[-1].passthrough else steps
        self._last_lazy = len(self._cutters) == len(steps)

    @classmethod
    def from_json(cls, d: dict) -> "Sequence":
        return cls([pre_tokenizer_from_json(p) for p in d["pretokenizers"]])

    def split(self, piece: str, lead: int) -> List[str]:
        words = [piece]
        last = len(self._cutters) - 1
        for n, step in enumerate(self._cutters):
            cut = step.split if n == last and self._last_lazy else step.pre_tokenize
            out: List[str] = []
            for i, w in enumerate(words):
                parts = cut(w, lead if i == 0 else 0)
                if i == 0:
                    lead = _lead_after(step, w, parts, lead)
                out.extend(parts)
            words = out
        return words


def _lead_after(step: PreTokenizer, piece: str, parts: List[str], lead: int) -> int:
    """The lead of the first word ``step`` cut from ``piece``."""
    if not lead or not parts:
        return 0
    if step.covers:
        return lead
    skipped = piece.find(parts[0])  # what a delimiter-dropping split left out in front
    return max(0, lead - skipped) if skipped >= 0 else 0


PRE_TOKENIZERS = {
    "BertPreTokenizer": BertPreTokenizer,
    "ByteLevel": ByteLevel,
    "CharDelimiterSplit": CharDelimiterSplit,
    "Delimiter": CharDelimiterSplit,
    "Digits": Digits,
    "FixedLength": FixedLength,
    "Metaspace": Metaspace,
    "Punctuation": Punctuation,
    "Sequence": Sequence,
    "Split": Split,
    "Whitespace": Whitespace,
    "WhitespaceSplit": WhitespaceSplit,
}


def pre_tokenizer_from_json(d: Optional[dict]) -> Optional[PreTokenizer]:
    return build(PRE_TOKENIZERS, d, "pre_tokenizer")
