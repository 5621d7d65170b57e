"""Oniguruma regexes from ``tokenizer.json`` files, compiled to Python ``re`` with onig's semantics.

``tokenizers`` compiles the ``{"Regex": ...}`` patterns of Split pre-tokenizers and
Replace normalizers/decoders with Oniguruma (Ruby syntax, UTF-8).  Python's ``re``
reads many of them without complaint but matches differently: ``\\s`` takes
U+001C..U+001F, ``\\p{L}`` does not exist, ``(?i)`` mid-pattern is global, classes do
not nest, ``{n}?`` is lazy, case folding is simpler.  :func:`compile_onig` parses the
pattern (:mod:`.onig_parse`) and writes an equivalent ``re`` pattern that uses no
``re`` flags and no ``re`` character-class shorthands, so only the translation decides
what matches.

Possessive quantifiers and atomic groups are native in Python 3.11+; on 3.9 and 3.10
they are emulated exactly with a capturing lookahead and a backreference (``re``
lookarounds never backtrack), or, around a single character, with a negative
lookahead.  Patterns ``re`` cannot express (variable-length lookbehind, grapheme
clusters, Unicode script properties, ...) raise :class:`OnigUnsupported` at load
time rather than tokenizing differently.

Characters are classified with the running Python's ``unicodedata`` (see
:mod:`.unicode`); characters it does not know yet may classify differently from
``tokenizers``, whose Oniguruma carries its own Unicode version.
"""

from __future__ import annotations

import functools
import re
import sys
from typing import List, Optional, Pattern, Tuple

from . import unicode as U
from .onig_parse import Parser
from .onig_tree import Alt, Anchor, Backref, Cls, Flags, Group, Lit, Node, OnigError, OnigUnsupported, Repeat, Seq

__all__ = ["compile_onig", "find_spans", "OnigError", "OnigUnsupported"]

NATIVE_ATOMIC = sys.version_info >= (3, 11)

# Emitted fragments are tagged with how they may be combined: an "atom" takes a
# quantifier as is, a "seq" must be grouped first, an "alt" must be grouped even
# to be concatenated.
Frag = Tuple[str, str]


def compile_onig(pattern: str, flags: int = 0, native_atomic: Optional[bool] = None) -> Pattern[str]:
    """Compile the Oniguruma ``pattern`` to a ``re.Pattern`` that matches exactly as onig does.

    ``flags`` may hold ``re.IGNORECASE``, ``re.DOTALL`` and ``re.VERBOSE``, standing for
    onig's initial ``i``, ``m`` and ``x`` options.  ``native_atomic`` forces (or
    forbids) Python's own possessive quantifiers and atomic groups; by default they are
    used where the running Python has them.
    """
    if native_atomic is None:
        native_atomic = NATIVE_ATOMIC
    return _compile(pattern, flags, bool(native_atomic))


@functools.lru_cache(maxsize=256)
def _compile(pattern: str, flags: int, native_atomic: bool) -> Pattern[str]:
    text = translate(pattern, flags, native_atomic)
    try:
        return re.compile(text)
    except (re.error, OverflowError, RecursionError) as e:
        raise OnigUnsupported(f"regex {pattern!r} cannot be reproduced with Python's re: {e}") from None


def translate(pattern: str, flags: int = 0, native_atomic: bool = NATIVE_ATOMIC) -> str:
    """The Python ``re`` source equivalent to the Oniguruma ``pattern``."""
    unknown = flags & ~(re.IGNORECASE | re.DOTALL | re.VERBOSE)
    if unknown:
        raise ValueError(f"unsupported flags {unknown:#x}: only re.IGNORECASE, re.DOTALL and re.VERBOSE")
    start = Flags(i=bool(flags & re.IGNORECASE), m=bool(flags & re.DOTALL), x=bool(flags & re.VERBOSE))
    parser = Parser(pattern)
    tree = parser.parse(start)
    for group in parser.refs:
        if group > parser.groups:
            raise OnigError(f"invalid backref number/name in {pattern!r}")
    return _Emitter(native_atomic, set(parser.refs)).emit(tree)[0]


def find_spans(regex: Pattern[str], text: str) -> List[Tuple[int, int]]:
    """``(start, end)`` of each match, in the order and with the empty-match rule of rust-onig.

    rust-onig's ``find_iter`` searches again from the end of each match, but drops an
    empty match that ends where the previous match ended and then resumes one
    character later.  Python's ``finditer`` differs only once an empty match occurs, so
    the common case is a plain ``finditer``.
    """
    spans: List[Tuple[int, int]] = []
    for m in regex.finditer(text):
        s, e = m.span()
        if s == e:
            return _find_spans_slow(regex, text, spans)
        spans.append((s, e))
    return spans


def _find_spans_slow(regex: Pattern[str], text: str, spans: List[Tuple[int, int]]) -> List[Tuple[int, int]]:
    pos = last = spans[-1][1] if spans else 0
    last_end: Optional[int] = last if spans else None
    while pos <= len(text):
        m = regex.search(text, pos)
        if m is None:
            break
        s, e = m.span()
        if s == e and e == last_end:
            pos += 1
            continue
        pos = last_end = e
        spans.append((s, e))
    return spans


