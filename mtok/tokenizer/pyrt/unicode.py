"""Unicode code point sets, built lazily from ``unicodedata`` and cached per process.

Oniguruma (inside ``tokenizers``) and Python's ``re`` disagree on what ``\\s``,
``\\w`` or a letter is, so :mod:`.onig` spells every class out as explicit code
point ranges computed here.  The ranges follow the Unicode version of the running
Python's ``unicodedata`` (3.9: 13.0 ... 3.13: 15.1), while ``tokenizers`` compiles in
its own (Unicode 16.0 for 0.22/0.23): a character unassigned in this Python's
``unicodedata`` may classify differently from ``tokenizers``.
"""

from __future__ import annotations

import bisect
import functools
import itertools
import re
import unicodedata
from typing import Dict, Iterable, List, Optional, Sequence, Tuple

Range = Tuple[int, int]  # inclusive

MAX_CP = 0x10FFFF

# The White_Space property: Oniguruma's \s and Rust's char::is_whitespace.  Python's
# \s and str.isspace() add U+001C..U+001F.
WHITE_SPACE: Tuple[Range, ...] = (
    (0x09, 0x0D), (0x20, 0x20), (0x85, 0x85), (0xA0, 0xA0), (0x1680, 0x1680),
    (0x2000, 0x200A), (0x2028, 0x2029), (0x202F, 0x202F), (0x205F, 0x205F), (0x3000, 0x3000),
)

# Symbols (So) that are Other_Alphabetic, hence in Oniguruma's \w: circled and squared
# Latin letters.  unicodedata has no Other_Alphabetic; the rest of it is marks.
_ALPHABETIC_SYMBOLS: Tuple[Range, ...] = (
    (0x24B6, 0x24E9), (0x1F130, 0x1F149), (0x1F150, 0x1F169), (0x1F170, 0x1F189),
)

# Oniguruma's \w (and \b) outside a bracket class also takes these Latin-1 digits and
# fractions (superscripts 2, 3, 1 and 1/4, 1/2, 3/4), which [\w] and \p{Word} do not.
_LATIN1_WORD_EXTRA: Tuple[Range, ...] = ((0xB2, 0xB3), (0xB9, 0xB9), (0xBC, 0xBE))


class CharSet:
    """An immutable set of code points held as sorted, disjoint, non-adjacent ranges."""

    __slots__ = ("ranges", "_starts")

    def __init__(self, ranges: Iterable[Range] = ()):
        self.ranges: Tuple[Range, ...] = _normalize(ranges)
        self._starts: Optional[List[int]] = None

    @classmethod
    def of(cls, *codepoints: int) -> "CharSet":
        return cls((c, c) for c in codepoints)

    def __or__(self, other: "CharSet") -> "CharSet":
        return CharSet(self.ranges + other.ranges)

    def __and__(self, other: "CharSet") -> "CharSet":
        return ~(~self | ~other)

    def __sub__(self, other: "CharSet") -> "CharSet":
        return self & ~other

    def __invert__(self) -> "CharSet":
        out, nxt = [], 0
        for lo, hi in self.ranges:
            if lo > nxt:
                out.append((nxt, lo - 1))
            nxt = hi + 1
        if nxt <= MAX_CP:
            out.append((nxt, MAX_CP))
        return CharSet(out)

    def __contains__(self, cp: int) -> bool:
        if self._starts is None:
            self._starts = [lo for lo, _ in self.ranges]
        i = bisect.bisect_right(self._starts, cp) - 1
        return i >= 0 and cp <= self.ranges[i][1]

    def __eq__(self, other: object) -> bool:
        return isinstance(other, CharSet) and self.ranges == other.ranges

    def __hash__(self) -> int:
        return hash(self.ranges)

    def __bool__(self) -> bool:
        return bool(self.ranges)

    def __len__(self) -> int:
        return sum(hi - lo + 1 for lo, hi in self.ranges)

    def __repr__(self) -> str:
        return f"CharSet({len(self.ranges)} ranges)"

    def single(self) -> Optional[int]:
        """The code point if the set holds exactly one, else None."""
        if len(self.ranges) == 1 and self.ranges[0][0] == self.ranges[0][1]:
            return self.ranges[0][0]
        return None

    def regex(self) -> str:
        """A Python ``re`` fragment matching one character of the set, with no flags needed.

        ``re`` tests a character against a class's supplementary-plane ranges one by
        one after its BMP bitmap misses, which makes big classes slow on plain text;
        a cheap guard keeps BMP characters away from that list.
        """
        one = self.single()
        if one is not None:
            return escape(one)
        if not self.ranges:
            return "(?!)"
        bmp = [r for r in self.ranges if r[0] <= 0xFFFF]
        astral = [r for r in self.ranges if r[1] > 0xFFFF]
        if len(astral) <= 16 or not bmp:  # each astral range costs every miss about as much
            return "[" + _class_body(self.ranges) + "]"
        if bmp[-1][1] > 0xFFFF:  # a range straddling the plane boundary
            lo = bmp[-1][0]
            bmp[-1] = (lo, 0xFFFF)
        return "(?:[%s]|(?![\\x00-\\uffff])[%s])" % (_class_body(bmp), _class_body(astral))


