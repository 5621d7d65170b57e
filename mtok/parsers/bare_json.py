"""Tool-call formats of bare JSON, read only as a whole: llama3 and mistral.

As SGLang (0.5.23, ``srt/function_call/``) reads them: the content before the
format's marker streams as it settles; the calls, and any text after them, come
when the output ends, since what follows can still change them.  SGLang's
slicing of the rest of the text for each call (and json's line count from the
start of a long text for each error) would make a long output quadratic, so the
readers work from positions in the one text.
"""

import json
import logging
import re

from mtok.parsers.base import UNREADABLE, HeadStream, ToolParser

logger = logging.getLogger(__name__)
SPACE = re.compile(r"\s*")


class MarkerStream(HeadStream):
    """Content until the format's marker streams; the calls are read at the end."""

    def __init__(self, parser):
        HeadStream.__init__(self, parser, parser.marker)
        self.strip = parser.strip_content

    def step(self, text):
        out = self.head(text)
        if self.marker_at != -1 and self.strip:
            out += self.content_to(self.stripped()[1], lead=self.stripped()[0])
        return out

    def final(self, text):
        return self.complete(*self.parser.parse_at(text, self.marker_at))


class MarkerToolParser(ToolParser):
    """Formats read only as a whole, from where ``marker`` first occurs."""

    marker = ""
    strip_content = True

    def parse(self, text):
        return self.parse_at(text, self.find(text, self.marker, 0))

    def parse_at(self, text, at):
        """(content, calls) of ``text``, whose first marker is at ``at`` (-1: none)."""
        raise NotImplementedError

    def stream(self):
        return MarkerStream(self)

    def balanced(self, text, pos):
        """End (exclusive) of the bracketed value opening at ``pos``, or -1 if unclosed.

        Counts only the bracket kind that opens it, skipping strings, as SGLang's
        Mistral detector does before it hands the slice to ``json.loads``.
        """
        opening = text[pos]
        closing = "}" if opening == "{" else "]"
        depth, in_string = 0, False
        for found in BRACKETS.finditer(text, pos):
            ch = found.group()
            if ch == '"':
                in_string = not in_string
            elif in_string or len(ch) == 2:
                continue
            elif ch == opening:
                depth += 1
            elif ch == closing:
                depth -= 1
                if depth == 0:
                    self.read(found.end() - pos)
                    return found.end()
        self.read(len(text) - pos)
        return -1


BRACKETS = re.compile(r'\\.|["{}\[\]]', re.S)  # a backslash escapes the next character


class MistralParser(MarkerToolParser):
    """``[TOOL_CALLS] [{"name", "arguments"}, ...]`` and the newer
    ``[TOOL_CALLS]NAME[ARGS]{...}`` (repeated); text after the calls joins the content."""

    name = "mistral"
    marker = "[TOOL_CALLS"

    def parse_at(self, text, at):
        if at == -1:
            return text, []
        content = text[:at].strip()
        array = self.find(text, "[TOOL_CALLS] [", at)
        if array != -1:
            return self._parse_array(text, content, array + len("[TOOL_CALLS] "))
        calls, pos = [], at
        while pos < len(text):
            found = self._compact_call(text, pos)
            if found is None:
                break
            calls.extend(self.calls_from_json({"name": found[0], "arguments": found[1]}))
            pos = self.run(SPACE, text, found[2])
        if not calls:
            return content, []
        rest = text[pos:].strip()
        return ((content + " " + rest).strip() if rest else content), calls

    def _parse_array(self, text, content, start):
        end = self.balanced(text, start)
        if end == -1:
            return content, []
        calls = []
        try:
            calls = self.calls_from_json(self.loads(text, start, end))
        except UNREADABLE:
            pass
        trailing = text[end:].strip()
        return ((content + " " + trailing).strip() if trailing else content), calls

    def _compact_call(self, text, pos):
        """(name, arguments, end) of ``[TOOL_CALLS]NAME[ARGS]{...}`` at the next marker."""
        i = self.find(text, self.marker, pos)
        if i == -1:
            return None
        i = self._skip_bracket_space(text, i + len(self.marker))
        args_at = self.find(text, "[ARGS", i)
        name = self.slice(text, i, args_at).strip() if args_at != -1 else ""
        if not name:
            return None
        j = self._skip_bracket_space(text, args_at + len("[ARGS"))
        if j >= len(text) or text[j] not in "{[":
            return None
        end = self.balanced(text, j)
        try:
            return (name, self.loads(text, j, end), end) if end != -1 else None
        except UNREADABLE:
            return None

    def _skip_bracket_space(self, text, i):
        return self.run(SPACE, text, i + 1 if text.startswith("]", i) else i)