class _Emitter:
    """Writes the parse tree out as Python ``re`` source."""

    def __init__(self, native_atomic: bool, referenced: set):
        self.native_atomic = native_atomic
        self.referenced = referenced
        self.count = 0

    def emit(self, node: Node) -> Frag:
        return getattr(self, "emit_" + type(node).__name__.lower())(node)

    def emit_lit(self, node: Lit) -> Frag:
        return self.folded(chr(node.cp)) if node.ci else (U.escape(node.cp), "atom")

    def emit_cls(self, node: Cls) -> Frag:
        text = node.cset.regex()
        if not node.folds:
            return text, "atom"
        # onig tries the class first, then each multi-character fold of its members
        alts = [text] + [self.folded(f)[0] for f in node.folds]
        return "(?:" + "|".join(alts) + ")", "atom"

    def folded(self, s: str) -> Frag:
        """Case-insensitive literal text: whatever has the same full case fold as ``s``."""
        folded = s.casefold()
        return self._fold_from(folded, 0, {}), "atom" if len(folded) == 1 else "seq"

    def _fold_from(self, folded: str, k: int, memo: dict) -> str:
        if k == len(folded):
            return ""
        if k not in memo:
            options = []
            for width in (1, 2, 3):
                cps = U.fold_class(folded[k : k + width]) if k + width <= len(folded) else ()
                if cps:
                    head = U.CharSet.of(*cps).regex()
                    options.append(head + self._fold_from(folded, k + width, memo))
            # the options start with distinct characters, so their order cannot matter
            memo[k] = options[0] if len(options) == 1 else "(?:" + "|".join(options) + ")"
        return memo[k]

    def emit_seq(self, node: Seq) -> Frag:
        parts: List[Frag] = []
        run: List[str] = []
        for item in node.items:
            if isinstance(item, Lit) and item.ci:
                run.append(chr(item.cp))
                continue
            if run:
                parts.append(self.folded("".join(run)))
                run = []
            parts.append(self.emit(item))
        if run:
            parts.append(self.folded("".join(run)))
        if len(parts) == 1:
            return parts[0]
        return "".join("(?:%s)" % t if kind == "alt" else t for t, kind in parts), "seq"

    def emit_alt(self, node: Alt) -> Frag:
        return "|".join(self.emit(b)[0] for b in node.branches), "alt"

    def emit_group(self, node: Group) -> Frag:
        body = self.emit(node.body)[0]
        if node.kind == "":
            if node.capture in self.referenced:
                return "(?P<g%d>%s)" % (node.capture, body), "atom"
            return "(?:%s)" % body, "atom"
        if node.kind == ">":
            return self.atomic(body)
        if node.kind in ("<=", "<!") and isinstance(node.body, Alt):
            # re wants one width per lookbehind; onig allows one per alternative
            looks = ["(?%s%s)" % (node.kind, self.emit(b)[0]) for b in node.body.branches]
            if node.kind == "<=":
                return "(?:%s)" % "|".join(looks), "atom"
            return "".join(looks), "seq"
        return "(?%s%s)" % (node.kind, body), "atom"

    def atomic(self, body: str) -> Frag:
        if self.native_atomic:
            return "(?>%s)" % body, "atom"
        self.count += 1
        name = "_a%d" % self.count
        return "(?=(?P<%s>%s))(?P=%s)" % (name, body, name), "seq"

    def emit_repeat(self, node: Repeat) -> Frag:
        body, kind = self.emit(node.body)
        if kind != "atom":
            body = "(?:%s)" % body
        if node.mode == "possessive" and not self.native_atomic:
            return self.possessive(node, body)
        quant = {(0, None): "*", (1, None): "+", (0, 1): "?"}.get((node.lo, node.hi))
        if quant is None:
            if node.hi is None:
                quant = "{%d,}" % node.lo
            elif node.hi == node.lo:
                quant = "{%d}" % node.lo
            else:
                quant = "{%d,%d}" % (node.lo, node.hi)
        suffix = {"lazy": "?", "possessive": "+"}.get(node.mode, "")
        return body + quant + suffix, "seq"  # re rejects a quantifier on a quantifier

    def possessive(self, node: Repeat, body: str) -> Frag:
        greedy = self.emit_repeat(Repeat(node.body, node.lo, node.hi))[0]
        if not _matches_one_char(node.body):
            return self.atomic(greedy)
        # Around one character, giving nothing back means: no such character follows,
        # unless the upper bound stopped the run.
        if node.hi is None:
            return "%s(?!%s)" % (greedy, body), "seq"
        if node.hi == node.lo:
            return greedy, "seq"
        full = self.emit_repeat(Repeat(node.body, node.hi, node.hi))[0]
        short = self.emit_repeat(Repeat(node.body, node.lo, node.hi - 1))[0]
        return "(?:%s|%s(?!%s))" % (full, short, body), "atom"

    def emit_anchor(self, node: Anchor) -> Frag:
        if node.kind in "bB":
            word = U.onig_word(outside_class=True).regex()
            if node.kind == "b":
                return "(?:(?<=%s)(?!%s)|(?<!%s)(?=%s))" % (word, word, word, word), "atom"
            return "(?:(?<=%s)(?=%s)|(?<!%s)(?!%s))" % (word, word, word, word), "atom"
        return {"^": r"(?:\A|(?<=\n)(?!\Z))", "$": "(?m:$)", "A": r"\A", "z": r"\Z", "Z": r"(?=\n?\Z)"}[node.kind], "atom"

    def emit_backref(self, node: Backref) -> Frag:
        return "(?P=g%d)" % node.group, "atom"


def _matches_one_char(node: Node) -> bool:
    if isinstance(node, Lit):
        return not node.ci or len(chr(node.cp).casefold()) == 1
    return isinstance(node, Cls) and not node.folds