def _normalize(ranges: Iterable[Range]) -> Tuple[Range, ...]:
    out: List[Range] = []
    for lo, hi in sorted(ranges):
        if out and lo <= out[-1][1] + 1:
            if hi > out[-1][1]:
                out[-1] = (out[-1][0], hi)
        else:
            out.append((lo, hi))
    return tuple(out)


def escape(cp: int) -> str:
    """``cp`` as a ``re`` literal that is safe both inside and outside a class."""
    if 0x20 < cp < 0x7F:
        return re.escape(chr(cp))
    if cp <= 0xFF:
        return "\\x%02x" % cp
    if cp <= 0xFFFF:
        return "\\u%04x" % cp
    return "\\U%08x" % cp


def _class_body(ranges: Sequence[Range]) -> str:
    parts = []
    for lo, hi in ranges:
        if lo == hi:
            parts.append(escape(lo))
        elif hi == lo + 1:
            parts.append(escape(lo) + escape(hi))
        else:
            parts.append(escape(lo) + "-" + escape(hi))
    return "".join(parts)


# -- general categories --------------------------------------------------------------

@functools.lru_cache(maxsize=None)
def _category_table() -> Dict[str, Tuple[Range, ...]]:
    """Two-letter general category -> ranges, for every code point.

    Only planes 0-3 and the start of plane 14 hold assigned characters; planes 4-13
    are unassigned and planes 15-16 private use (bar their two noncharacters).
    """
    table: Dict[str, List[Range]] = {}
    for lo, hi in ((0, 0x3FFFF), (0xE0000, 0xE0FFF)):
        cats = map(unicodedata.category, map(chr, range(lo, hi + 1)))
        start = lo
        for cat, run in itertools.groupby(cats):
            n = sum(1 for _ in run)
            table.setdefault(cat, []).append((start, start + n - 1))
            start += n
    table.setdefault("Cn", []).extend([(0x40000, 0xDFFFF), (0xE1000, 0xEFFFF)])
    for plane in (0xF0000, 0x100000):
        table.setdefault("Co", []).append((plane, plane + 0xFFFD))
        table["Cn"].append((plane + 0xFFFE, plane + 0xFFFF))
    return {cat: _normalize(rs) for cat, rs in table.items()}


def categories(*names: str) -> CharSet:
    """The union of general categories, each given by one letter (``L``) or two (``Lu``)."""
    return _categories(tuple(sorted(names)))


@functools.lru_cache(maxsize=None)
def _categories(names: Tuple[str, ...]) -> CharSet:
    table = _category_table()
    rs: List[Range] = []
    for cat, ranges in table.items():
        if cat in names or cat[0] in names:
            rs.extend(ranges)
    return CharSet(rs)


# -- named sets --------------------------------------------------------------------

def white_space() -> CharSet:
    return _charset(WHITE_SPACE)


@functools.lru_cache(maxsize=None)
def _charset(ranges: Tuple[Range, ...]) -> CharSet:
    return CharSet(ranges)


@functools.lru_cache(maxsize=None)
def onig_word(outside_class: bool = False) -> CharSet:
    """Oniguruma's Word: Alphabetic, marks, decimal digits and connector punctuation."""
    word = categories("L", "M", "Nd", "Nl", "Pc") | _charset(_ALPHABETIC_SYMBOLS)
    return word | _charset(_LATIN1_WORD_EXTRA) if outside_class else word


@functools.lru_cache(maxsize=None)
def regex_word() -> CharSet:
    """The Rust regex crate's \\w (Alphabetic, marks, Nd, Pc, Join_Control), which tokenizers
    uses in its Whitespace pre-tokenizer and its added-token word-boundary checks."""
    return categories("L", "M", "Nd", "Nl", "Pc") | _charset(_ALPHABETIC_SYMBOLS) | CharSet.of(0x200C, 0x200D)


@functools.lru_cache(maxsize=None)
def predicate_set(name: str) -> CharSet:
    """Code points for which ``str.<name>()`` holds (islower / isupper: Lowercase / Uppercase)."""
    test = getattr(str, name)
    cps: List[Range] = []
    for cat in ("Ll", "Lu", "Lt", "Lm", "Lo", "Mn", "Nl", "So"):
        for lo, hi in _category_table().get(cat, ()):
            cps.extend((c, c) for c in range(lo, hi + 1) if test(chr(c)))
    return CharSet(cps)


# -- Oniguruma property names ----------------------------------------------------------

