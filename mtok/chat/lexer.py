"""Lexer of mtok's Jinja engine: template source to a list of tokens.

It follows jinja2's lexer in transformers' configuration (``trim_blocks`` and
``lstrip_blocks`` on), because whitespace is where chat templates are most fragile:

* newlines (``\\r\\n``, ``\\r``, ``\\n``) become ``\\n``, and one trailing newline of
  the template is dropped (jinja2's ``keep_trailing_newline=False``);
* ``{%-``/``{{-``/``{#-`` strip all whitespace before the tag, ``-%}``/``-}}``/``-#}``
  all whitespace after it;
* ``trim_blocks``: one newline right after ``%}`` or ``#}`` is dropped;
* ``lstrip_blocks``: spaces and tabs between the start of a line and ``{%``/``{#``
  are dropped, unless the tag starts with ``{%+``;
* ``{% raw %}...{% endraw %}`` is data; comments are dropped.

A token is ``(kind, value, lineno, colno)``; kinds are ``data``, ``block_begin``,
``block_end``, ``variable_begin``, ``variable_end``, ``name``, ``string``,
``integer``, ``float``, ``op`` (value: the operator text) and ``eof``.
"""

from __future__ import annotations

import ast
import bisect
import re
from typing import Any, List, Optional, Tuple

from .errors import TemplateError

Token = Tuple[str, object, int, int]

_NEWLINE = re.compile(r"\r\n|\r|\n")
_ROOT = re.compile(
    r"(.*?)(?:(?P<raw>\{%(-|\+|)\s*raw\s*(?:-%\}\s*|%\}))|(?P<block_begin>\{%(-|\+|))"
    r"|(?P<variable_begin>\{\{(-|\+|))|(?P<comment_begin>\{#(-|\+|)))", re.S)
_COMMENT_END = re.compile(r"(.*?)(\+#\}|-#\}\s*|#\}\n?)", re.S)
_RAW_END = re.compile(r"(.*?)(\{%(-|\+|)\s*endraw\s*(?:\+%\}|-%\}\s*|%\}\n?))", re.S)
_BLOCK_END = re.compile(r"\+%\}|-%\}\s*|%\}\n?")
_VARIABLE_END = re.compile(r"-\}\}\s*|\}\}")
_WHITESPACE = re.compile(r"\s+")
_ALL_WHITESPACE = re.compile(r"\s+")
_FLOAT = re.compile(r"(?<!\.)(\d+_)*\d+((\.(\d+_)*\d+)?e[+\-]?(\d+_)*\d+|\.(\d+_)*\d+)", re.I)
_INTEGER = re.compile(r"(0b(_?[0-1])+|0o(_?[0-7])+|0x(_?[\da-f])+|[1-9](_?\d)*|0(_?0)*)", re.I)
_NAME = re.compile(r"[^\W\d]\w*")
_STRING = re.compile(r"('([^'\\]*(?:\\.[^'\\]*)*)'|\"([^\"\\]*(?:\\.[^\"\\]*)*)\")", re.S)
_OPERATORS = ("//", "**", "==", "!=", ">=", "<=", "+", "-", "/", "*", "%", "~", "[", "]", "(", ")",
              "{", "}", ">", "<", "=", ".", ":", "|", ",", ";")
_OPERATOR = re.compile("|".join(re.escape(op) for op in _OPERATORS))
_CLOSING = {"(": ")", "[": "]", "{": "}"}


class _Scanner:
    """Walks the normalised source, tracking the line and column of ``pos``."""

    def __init__(self, source: str):
        lines = _NEWLINE.split(source)
        if lines[-1] == "":
            del lines[-1]
        self.source = "\n".join(lines)
        self.tokens: List[Token] = []
        self.line_starting = True
        self.line_starts = [0] + [m.end() for m in re.finditer("\n", self.source)]

    def where(self, pos: int) -> Tuple[int, int]:
        """(line, column), 1-based, of a position."""
        line = bisect.bisect_right(self.line_starts, pos)
        return line, pos - self.line_starts[line - 1] + 1

    def emit(self, kind: str, value: object, pos: int) -> None:
        lineno, colno = self.where(pos)
        self.tokens.append((kind, value, lineno, colno))

    def fail(self, message: str, pos: int) -> TemplateError:
        lineno, colno = self.where(pos)
        return TemplateError(message, "syntax", lineno, colno)


def tokenize(source: str) -> List[Token]:
    """The tokens of ``source``; a TemplateError (kind ``syntax``) where it cannot be lexed."""
    sc = _Scanner(source)
    pos, end = 0, len(sc.source)
    while pos < end:
        m = _ROOT.match(sc.source, pos)
        if m is None:
            sc.emit("data", sc.source[pos:], pos)
            break
        kind = m.lastgroup
        sign = m.group(m.lastindex + 1) if kind != "raw" else m.group(3)
        text = _strip_before(sc, m.group(1), sign, kind)
        if text:
            sc.emit("data", text, pos)
        sc.line_starting = m.group()[-1:] == "\n"
        tag_pos = m.start(kind)
        if kind == "raw":
            pos = _raw(sc, m.end())
        elif kind == "comment_begin":
            pos = _comment(sc, m.end(), tag_pos)
        else:
            sc.emit(kind, None, tag_pos)
            pos = _tag(sc, m.end(), kind)
    lineno, colno = sc.where(end)
    sc.tokens.append(("eof", None, lineno, colno))
    return sc.tokens


