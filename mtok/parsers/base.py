"""Shared machinery of the tool-call parsers: results, the streaming protocol,
and the counted scanning every format is built from.

A format answers for a finished output with ``parse(text)`` (SGLang's one-shot
result: ``content`` and the list of calls) and streams with ``stream()``, whose
``feed``/``finish`` return deltas that concatenate to exactly that result
however the text is chunked.  A stream never emits what a continuation could
still change, and never re-reads what it has settled: it keeps its position in
the text (where the next marker may begin, where the open block began) and each
chunk is examined from there.  Most formats read one-shot as a stream given the
whole text at once, so both paths are one piece of code; the property tests
split every output at every boundary to hold streamed == one-shot.

Linear in the input, whatever the input: a model's output is untrusted, and a
rescan from every tag or a backtracking regular expression is an O(n^2) stall of
the worker.  So markers are found with one forward search from a kept position
(``Cursor``: a full marker, or the partial marker the text ends in), blocks
are read once when they close, and each scan adds the characters it examines to
``Meter.scanned``, which the tests use to hold every parser linear (a count, not
a clock).  The text so far is grown in place (the local-variable ``+=`` CPython
resizes without copying), so 1-character chunks cost what 1-kilobyte ones do.

Stdlib only; nothing here knows about HTTP or the server.
"""

import json
import logging
import re

logger = logging.getLogger(__name__)


class Call(object):
    """One parsed tool call: a function name and its arguments as a JSON string."""

    __slots__ = ("name", "arguments")

    def __init__(self, name, arguments):
        self.name = name
        self.arguments = arguments

    def __eq__(self, other):
        return (self.name, self.arguments) == (other.name, other.arguments)

    def __repr__(self):
        return "Call(%r, %r)" % (self.name, self.arguments)

    def as_dict(self):
        return {"name": self.name, "arguments": self.arguments}


class Malformed(ValueError):
    """A tool-call block whose body cannot be read."""


# What reading a model's JSON or Python literal can raise (deep nesting included):
# all of it means "unreadable", never a server error.
UNREADABLE = (ValueError, TypeError, RecursionError, MemoryError)


def dump_args(value):
    """Arguments as SGLang writes them: ``json.dumps`` with unicode kept.

    A lone surrogate that the model wrote as ``\\ud800`` in its JSON stays one
    character here, as in SGLang's string; the HTTP layer writes it as a JSON
    escape.  A value JSON has no form for (a Python set or bytes that a format's
    ``ast.literal_eval`` fallback produced) is written as its ``str``, where
    SGLang would give up on the whole output; so one odd argument cannot undo
    calls that were already streamed.
    """
    return json.dumps(value, ensure_ascii=False, default=str)


def _marker_re(markers):
    """Any of ``markers``, or a proper start of one that ends the text: one forward search answers both."""
    partials = []
    for marker in markers:
        partial = ""
        for ch in reversed(marker[1:]):
            partial = "(?:%s%s)?" % (re.escape(ch), partial)
        partials.append(re.escape(marker[0]) + partial)
    return re.compile("(?P<full>%s)|(?:%s)\\Z" % ("|".join(map(re.escape, markers)), "|".join(partials)))


class Meter(object):
    """Scans that count the characters they examine (``scanned``)."""

    scanned = 0
    _markers = {}

    def find(self, text, sub, start, end=None):
        end = len(text) if end is None else end
        i = text.find(sub, start, end)
        self.scanned += max(0, (i + len(sub) if i != -1 else end) - start)
        return i

    def rfind(self, text, sub, start, end):
        i = text.rfind(sub, start, end)
        self.scanned += max(0, end - (i if i != -1 else start))
        return i

    def search(self, regex, text, pos, end=None):
        """``regex`` (one that never looks past its match) searched in ``text[pos:end]``."""
        end = len(text) if end is None else end
        found = regex.search(text, pos, end)
        self.scanned += max(0, (found.end() if found else end) - pos)
        return found

    def run(self, regex, text, pos, end=None):
        """End of the run ``regex`` (one that always matches, like ``\\s*``) makes from ``pos``."""
        found = regex.match(text, pos, len(text) if end is None else end)
        self.scanned += found.end() - pos + 1
        return found.end()

    def slice(self, text, start, end):
        """``text[start:end]``, counted: a piece read whole."""
        self.read(end - start)
        return text[start:end]

    def read(self, n):
        """A slice of ``n`` characters handed whole to json, ast or a block's reader."""
        self.scanned += n

    def seek(self, text, marker, looked):
        """(index of ``marker`` at or after ``looked``, or -1; where the next look starts).

        Not found, the next look starts at a partial marker the text ends in, or
        at the end: so no character is searched twice, whatever the chunking.
        ``marker`` may be a tuple of markers: the first of any of them.
        """
        regex = self._markers.get(marker)
        if regex is None:
            regex = self._markers[marker] = _marker_re(marker if isinstance(marker, tuple) else (marker,))
        found = self.search(regex, text, looked)
        if found is None:
            return -1, len(text)
        return (found.start(), found.start()) if found.group("full") is not None else (-1, found.start())


