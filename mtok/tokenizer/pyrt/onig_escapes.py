"""The escapes and bracket classes of an Oniguruma pattern: the half of
:class:`.onig_parse.Parser` that turns ``\\x{..}``, ``\\p{..}``, ``\\k<..>``
and ``[...]`` into code points, code point sets and backreferences.

:class:`EscapeParsing` is a base of ``Parser`` and works on its state: the
pattern ``p``, the position ``i``, the ``named`` and counted ``groups``, and
its ``peek`` and ``error`` methods.  It is split out only to keep each module
readable; nothing else uses it.
"""

from __future__ import annotations

from typing import Tuple, Union

from . import unicode as U
from .onig_tree import Alt, Anchor, Backref, Cls, Flags, Group, Lit, Node, OnigUnsupported, Seq

_SIMPLE_ESCAPES = {"t": 9, "n": 10, "r": 13, "f": 12, "v": 11, "a": 7, "e": 27}
_CLASS_ESCAPES = {
    "w": lambda: U.onig_word(), "W": lambda: ~U.onig_word(),
    "s": U.white_space, "S": lambda: ~U.white_space(),
    "d": lambda: U.categories("Nd"), "D": lambda: ~U.categories("Nd"),
    "h": lambda: U.property_set("xdigit"), "H": lambda: ~U.property_set("xdigit"),
}
_UNSUPPORTED_ESCAPES = {
    "G": "\\G (search start)", "K": "\\K (keep)", "X": "\\X (grapheme cluster)",
    "y": "\\y (grapheme boundary)", "Y": "\\Y (grapheme boundary)", "g": "\\g<..> (subexpression call)",
}
_NEWLINE = U.CharSet.of(10)