def _strip_before(sc: _Scanner, text: str, sign: str, kind: str) -> str:
    if sign == "-":
        return text.rstrip()
    if sign != "+" and kind != "variable_begin":
        start = text.rfind("\n") + 1
        if (start > 0 or sc.line_starting) and _ALL_WHITESPACE.fullmatch(text, start):
            return text[:start]
    return text


def _comment(sc: _Scanner, pos: int, tag_pos: int) -> int:
    m = _COMMENT_END.match(sc.source, pos)
    if m is None:
        if pos >= len(sc.source):  # jinja2 ends quietly when the template ends right after "{#"
            return pos
        raise sc.fail("Missing end of comment tag", tag_pos)
    sc.line_starting = m.group()[-1:] == "\n"
    return m.end()


def _raw(sc: _Scanner, pos: int) -> int:
    m = _RAW_END.match(sc.source, pos)
    if m is None:
        if pos >= len(sc.source):
            return pos
        raise sc.fail("Missing end of raw directive", pos)
    text = _strip_before(sc, m.group(1), m.group(3), "raw")
    if text:
        sc.emit("data", text, pos)
    sc.line_starting = m.group()[-1:] == "\n"
    return m.end()


def _tag(sc: _Scanner, pos: int, kind: str) -> int:
    """The tokens inside ``{% ... %}`` or ``{{ ... }}``, up to and including the end tag."""
    end_re = _BLOCK_END if kind == "block_begin" else _VARIABLE_END
    end_kind = "block_end" if kind == "block_begin" else "variable_end"
    source, balance = sc.source, []
    while pos < len(source):
        if not balance:
            m = end_re.match(source, pos)
            if m:
                sc.emit(end_kind, None, pos)
                sc.line_starting = m.group()[-1:] == "\n"
                return m.end()
        m = _WHITESPACE.match(source, pos)
        if m:
            pos = m.end()
            continue
        pos = _tag_token(sc, pos, balance)
    return pos


def _tag_token(sc: _Scanner, pos: int, balance: List[str]) -> int:
    source = sc.source
    m = _FLOAT.match(source, pos)
    if m:
        sc.emit("float", ast.literal_eval(m.group().replace("_", "")), pos)
        return m.end()
    m = _INTEGER.match(source, pos)
    if m:
        sc.emit("integer", int(m.group().replace("_", ""), 0), pos)
        return m.end()
    m = _NAME.match(source, pos)
    if m:
        if not m.group().isidentifier():
            raise sc.fail("Invalid character in identifier", pos)
        sc.emit("name", m.group(), pos)
        return m.end()
    m = _STRING.match(source, pos)
    if m:
        sc.emit("string", _unescape(sc, m.group()[1:-1], pos), pos)
        return m.end()
    m = _OPERATOR.match(source, pos)
    if m is None:
        raise sc.fail(f"unexpected char {source[pos]!r} at {pos}", pos)
    op = m.group()
    if op in _CLOSING:
        balance.append(_CLOSING[op])
    elif op in (")", "]", "}"):
        if not balance:
            raise sc.fail(f"unexpected '{op}'", pos)
        expected = balance.pop()
        if expected != op:
            raise sc.fail(f"unexpected '{op}', expected '{expected}'", pos)
    sc.emit("op", op, pos)
    return m.end()


def _unescape(sc: _Scanner, body: str, pos: int) -> str:
    """A string literal's value: Python's escapes, as jinja2 decodes them."""
    try:
        return body.encode("ascii", "backslashreplace").decode("unicode-escape")
    except Exception as exc:  # UnicodeDecodeError for a bad escape
        raise sc.fail(str(exc).split(":")[-1].strip(), pos) from exc


class TokenStream:
    def __init__(self, tokens: List[Token]):
        self.tokens = tokens
        self.i = 0

    @property
    def cur(self) -> Token:
        return self.tokens[self.i]

    def look(self) -> Token:
        return self.tokens[min(self.i + 1, len(self.tokens) - 1)]

    def next(self) -> Token:
        tok = self.tokens[self.i]
        if tok[0] != "eof":
            self.i += 1
        return tok

    def is_op(self, op: str) -> bool:
        tok = self.tokens[self.i]
        return tok[0] == "op" and tok[1] == op

    def is_name(self, name: str) -> bool:
        tok = self.tokens[self.i]
        return tok[0] == "name" and tok[1] == name

    def skip_op(self, op: str) -> bool:
        if self.is_op(op):
            self.i += 1
            return True
        return False

    def skip_name(self, name: str) -> bool:
        if self.is_name(name):
            self.i += 1
            return True
        return False

    def fail(self, message: str, tok: Optional[Token] = None) -> TemplateError:
        tok = tok or self.cur
        return TemplateError(message, "syntax", tok[2], tok[3])

    def expect(self, kind: str, value: Any = None) -> Token:
        tok = self.cur
        if tok[0] != kind or (value is not None and tok[1] != value):
            want = value if value is not None else kind
            got = "end of template" if tok[0] == "eof" else (tok[1] if tok[1] is not None else tok[0])
            raise self.fail(f"expected {want!r}, got {got!r}")
        return self.next()
