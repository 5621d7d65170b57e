"""``stop_regex``: regular expressions that end a request, matched in linear time.

SGLang runs ``re.search`` over the recent text after every step.  Python's
``re`` backtracks, so a client's ``(a+)+$`` over thirty characters of text it
chose (the prompt, with an echoing model) costs ~2^30 steps, spent in the
scheduler's one thread while every other request waits.  So a pattern is
parsed by the standard library's own parser (``re``'s syntax and its error
messages) and compiled into a small NFA (Thompson's construction) that a Pike
VM runs over the text as it grows: each new character visits each instruction
at most once, whatever the pattern.  Bounded repeats are unrolled, so the
program's size is bounded (:data:`MAX_PROGRAM`), and with it the cost per
character.

What is matched is SGLang's: a request stops at the first character after
which a pattern has a match in its text; ``matched_stop`` is the pattern, and
(unless ``no_stop_trim``) the text is cut where that match begins.  ``^`` and
``\\A`` are the start of the generated text, ``$`` and ``\\Z`` its end so far
(``[.!?]\\s*$`` stops at the first sentence's end; unlike ``re``'s, ``$`` does
not also match before a final newline); ``(?m)`` and ``(?s)``
work as in ``re``.  A match must fit in :data:`WINDOW` characters (SGLang
searches a bounded tail too), which also bounds the text held back from a
stream while a match may be under way.  What needs backtracking to define
(backreferences, lookaround, atomic groups) and case folding are refused with
a 400 naming the field.
"""

from __future__ import annotations

from typing import Any, Callable, List, Optional, Sequence, Tuple

try:  # Python 3.11+; sre_parse is its deprecated alias
    import re._constants as C
    import re._parser as P
except ImportError:  # pragma: no cover - Python < 3.11
    import sre_constants as C  # type: ignore[no-redef]
    import sre_parse as P  # type: ignore[no-redef]

WINDOW = 4096  # characters a match may span; older partial matches are dropped
MAX_PROGRAM = 1024  # NFA instructions of one request's patterns together (~0.6 ms a character at worst)

CHAR, TEST, SPLIT, JMP, ASSERT, MATCH = range(6)
_FLAGS_OK = C.SRE_FLAG_UNICODE | C.SRE_FLAG_VERBOSE | C.SRE_FLAG_MULTILINE | C.SRE_FLAG_DOTALL
_REPEATS = {C.MAX_REPEAT, C.MIN_REPEAT} | ({C.POSSESSIVE_REPEAT} if hasattr(C, "POSSESSIVE_REPEAT") else set())
_CATEGORIES = {
    C.CATEGORY_DIGIT: str.isdecimal,
    C.CATEGORY_NOT_DIGIT: lambda c: not c.isdecimal(),
    C.CATEGORY_SPACE: str.isspace,
    C.CATEGORY_NOT_SPACE: lambda c: not c.isspace(),
    C.CATEGORY_WORD: lambda c: c.isalnum() or c == "_",
    C.CATEGORY_NOT_WORD: lambda c: not (c.isalnum() or c == "_"),
}

_BACKTRACKING = {"GROUPREF": "a backreference", "GROUPREF_EXISTS": "a conditional group", "ASSERT": "a lookaround",
                 "ASSERT_NOT": "a lookaround", "ATOMIC_GROUP": "an atomic group"}


class PatternError(ValueError):
    """A pattern ``re`` refuses, or one this engine does not run; the message says which."""


def _is_word(c: Optional[str]) -> bool:
    return c is not None and (c.isalnum() or c == "_")


def _assertion(at: Any, multiline: bool) -> Callable[[Optional[str], Optional[str]], bool]:
    """An anchor as a test of (previous char, next char); None is the text's edge."""
    begin_line = lambda p, n: p is None or p == "\n"  # noqa: E731
    end_line = lambda p, n: n is None or n == "\n"  # noqa: E731
    tests = {
        C.AT_BEGINNING: begin_line if multiline else (lambda p, n: p is None),
        C.AT_BEGINNING_STRING: lambda p, n: p is None,
        C.AT_END: end_line if multiline else (lambda p, n: n is None),
        C.AT_END_STRING: lambda p, n: n is None,
        C.AT_BOUNDARY: lambda p, n: _is_word(p) != _is_word(n),
        C.AT_NON_BOUNDARY: lambda p, n: _is_word(p) == _is_word(n) and not (p is None and n is None),
    }
    if at not in tests:
        raise PatternError(f"the anchor {at} is not supported")
    return tests[at]