_GC_LONG = {
    "letter": "L", "casedletter": "LC", "uppercaseletter": "Lu", "lowercaseletter": "Ll",
    "titlecaseletter": "Lt", "modifierletter": "Lm", "otherletter": "Lo", "mark": "M",
    "combiningmark": "M", "nonspacingmark": "Mn", "spacingmark": "Mc", "enclosingmark": "Me",
    "number": "N", "decimalnumber": "Nd", "letternumber": "Nl", "othernumber": "No",
    "punctuation": "P", "connectorpunctuation": "Pc", "dashpunctuation": "Pd",
    "openpunctuation": "Ps", "closepunctuation": "Pe", "initialpunctuation": "Pi",
    "finalpunctuation": "Pf", "otherpunctuation": "Po", "symbol": "S", "mathsymbol": "Sm",
    "currencysymbol": "Sc", "modifiersymbol": "Sk", "othersymbol": "So", "separator": "Z",
    "spaceseparator": "Zs", "lineseparator": "Zl", "paragraphseparator": "Zp", "other": "C",
    "control": "Cc", "format": "Cf", "surrogate": "Cs", "privateuse": "Co", "unassigned": "Cn",
}
_GC_SHORT = {
    c.lower(): c
    for c in "L LC Lu Ll Lt Lm Lo M Mn Mc Me N Nd Nl No P Pc Pd Ps Pe Pi Pf Po S Sm Sc Sk So "
    "Z Zs Zl Zp C Cc Cf Cs Co Cn".split()
}


def _graph() -> CharSet:
    return ~(white_space() | categories("Cc", "Cs", "Cn"))


_NAMED = {
    "any": lambda: ~CharSet(),
    "assigned": lambda: ~categories("Cn"),
    "ascii": lambda: CharSet([(0, 0x7F)]),
    "space": white_space,
    "whitespace": white_space,
    "blank": lambda: categories("Zs") | CharSet.of(9),
    "cntrl": lambda: categories("Cc"),
    "digit": lambda: categories("Nd"),
    "xdigit": lambda: CharSet([(0x30, 0x39), (0x41, 0x46), (0x61, 0x66)]),
    "upper": lambda: predicate_set("isupper"),
    "uppercase": lambda: predicate_set("isupper"),
    "lower": lambda: predicate_set("islower"),
    "lowercase": lambda: predicate_set("islower"),
    "word": onig_word,
    "punct": lambda: categories("P"),
    "graph": _graph,
    "print": lambda: _graph() | categories("Zs"),
}


def property_set(name: str, posix: bool = False) -> CharSet:
    """``\\p{name}`` (or ``[:name:]`` when ``posix``) as Oniguruma's Unicode tables define it."""
    key = name.replace(" ", "").replace("_", "").replace("-", "").lower()
    if posix and key == "punct":  # [[:punct:]] also takes the symbols; \p{Punct} does not
        return categories("P", "S")
    if key in _GC_SHORT or key in _GC_LONG:
        gc = _GC_SHORT.get(key) or _GC_LONG[key]
        return categories("Lu", "Ll", "Lt") if gc == "LC" else categories(gc)
    return _NAMED[key]()  # KeyError: a property unicodedata has no table for


# -- case folding ------------------------------------------------------------------

@functools.lru_cache(maxsize=None)
def fold_classes() -> Dict[str, Tuple[int, ...]]:
    """Full case fold -> the code points folding to it, for every fold shared or multi-char.

    Oniguruma matches case-insensitively by comparing full case folds, which
    ``str.casefold`` computes; every cased character lies below U+20000.
    """
    groups: Dict[str, List[int]] = {}
    for cp in range(0x20000):
        ch = chr(cp)
        folded = ch.casefold()
        if folded != ch:
            groups.setdefault(folded, []).append(cp)
    out: Dict[str, Tuple[int, ...]] = {}
    for folded, cps in groups.items():
        if len(folded) == 1 and ord(folded) not in cps:
            cps.append(ord(folded))
        out[folded] = tuple(sorted(cps))
    return out


def fold_class(folded: str) -> Tuple[int, ...]:
    """Every code point whose full case fold is ``folded`` (a single character folds to itself)."""
    cps = fold_classes().get(folded)
    if cps is not None:
        return cps
    return (ord(folded),) if len(folded) == 1 else ()


def case_closure(cset: CharSet) -> Tuple[CharSet, List[str]]:
    """``cset`` plus every character sharing a case fold with a member, and the multi-character
    folds of its members (which Oniguruma also lets a case-insensitive class match)."""
    extra: List[int] = []
    multi: List[str] = []
    for folded, cps in fold_classes().items():
        if any(c in cset for c in cps) or (len(folded) == 1 and ord(folded) in cset):
            extra.extend(cps)
            if len(folded) > 1:
                multi.append(folded)
    return cset | CharSet.of(*extra), multi