class EscapeParsing:
    """Escapes and bracket classes (see the module docstring for what it needs of its subclass)."""

    def escape(self, flags: Flags) -> Node:
        c = self.peek()
        if not c:
            raise self.error("end pattern at escape")
        if c in _CLASS_ESCAPES:
            self.i += 1
            if c in "wW":  # outside a bracket, \w takes a few more Latin-1 characters
                word = U.onig_word(outside_class=True)
                return Cls(word if c == "w" else ~word)
            return Cls(_CLASS_ESCAPES[c]())
        if c in "pP":
            return Cls(self.property(outside_class=True))
        if c in "AzZbB":
            self.i += 1
            return Anchor(c)
        if c == "R":
            self.i += 1
            return _linebreak()
        if c in "NO":
            self.i += 1
            return Cls(~_NEWLINE if c == "N" else ~U.CharSet())
        if c == "k":
            return self.named_backref()
        if c in "123456789" and self._captures_exist:
            return self.numbered_backref()
        if c in "89":
            raise self.error("invalid backref number/name")
        if c in _UNSUPPORTED_ESCAPES:
            raise OnigUnsupported(f"{_UNSUPPORTED_ESCAPES[c]} in {self.p!r} is not supported")
        return self.literal(self.char_escape(), flags)

    def char_escape(self) -> int:
        """The code point of a character escape (the cursor is just past the backslash)."""
        p, c = self.p, self.peek()
        self.i += 1
        if c in _SIMPLE_ESCAPES:
            return _SIMPLE_ESCAPES[c]
        if c == "x":
            if self.peek() == "{":
                end = p.find("}", self.i)
                digits = p[self.i + 1 : end].strip() if end > 0 else ""
                if not _is_hex(digits):
                    raise self.error("invalid code point value")
                self.i = end + 1
                return _code_point(int(digits, 16), self)
            return self.hex_bytes()
        if c == "u":
            digits = p[self.i : self.i + 4]
            if len(digits) != 4 or not _is_hex(digits):
                raise self.error("too short digits")
            self.i += 4
            return int(digits, 16)
        if c in "01234567":
            j = self.i
            while j < len(p) and j < self.i + 2 and p[j] in "01234567":
                j += 1
            value = int(p[self.i - 1 : j], 8)
            self.i = j
            return value
        if c == "c":
            ctl = self.peek()
            if not ctl:
                raise self.error("end pattern at control")
            self.i += 1
            return ord(ctl) & 0x1F if ctl != "?" else 0x7F
        if c in "CM" and self.peek() == "-":
            raise OnigUnsupported(f"\\{c}- escapes in {self.p!r} are not supported")
        return ord(c)

    def hex_bytes(self) -> int:
        """``\\xHH``: a byte; bytes of 0x80 and up must spell one UTF-8 character together."""
        raw = bytearray()
        while True:
            j = self.i
            while j < len(self.p) and j < self.i + 2 and _is_hex(self.p[j]):
                j += 1
            if j == self.i:
                raise self.error("invalid code point value")
            raw.append(int(self.p[self.i : j], 16))
            self.i = j
            if raw[0] < 0x80:
                return raw[0]
            try:
                return ord(raw.decode("utf-8"))
            except (UnicodeDecodeError, TypeError):
                if len(raw) >= 4 or not self.p.startswith("\\x", self.i):
                    raise self.error("too big wide-char value") from None
                self.i += 2

    def property(self, outside_class: bool = False) -> U.CharSet:
        negate = self.peek() == "P"
        self.i += 1
        if self.peek() != "{":
            raise OnigUnsupported(f"\\p without braces in {self.p!r} is not supported")
        end = self.p.find("}", self.i)
        if end < 0:
            raise self.error("invalid character property name")
        name = self.p[self.i + 1 : end]
        self.i = end + 1
        if name.startswith("^"):
            negate, name = not negate, name[1:]
        cset = _property(name, self.p)
        if outside_class and cset == U.onig_word():  # as with \w, a few more Latin-1 characters
            cset = U.onig_word(outside_class=True)
        return ~cset if negate else cset

    def named_backref(self) -> Node:
        self.i += 1
        close = {"<": ">", "'": "'"}.get(self.peek())
        end = self.p.find(close, self.i + 1) if close else -1
        if end < 0:
            raise self.error("invalid backref")
        name = self.p[self.i + 1 : end]
        self.i = end + 1
        if name in self.named:
            group = self.named[name]
        elif name.isdigit() and not self.named:
            group = int(name)
        else:
            raise OnigUnsupported(f"backreference \\k<{name}> in {self.p!r} is not supported")
        self.refs.append(group)
        return Backref(group)

    def numbered_backref(self) -> Node:
        if self.named:
            raise self.error("numbered backref/call is not allowed. (use name)")
        j = self.i
        while j < len(self.p) and self.p[j].isdigit():
            j += 1
        group = int(self.p[self.i : j])
        self.i = j
        self.refs.append(group)
        return Backref(group)

    # -- bracket classes --
    def bracket(self, flags: Flags) -> Cls:
        cset, negated = self.class_set()
        if not flags.i:
            return Cls(~cset if negated else cset)
        closed, folds = U.case_closure(cset)
        if negated:
            return Cls(~closed)
        return Cls(closed, tuple(folds))

    def class_set(self, operand: bool = False) -> Tuple[U.CharSet, bool]:
        """Parse ``[...]`` at the cursor into its (un-negated) set and whether it is negated.

        With ``operand``, parse instead the right side of ``&&``, which runs to the ``]``
        that closes the enclosing class.
        """
        negated = False
        if not operand:
            self.i += 1
            negated = self.peek() == "^"
            if negated:
                self.i += 1
        acc = U.CharSet()
        first = not operand
        while True:
            c = self.peek()
            if not c:
                raise self.error("premature end of char-class")
            if c == "]" and not first:
                self.i += 1
                return acc, negated
            if self.p.startswith("&&", self.i):
                self.i += 2
                if first or self.peek() == "]":
                    raise OnigUnsupported(f"an empty operand of && in {self.p!r} is not supported")
                right, _ = self.class_set(operand=True)
                return acc & right, negated
            first = False
            item = self.class_item()
            if not isinstance(item, int) and self.peek() == "-" and self.peek(1) not in ("]", ""):
                raise self.error("unmatched range specifier in char-class")
            if isinstance(item, int) and self.peek() == "-" and self.peek(1) not in ("]", ""):
                self.i += 1
                end = self.class_item()
                if not isinstance(end, int):
                    raise self.error("unmatched range specifier in char-class")
                if end < item:
                    raise self.error("empty range in char class")
                acc = acc | U.CharSet([(item, end)])
            else:
                acc = acc | (U.CharSet.of(item) if isinstance(item, int) else item)

    def class_item(self) -> Union[int, U.CharSet]:
        p, c = self.p, self.peek()
        if c == "[":
            if p.startswith("[:", self.i):
                end = p.find(":]", self.i + 2)
                name = p[self.i + 2 : end] if end > 0 else ""
                if name and name.lstrip("^").isalpha():
                    self.i = end + 2
                    cset = _property(name.lstrip("^"), self.p, posix=True)
                    return ~cset if name.startswith("^") else cset
            cset, negated = self.class_set()
            return ~cset if negated else cset
        self.i += 1
        if c != "\\":
            return ord(c)
        e = self.peek()
        if e in _CLASS_ESCAPES:
            self.i += 1
            return _CLASS_ESCAPES[e]()
        if e in "pP":
            return self.property()
        if e == "b":
            self.i += 1
            return 8
        if e in "123456789":
            raise OnigUnsupported(f"a digit escape inside a class in {self.p!r} is not supported")
        return self.char_escape()


def _linebreak() -> Node:
    """``\\R``: CR LF as a unit, else one vertical-space character."""
    crlf = Seq([Lit(13), Lit(10)])
    vertical = Cls(U.CharSet([(10, 13), (0x85, 0x85), (0x2028, 0x2029)]))
    return Group("", Alt([crlf, Seq([Group("!", crlf), vertical])]))


def _property(name: str, pattern: str, posix: bool = False) -> U.CharSet:
    try:
        return U.property_set(name, posix)
    except KeyError:
        raise OnigUnsupported(
            f"character property {name!r} in {pattern!r} is not supported (only general categories "
            "and POSIX-like properties can be built from Python's unicodedata)"
        ) from None


def _is_hex(s: str) -> bool:
    return bool(s) and all(ch in "0123456789abcdefABCDEF" for ch in s)


def _code_point(value: int, parser: "EscapeParsing") -> int:
    if value > U.MAX_CP:
        raise parser.error("too big wide-char value")
    return value