def _class(items: Sequence[Tuple[Any, Any]]) -> Callable[[str], bool]:
    """``[...]`` as a predicate."""
    negate, chars, tests = False, set(), []
    for op, av in items:
        if op is C.NEGATE:
            negate = True
        elif op is C.LITERAL:
            chars.add(chr(av))
        elif op is C.RANGE:
            lo, hi = av
            tests.append(lambda c, lo=lo, hi=hi: lo <= ord(c) <= hi)
        elif op is C.CATEGORY and av in _CATEGORIES:
            tests.append(_CATEGORIES[av])
        else:
            raise PatternError(f"the class item {op} is not supported")
    frozen = frozenset(chars)
    return lambda c: (c in frozen or any(t(c) for t in tests)) != negate


class _Compiler:
    """A parsed pattern into instructions ``[op, a, b]`` appended to ``prog``."""

    def __init__(self, prog: List[list], flags: int):
        self.prog = prog
        self.multiline = bool(flags & C.SRE_FLAG_MULTILINE)
        self.dotall = bool(flags & C.SRE_FLAG_DOTALL)

    def emit(self, op: int, a: Any = None, b: Any = None) -> int:
        if len(self.prog) >= MAX_PROGRAM:
            raise PatternError(f"the patterns are too large: over {MAX_PROGRAM} states once repeats are unrolled")
        self.prog.append([op, a, b])
        return len(self.prog) - 1

    def seq(self, items: Any) -> None:
        for op, av in items:
            self.node(op, av)

    def node(self, op: Any, av: Any) -> None:
        if op is C.LITERAL:
            self.emit(CHAR, chr(av))
        elif op is C.NOT_LITERAL:
            self.emit(TEST, lambda c, x=chr(av): c != x)
        elif op is C.ANY:
            self.emit(TEST, (lambda c: True) if self.dotall else (lambda c: c != "\n"))
        elif op is C.IN:
            self.emit(TEST, _class(av))
        elif op is C.AT:
            self.emit(ASSERT, _assertion(av, self.multiline))
        elif op is C.BRANCH:
            self.branch(av[1])
        elif op is C.SUBPATTERN:
            if av[1] or av[2]:
                raise PatternError("inline flags on a group are not supported")
            self.seq(av[-1])
        elif op in _REPEATS:
            self.repeat(*av)
        else:
            what = _BACKTRACKING.get(str(op), str(op))
            raise PatternError(f"{what} needs backtracking, which stop_regex does not do")

    def branch(self, alternatives: Sequence[Any]) -> None:
        jumps = []
        for k, alt in enumerate(alternatives):
            split = self.emit(SPLIT) if k < len(alternatives) - 1 else None
            if split is not None:
                self.prog[split][1] = split + 1
            self.seq(alt)
            if split is not None:
                jumps.append(self.emit(JMP))
                self.prog[split][2] = len(self.prog)
        for j in jumps:
            self.prog[j][1] = len(self.prog)

    def repeat(self, lo: int, hi: int, body: Any) -> None:
        for _ in range(lo):
            self.seq(body)
        if hi == C.MAXREPEAT:  # L: split(body, out); body; jmp L
            loop = self.emit(SPLIT, None)
            self.prog[loop][1] = loop + 1
            self.seq(body)
            self.emit(JMP, loop)
            self.prog[loop][2] = len(self.prog)
            return
        splits = []
        for _ in range(hi - lo):  # each optional copy may end the repeat
            splits.append(self.emit(SPLIT))
            self.prog[splits[-1]][1] = splits[-1] + 1
            self.seq(body)
        for s in splits:
            self.prog[s][2] = len(self.prog)


