"""Parse an Oniguruma regex (Ruby syntax, as ``tokenizers`` compiles it) into a small tree.

The tree is what :mod:`.onig` emits as a Python ``re`` pattern.  Everything whose
meaning differs between the two engines is resolved here: character classes become
explicit code point sets (case folding included), ``(?i)`` runs to the end of its
group, ``{n,m}+`` is a repeat of a repeat (Ruby syntax has no possessive intervals)
``{n}?`` is an optional ``{n}`` and ``{n,m}`` with ``n > m`` a possessive ``{m,n}``.
"""

from __future__ import annotations

import re
from typing import Dict, List, Optional, Tuple

from . import unicode as U
from .onig_escapes import _NEWLINE, EscapeParsing
from .onig_tree import Alt, Anchor, Cls, Flags, Group, Lit, Node, OnigError, OnigUnsupported, Repeat, Seq

_INTERVAL = re.compile(r"\{([0-9]*)(,?)([0-9]*)\}")


class Parser(EscapeParsing):
    """A recursive-descent parser over the pattern string; one instance per pattern."""

    def __init__(self, pattern: str):
        self.p = pattern
        self.i = 0
        self.groups = 0
        self.named: Dict[str, int] = {}
        self.refs: List[int] = []
        self._captures_exist = _has_plain_group(pattern)

    def parse(self, flags: Flags = Flags()) -> Node:
        node = self.alternation(flags)
        if self.i < len(self.p):
            raise self.error("unmatched close parenthesis")
        return node

    def error(self, msg: str) -> OnigError:
        return OnigError(f"invalid regex {self.p!r} at {self.i}: {msg}")

    def peek(self, k: int = 0) -> str:
        return self.p[self.i + k] if self.i + k < len(self.p) else ""

    # -- structure --
    def alternation(self, flags: Flags) -> Node:
        branches = [self.sequence(flags)]
        while self.peek() == "|":
            self.i += 1
            branches.append(self.sequence(flags))
        return branches[0] if len(branches) == 1 else Alt(branches)

    def sequence(self, flags: Flags) -> Node:
        items: List[Node] = []
        while self.i < len(self.p) and self.peek() not in "|)":
            if flags.x and self.skip_extended():
                continue
            if self.p.startswith("(?", self.i):
                isolated = self.isolated_options(flags)
                if isolated is not None:  # (?i) applies to the rest of the enclosing group
                    items.append(self.alternation(isolated))
                    break
            atom = self.atom(flags)
            if atom is None:
                continue
            atom = self.quantifiers(atom, flags)
            if isinstance(atom, Group) and atom.kind == "" and atom.capture is None and isinstance(atom.body, Seq):
                items.extend(atom.body.items)  # so that case-folded literal runs merge, as in onig
            else:
                items.append(atom)
        return items[0] if len(items) == 1 else Seq(items)

    def skip_extended(self) -> bool:
        c = self.peek()
        if c.isspace():
            self.i += 1
            return True
        if c == "#":
            end = self.p.find("\n", self.i)
            self.i = len(self.p) if end < 0 else end + 1
            return True
        return False

    def isolated_options(self, flags: Flags) -> Optional[Flags]:
        j = self.i + 2
        while j < len(self.p) and self.p[j] in "imx-":
            j += 1
        if j >= len(self.p) or self.p[j] != ")" or j == self.i + 2:
            return None
        new = _apply_options(flags, self.p[self.i + 2 : j], self)
        self.i = j + 1
        return new

    def quantifiers(self, atom: Node, flags: Flags) -> Node:
        while True:
            if flags.x:
                while self.i < len(self.p) and self.skip_extended():
                    pass
            c = self.peek()
            if c in ("*", "+", "?"):
                self.i += 1
                lo, hi = {"*": (0, None), "+": (1, None), "?": (0, 1)}[c]
                mode = {"?": "lazy", "+": "possessive"}.get(self.peek(), "greedy")
                if mode != "greedy":
                    self.i += 1
                atom = self._repeat(atom, lo, hi, mode)
            elif c == "{" and self.interval() is not None:
                lo, hi, exact, end = self.interval()
                self.i = end
                if hi is not None and hi < lo:  # Ruby syntax: {n,m} with n > m is a possessive {m,n}
                    atom = self._repeat(atom, hi, lo, "possessive")
                elif self.peek() == "?":
                    self.i += 1
                    if exact:  # Ruby syntax: {n}? is an optional {n}, not a lazy one
                        atom = self._repeat(self._repeat(atom, lo, hi, "greedy"), 0, 1, "greedy")
                    else:
                        atom = self._repeat(atom, lo, hi, "lazy")
                else:
                    atom = self._repeat(atom, lo, hi, "greedy")
            else:
                return atom

    def _repeat(self, atom: Node, lo: int, hi: Optional[int], mode: str) -> Repeat:
        if isinstance(atom, Anchor) or (isinstance(atom, Group) and atom.kind in ("=", "!", "<=", "<!")):
            raise self.error("target of repeat operator is invalid")
        return Repeat(atom, lo, hi, mode)

    def interval(self) -> Optional[Tuple[int, Optional[int], bool, int]]:
        """``{n}``, ``{n,}``, ``{,m}`` or ``{n,m}`` at the cursor; None where ``{`` is literal."""
        m = _INTERVAL.match(self.p, self.i)
        if m is None or not (m.group(1) or m.group(3)):
            return None
        lo = int(m.group(1) or 0)
        hi = (int(m.group(3)) if m.group(3) else None) if m.group(2) else lo
        return lo, hi, not m.group(2), m.end()

    # -- atoms --
    def atom(self, flags: Flags) -> Optional[Node]:
        c = self.peek()
        if c == "(":
            return self.group(flags)
        if c == "[":
            return self.bracket(flags)
        if c in "*+?" or (c == "{" and self.interval() is not None):
            raise self.error("target of repeat operator is not specified")
        self.i += 1
        if c == ".":
            return Cls(~U.CharSet() if flags.m else ~_NEWLINE)
        if c == "^":
            return Anchor("^")
        if c == "$":
            return Anchor("$")
        if c == "\\":
            return self.escape(flags)
        return self.literal(ord(c), flags)

    def literal(self, cp: int, flags: Flags) -> Lit:
        if not flags.i:
            return Lit(cp)
        folded = chr(cp).casefold()
        return Lit(cp, len(folded) > 1 or U.fold_class(folded) != (cp,))

    def group(self, flags: Flags) -> Optional[Node]:
        start = self.i
        self.i += 1
        if self.peek() != "?":
            kind, capture = "", None
            if not self.named:
                self.groups += 1
                capture = self.groups
        else:
            self.i += 1
            head = self.group_head(flags, start)
            if head is None:
                return None  # a comment
            kind, capture, flags = head
        body = self.alternation(flags)
        if self.peek() != ")":
            raise self.error("end pattern with unmatched parenthesis")
        self.i += 1
        if not isinstance(body, Seq) and kind == "" and capture is None:
            return Group("", Seq([body]))
        return Group(kind, body, capture)

    def group_head(self, flags: Flags, start: int) -> Optional[Tuple[str, Optional[int], Flags]]:
        """What follows ``(?``: the group's kind, its capture number and its flags; None for a comment."""
        p, c = self.p, self.peek()
        if c == "#":
            end = p.find(")", self.i)
            if end < 0:
                raise self.error("end pattern in group")
            self.i = end + 1
            return None
        if p.startswith(("<=", "<!"), self.i):
            self.i += 2
            return p[self.i - 2 : self.i], None, flags
        if c in ":=!>":
            self.i += 1
            return ("" if c == ":" else c), None, flags
        if c in "<'":
            end = p.find(">" if c == "<" else "'", self.i + 1)
            if end < 0:
                raise self.error("invalid group name")
            name = p[self.i + 1 : end]
            self.i = end + 1
            self.groups += 1
            self.named[name] = self.groups
            return "", self.groups, flags
        if c in "imx-":
            j = self.i
            while j < len(p) and p[j] in "imx-":
                j += 1
            if j >= len(p) or p[j] != ":":
                raise self.error("undefined group option")
            flags = _apply_options(flags, p[self.i : j], self)
            self.i = j + 1
            return "", None, flags
        if c.isalpha():
            raise self.error("undefined group option")
        raise OnigUnsupported(f"the regex construct at {start} of {p!r} is not supported")  # absent operator, conditionals


def _apply_options(flags: Flags, spec: str, parser: Parser) -> Flags:
    on, _, off = spec.partition("-")
    if "-" in off:
        raise parser.error("undefined group option")
    values = {"i": flags.i, "m": flags.m, "x": flags.x}
    for letters, value in ((on, True), (off, False)):
        for ch in letters:
            values[ch] = value
    return Flags(**values)


def _has_plain_group(pattern: str) -> bool:
    """Whether ``pattern`` opens a capturing group, deciding if ``\\1`` is a backref or octal."""
    i, in_class = 0, 0
    while i < len(pattern):
        c = pattern[i]
        if c == "\\":
            i += 2
            continue
        if c == "[":
            in_class += 1
        elif c == "]" and in_class:
            in_class -= 1
        elif c == "(" and not in_class:
            if not pattern.startswith("(?", i) or pattern.startswith(("(?<", "(?'"), i) and not pattern.startswith(
                ("(?<=", "(?<!"), i
            ):
                return True
        i += 1
    return False