class Cursor(object):
    """A search for one marker in a growing text that resumes where it stopped.

    ``find`` answers where the marker begins at or after ``at`` (-1: not yet).
    When the text ends in a partial marker, ``at`` stays on it and the next
    chunk is only compared with the rest of the marker, so a marker fed one
    character at a time is read once, not once per character.
    """

    __slots__ = ("marker", "at", "seen")

    def __init__(self, marker, at=0):
        self.marker = marker
        self.at = self.seen = at  # text[at:seen] is a partial marker

    def reset(self, at):
        self.at = self.seen = at

    def find(self, meter, text):
        marker, at = self.marker, self.at
        if self.seen > at:
            end = min(len(text), at + len(marker))
            meter.read(end - self.seen)
            if text[self.seen:end] == marker[self.seen - at:end - at]:
                self.seen = end
                return at if end - at == len(marker) else -1
            at += 1  # not here; a later start may lie inside the partial
        found, self.at = meter.seek(text, marker, at)
        self.seen = len(text) if found == -1 else self.at
        return found


def tool_names(tools):
    """The function names a request declares (OpenAI ``tools`` list)."""
    names = []
    for tool in tools or ():
        fn = tool.get("function") if isinstance(tool, dict) else None
        if isinstance(fn, dict) and fn.get("name"):
            names.append(fn["name"])
    return names


def tool_schema(tools, name):
    """The JSON schema ``parameters`` of function ``name``, or ``{}``."""
    for tool in tools or ():
        fn = tool.get("function") if isinstance(tool, dict) else None
        if isinstance(fn, dict) and fn.get("name") == name:
            params = fn.get("parameters")
            return params if isinstance(params, dict) else {}
    return {}


class ToolParser(Meter):
    """Base of every format: holds the request's tools; subclasses add the format."""

    name = ""
    index_by_call = False  # /parse_function_call's tool_index: position in tools (SGLang)

    def __init__(self, tools=None):
        self.tools = list(tools or ())
        self.names = set(tool_names(self.tools))

    def known(self, name):
        """SGLang drops a call to a function the request did not declare (it logs it)."""
        if name and name in self.names:
            return True
        logger.warning("model called undeclared function %r; dropped as SGLang does", name)
        return False

    def calls_from_json(self, obj):
        """SGLang's reading of ``{"name", "arguments"|"parameters"}`` objects (or a list)."""
        calls = []
        for act in obj if isinstance(obj, list) else [obj]:
            if not isinstance(act, dict):
                raise Malformed("a tool call is not a JSON object")
            name = act.get("name")
            if self.known(name):
                args = act.get("parameters") or act.get("arguments", {})
                calls.append(Call(name, dump_args(args)))
        return calls

    def loads(self, text, start, end):
        """``json.loads`` of ``text[start:end]``, counted."""
        self.read(end - start)
        return json.loads(text[start:end])

    def parse(self, text):
        """(content, calls) of a finished output: the stream, given it all at once."""
        stream = self.stream()
        return collect(stream.feed(text) + stream.finish())

    def stream(self):
        raise NotImplementedError