def compile_patterns(patterns: Sequence[str]) -> Tuple[List[list], List[int]]:
    """One program for all of a request's patterns, and each one's first instruction."""
    prog: List[list] = []
    starts = []
    for i, pattern in enumerate(patterns):
        try:
            parsed = P.parse(pattern)
        except (C.error, RecursionError, OverflowError) as e:
            raise PatternError(f"{pattern!r} is not a valid regular expression: {e}") from None
        flags = parsed.state.flags
        if flags & ~_FLAGS_OK:
            raise PatternError(f"{pattern!r}: flags other than (?m), (?s) and (?x) are not supported")
        starts.append(len(prog))
        try:
            _Compiler(prog, flags).seq(parsed)
        except PatternError as e:
            raise PatternError(f"{pattern!r}: {e}") from None
        prog.append([MATCH, i, None])
    return prog, starts


class StopRegexes:
    """One request's patterns and where matching stands: fed each piece of new
    text once, it reports the first match (its start and pattern)."""

    __slots__ = ("patterns", "prog", "starts", "threads", "pos", "prev", "quiet_until", "first_chars")

    def __init__(self, patterns: Sequence[str]):
        self.patterns = list(patterns)
        self.prog, self.starts = compile_patterns(self.patterns)
        self.threads: List[Tuple[int, int]] = []  # (pc, start) waiting at pos, by start
        self.pos = 0  # characters fed so far
        self.prev: Optional[str] = None  # the last of them
        self.quiet_until = -1  # matches ending here or before were passed over
        self.first_chars = self._first_chars()

    def _first_chars(self) -> Optional[frozenset]:
        """The characters any match must begin with, when every pattern begins with
        literals and no anchor (``and|or``: a, o); None otherwise.  While no match
        is under way, any other character is passed over without following the NFA."""
        chars, stack, seen = set(), list(self.starts), set()
        while stack:
            pc = stack.pop()
            if pc in seen:
                continue
            seen.add(pc)
            op, a, b = self.prog[pc]
            if op == CHAR:
                chars.add(a)
            elif op == SPLIT:
                stack += [a, b]
            elif op == JMP:
                stack.append(a)
            else:  # a class, an anchor, or a pattern that can match nothing at all
                return None
        return frozenset(chars)

    def feed(self, text: str, report: bool = True) -> Optional[Tuple[int, str]]:
        """Take ``text``; the (start, pattern) of the first match that ends in it
        (or at its end), or None.  With ``report`` false, matches ending in it
        are passed over (as stop strings are before ``min_new_tokens``)."""
        first = self.first_chars
        for c in text:
            if first is not None and not self.threads and c not in first:
                self.pos += 1
                self.prev = c
                continue
            hit, waiting = self._close(c)
            if hit is not None and report:
                return hit
            prog = self.prog
            self.threads = [(pc + 1, start) for pc, start in waiting
                            if (c == prog[pc][1] if prog[pc][0] == CHAR else prog[pc][1](c))]
            self.pos += 1
            self.prev = c
            floor = self.pos - WINDOW
            if self.threads and self.threads[0][1] < floor:
                self.threads = [t for t in self.threads if t[1] >= floor]
        if not report:
            self.quiet_until = self.pos
            return None
        if first is not None and not self.threads:
            return None  # nothing under way, and no pattern matches the empty text
        return self._close(None)[0]  # at the text's end so far: `$`, `\b`

    def hold_from(self) -> Optional[int]:
        """Where the earliest match under way began (text from there on may still
        be cut), or None."""
        return self.threads[0][1] if self.threads else None

    def _close(self, nxt: Optional[str]) -> Tuple[Optional[Tuple[int, str]], List[Tuple[int, int]]]:
        """Follow every thread (and a new one per pattern, starting here) through
        the instructions that consume nothing; the first match reached, and the
        threads now waiting for a character.  Earlier starts go first, so the
        match reached is the leftmost, and a state kept is the earliest-begun."""
        prog, prev, pos = self.prog, self.prev, self.pos
        seen = set()
        waiting = []
        hit = None
        for pc0, start in self.threads + [(s, pos) for s in self.starts]:
            stack = [pc0]
            while stack:
                pc = stack.pop()
                if pc in seen:
                    continue
                seen.add(pc)
                op, a, b = prog[pc]
                if op == CHAR or op == TEST:
                    waiting.append((pc, start))
                elif op == SPLIT:
                    stack.append(b)
                    stack.append(a)
                elif op == JMP:
                    stack.append(a)
                elif op == ASSERT:
                    if a(prev, nxt):
                        stack.append(pc + 1)
                elif hit is None and pos > self.quiet_until:
                    hit = (start, self.patterns[a])
        return hit, waiting