class Llama3Parser(MarkerToolParser):
    """A JSON object at the very start, or after ``<|python_tag|>``; several separated by ``;``.

    The content is the text before the tag (not stripped) plus whatever follows
    the last readable object, as SGLang has it.  SGLang also retries a Python
    dict literal (single quotes); mtok does not (see docs/chat.md).  SGLang retries
    an unreadable object from the next ``{"name":``; a retry inside a failed one
    rescans it, so the retries may scan ``RETRY_BUDGET`` times the text in all,
    then the rest is content (only crafted nesting comes near it).
    """

    name = "llama3"
    marker = "<|python_tag|>"
    separator = ";"
    strip_content = False

    def stream(self):
        return Llama3Stream(self)

    def parse_at(self, text, at):
        if at == -1 and not text.startswith("{"):
            return text, []
        normal, start = (text[:at], at + len(self.marker)) if at != -1 else ("", 0)
        objs, safe = self._objects(text, start)
        trailing = text[safe:].strip() if safe < len(text) else ""
        try:
            calls = self.calls_from_json(objs) if objs else []
        except UNREADABLE:
            calls = []
        return normal + trailing, calls

    def _objects(self, text, idx):
        """The JSON objects SGLang reads from ``idx`` on, and where the text after them begins."""
        decoder, objs, safe = json.JSONDecoder(), [], idx
        budget = RETRY_BUDGET * (len(text) - idx) + 65536
        while idx < len(text):
            try:
                obj, end = self._decode(decoder, text, idx)
            except UNREADABLE as exc:
                budget -= (idx + exc.pos + 1 if isinstance(exc, json.JSONDecodeError) else len(text)) - idx
                idx = self.find(text, '{"name":', idx + 1) if budget > 0 else -1
                if idx == -1:
                    break
                continue
            objs.append(obj)
            idx = safe = end + len(self.separator)
        if budget <= 0:
            logger.warning("llama3: retries of unreadable JSON scanned %dx the output; the rest is content",
                           RETRY_BUDGET)
        return objs, safe

    def _decode(self, decoder, text, idx):
        """``decoder.raw_decode(text, idx)``, from a window of the text that doubles
        until it holds the value or its error: json's error counts the lines from
        the start of what it was given, which from ``idx`` of a long text is a
        quadratic cost when every ``{"name":`` is retried.  Error positions are
        relative to ``idx``."""
        width = 64
        while True:
            window = self.slice(text, idx, min(len(text), idx + width))
            whole = idx + len(window) == len(text)
            try:
                obj, end = decoder.raw_decode(window)
            except json.JSONDecodeError as exc:
                if whole or (exc.pos < len(window) - 16 and not exc.msg.startswith("Unterminated")):
                    raise
            else:
                if whole or end < len(window):  # a number the window cut short ends at its end
                    return obj, idx + end
            width *= 2


RETRY_BUDGET = 4


class Llama3Stream(MarkerStream):
    """An output that opens with ``{`` is all calls, or all content: nothing streams."""

    def _settle(self, text, start, end):
        return [] if text.startswith("{") else MarkerStream._settle(self, text, start, end)