class ToolStream(object):
    """One request's streaming state: ``feed`` chunks, then ``finish`` once.

    Deltas are tuples: ``("content", text)``, ``("call", index, name)`` and
    ``("args", index, fragment)``; ``collect`` folds them back into a result.
    The content sent so far is always ``text[lead:sent]`` (``lead``: leading
    whitespace a format strips, see ``HeadStream``); calls are sent in order.
    """

    def __init__(self, parser):
        self.parser = parser
        self.text = ""
        self.sent = 0
        self.lead = 0
        self.ncalls = 0
        self.finished = False

    def feed(self, delta):
        if not delta or self.finished:
            return []
        text, self.text = self.text, ""
        text += delta  # in place: this local holds the only reference
        self.text = text
        return self.step(text)

    def finish(self):
        if self.finished:
            return []
        self.finished = True
        return self.final(self.text)

    def step(self, text):
        """Deltas settled by the text so far."""
        raise NotImplementedError

    def final(self, text):
        """Deltas that complete the one-shot result."""
        raise NotImplementedError

    def content_to(self, end, lead=None):
        """Content up to ``end`` as deltas; ``lead``: where it begins, if nothing was sent yet."""
        if lead is not None and self.sent == self.lead == 0:
            self.lead = self.sent = lead
        if end <= self.sent:
            return []
        piece, self.sent = self.text[self.sent:end], end
        return [("content", piece)]

    def calls_out(self, calls):
        """Deltas for ``calls[self.ncalls:]``: name, then the arguments in one piece."""
        out = []
        for index in range(self.ncalls, len(calls)):
            out.append(("call", index, calls[index].name))
            out.append(("args", index, calls[index].arguments))
        self.ncalls = max(self.ncalls, len(calls))
        return out

    def complete(self, content, calls):
        """Deltas from what was sent to the final ``(content, calls)``; ``content`` is
        a string, or a ``(start, end)`` span of the text.

        The final content extends what was sent by construction; if a format
        ever broke that, nothing sent is retracted (logged).
        """
        if isinstance(content, tuple):
            start, end = content
            if self.sent == self.lead:
                self.lead = self.sent = start
            if start == self.lead and self.sent <= end:
                return self.content_to(end) + self.calls_out(calls)
            content = self.text[start:end]
        sent = self.text[self.lead:self.sent]
        if not content.startswith(sent):
            logger.error("%s parser: streamed text diverged from the final parse", self.parser.name)
            return []
        out = [("content", content[len(sent):])] if len(content) > len(sent) else []
        return out + self.calls_out(calls)


class HeadStream(ToolStream):
    """Content before a format's ``marker``, streamed as it settles; the calls at the end.

    With ``strip`` (as most SGLang detectors), the content is stripped when a
    call follows and kept whole when none does: so a text that opens with
    whitespace sends nothing before the end, trailing whitespace waits for what
    follows, and text that may be the start of the marker waits for the next
    chunk.  ``marker_at`` is where the marker begins once found.
    """

    strip = True

    def __init__(self, parser, marker):
        ToolStream.__init__(self, parser)
        self.cursor = Cursor(marker)
        self.marker_at = -1
        self.looked = 0  # the head is settled up to here
        self.first = -1  # first non-space character of the head
        self.last = 0  # end of its last non-space character

    def head(self, text):
        """Advance the search for the marker; the deltas of the content it settles."""
        if self.marker_at != -1:
            return []
        start = self.looked
        self.marker_at = self.cursor.find(self.parser, text)
        self.looked = self.marker_at if self.marker_at != -1 else self.cursor.at
        return self._settle(text, start, self.looked)

    def _settle(self, text, start, end):
        if not self.strip:
            return self.content_to(end)
        kept = text[start:end].rstrip()
        if kept:
            self.last = start + len(kept)
            if self.first == -1:
                self.first = start + len(kept) - len(kept.lstrip())
        return self.content_to(self.last) if self.first == 0 else []

    def stripped(self):
        """The head's content as SGLang strips it: ``(start, end)`` in the text."""
        return (self.first, self.last) if self.first != -1 else (0, 0)


class NoTools(ToolParser):
    """A request that declares no tools: the output is all content, as in SGLang."""

    name = "none"

    def parse(self, text):
        return text, []

    def stream(self):
        return PassThrough(self)


class PassThrough(ToolStream):
    def step(self, text):
        return self.content_to(len(text))

    def final(self, text):
        return self.content_to(len(text))


def collect(deltas):
    """Fold deltas into ``(content, [Call])`` -- the shape ``parse`` returns."""
    content, names, args = [], [], []
    for delta in deltas:
        if delta[0] == "content":
            content.append(delta[1])
        elif delta[0] == "call":
            names.append(delta[2])
            args.append("")
        else:
            args[delta[1]] += delta[2]
    return "".join(content), [Call(n, a) for n, a in zip(names, args)]
