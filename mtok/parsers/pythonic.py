"""The ``pythonic`` tool-call format (Llama 4 and others): a Python list of calls
with literal keyword arguments, ``[get_weather(city="Paris"), search(q="x")]``,
anywhere in the output.

As SGLang (0.5.23) reads it: the whole output is stripped and Llama 4's stray
``<|python_start|>``/``<|python_end|>`` are removed; the list spans from the
first ``[name(`` to the last ``)`` + ``]`` after it; the content is the text
before the list plus the text after it.  A list that does not parse as calls
stays in the content; a call to an undeclared function, or with an argument that
is not a literal JSON can hold, is dropped.  mtok finds the list by scanning
rather than SGLang's regular expression; the fixtures check they agree.

The calls come at the end (a later ``)]`` moves the list's end); the content
before the first ``[name(`` streams, scanned once as it arrives.
"""

import ast
import re
import warnings

from mtok.parsers.base import UNREADABLE, Call, ToolParser, ToolStream, dump_args

STRAY = ("<|python_start|>", "<|python_end|>")
OPEN_RE = re.compile(r"\[[A-Za-z]\w*\(")
FIRST_ARG_RE = re.compile(r"\s*(\)|[A-Za-z]\w*=)")
CLOSE_RE = re.compile(r"\)\s*\]")
# an opening, or what may still become one at the end of the text
OPEN_OR_PARTIAL_RE = re.compile(r"\[[A-Za-z]\w*\(|\[(?:[A-Za-z]\w*)?\Z")
WORD_RE = re.compile(r"\w*")


def _clean(text):
    for token in STRAY:
        text = text.replace(token, "")
    return text


def _literal(node):
    """A keyword argument's value as JSON data; ValueError for anything else."""
    if isinstance(node, ast.Constant) and (node.value is None or isinstance(node.value, (str, int, float))):
        return node.value
    if isinstance(node, ast.Dict):
        return {_literal(k): _literal(v) for k, v in zip(node.keys, node.values)}
    if isinstance(node, ast.List):
        return [_literal(v) for v in node.elts]
    raise ValueError("tool call arguments must be literals")


class PythonicParser(ToolParser):
    name = "pythonic"
    index_by_call = True

    def _span(self, text):
        """(start, end) of the call list, or None: the first ``[name(`` with a
        ``)`` + ``]`` after it, to the last of those."""
        last = None
        for last in CLOSE_RE.finditer(text):
            pass
        if last is None:
            return None
        for opening in OPEN_RE.finditer(text, 0, last.start()):
            if FIRST_ARG_RE.match(text, opening.end()):
                return opening.start(), last.end()
        return None

    def parse(self, text):
        self.read(4 * len(text))  # strip, clean, and the two scans for the list's ends
        raw, text = text, _clean(text.strip())
        span = self._span(text)
        if span is None:
            return raw, []  # no call list: the text as written
        content = text[: span[0]] + text[span[1]:]
        self.read(span[1] - span[0])
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                tree = ast.parse(text[span[0]: span[1]])
            node = tree.body[0].value if tree.body and isinstance(tree.body[0], ast.Expr) else None
        except (SyntaxError,) + UNREADABLE:
            node = None
        if not (isinstance(node, ast.List) and all(isinstance(e, ast.Call) for e in node.elts)):
            return content, []
        return content, [c for c in (self._call(e) for e in node.elts) if c is not None]

    def stream(self):
        return PythonicStream(self)

    def _call(self, node):
        if not isinstance(node.func, ast.Name) or not self.known(node.func.id):
            return None
        try:
            args = {kw.arg: _literal(kw.value) for kw in node.keywords}
            if any(isinstance(v, float) and v in (float("inf"), float("-inf")) or v != v
                   for v in _floats(args)):
                raise ValueError("not a finite number")
            return Call(node.func.id, dump_args(args))
        except UNREADABLE:
            return None

def _floats(value):
    if isinstance(value, float):
        yield value
    elif isinstance(value, dict):
        for v in value.values():
            yield from _floats(v)
    elif isinstance(value, list):
        for v in value:
            yield from _floats(v)


class PythonicStream(ToolStream):
    """Without a call list the answer is the text as written, with one it is
    stripped and cleaned: only text that reads the same both ways streams, up to
    the first stray token or ``[name(`` (then nothing more until the end)."""

    def __init__(self, parser):
        ToolStream.__init__(self, parser)
        self.done = False
        self.looked = 0  # stray tokens searched up to here
        self.scan = 0  # openings searched up to here
        self.word_at = -1  # a ``[name`` that reaches self.scan: maybe an opening
        self.settled = 0  # content considered up to here
        self.last = 0  # end of its last non-space character

    def step(self, text):
        if self.done or text[:1].isspace():
            self.done = True
            return []
        stray, self.looked = self.parser.seek(text, STRAY, self.looked)
        limit = stray if stray != -1 else self.looked
        opening = self._opening(text, limit)
        if opening != -1:
            self.done = True
            return self.content_to(opening)
        self.done = stray != -1
        end = self.word_at if self.word_at != -1 else limit
        kept = text[self.settled:end].rstrip()
        self.last = self.settled + len(kept) if kept else self.last
        self.settled = max(self.settled, end)
        return self.content_to(self.last)

    def _opening(self, text, limit):
        """Where the first ``[name(`` before ``limit`` begins, or -1; resumes a pending ``[name``."""
        if self.word_at != -1 and self.scan - self.word_at < 2:
            self.scan, self.word_at = self.word_at, -1  # a lone "[": search it again
        if self.word_at != -1:
            end = self.parser.run(WORD_RE, text, self.scan, limit)
            if end < limit and text[end] == "(":
                return self.word_at
            self.scan = end
            if end == limit:
                return -1
            self.word_at = -1
        found = self.parser.search(OPEN_OR_PARTIAL_RE, text, self.scan, limit)
        if found is None:
            self.scan = limit
            return -1
        if found.group().endswith("("):
            return found.start()
        self.word_at, self.scan = found.start(), found.end()
        return -1

    def final(self, text):
        return self.complete(*self.parser.parse(text))
