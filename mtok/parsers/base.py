"""Shared machinery of the tool-call parsers: results, the streaming engine, helpers.

Every format parser answers two questions about the model's text so far:

* ``parse(text)``  -- the final answer for a finished output (SGLang's one-shot
  result: ``content`` and the list of calls);
* ``stable(text)`` -- the part of that answer which no continuation of ``text``
  can change: a prefix of the final ``content`` and the calls already settled.

``ToolStream`` turns those answers into streamed deltas: after each chunk it
emits what ``stable`` added since the last chunk, and ``finish`` emits what
``parse`` adds on top.  So the streamed deltas concatenate to the one-shot
result by construction, however the text was chunked; the only obligation of a
format is that ``stable`` never claims more than any continuation would give
(the property tests split every output at every boundary to check it).  Text
that merely looks like the start of a marker is left out of ``stable`` until the
next chunk decides it.

Stdlib only; nothing here knows about HTTP or the server.
"""

import json
import logging

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

    A value JSON has no form for (a Python set or bytes that a format's
    ``ast.literal_eval`` fallback produced) is written as its ``str``, where
    SGLang would give up on the whole output; so one odd argument cannot undo
    calls that were already streamed.
    """
    return json.dumps(value, ensure_ascii=False, default=str)


def partial_suffix(text, marker):
    """Length of the longest end of ``text`` that is a proper start of ``marker``."""
    for n in range(min(len(text), len(marker) - 1), 0, -1):
        if marker.startswith(text[-n:]):
            return n
    return 0


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


class ToolParser(object):
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

    def parse(self, text):
        """(content, calls) of a finished output."""
        raise NotImplementedError

    def stable(self, text):
        """(content prefix, settled calls) that no continuation of ``text`` changes."""
        return "", []

    def stream(self):
        return ToolStream(self)


class NoTools(ToolParser):
    """A request that declares no tools: the output is all content, as in SGLang."""

    name = "none"

    def parse(self, text):
        return text, []

    def stable(self, text):
        return text, []


class ToolStream(object):
    """One request's streaming state: ``feed`` chunks, then ``finish`` once.

    Deltas are tuples: ``("content", text)``, ``("call", index, name)`` and
    ``("args", index, fragment)``; ``collect`` folds them back into a result.
    """

    def __init__(self, parser):
        self.parser = parser
        self.text = ""
        self.content = ""
        self.calls = []
        self.finished = False

    def feed(self, delta):
        if not delta:
            return []
        self.text += delta
        content, calls = self.parser.stable(self.text)
        return self._advance(content, calls)

    def finish(self):
        if self.finished:
            return []
        self.finished = True
        content, calls = self.parser.parse(self.text)
        return self._advance(content, calls)

    def _advance(self, content, calls):
        out = []
        if not content.startswith(self.content) or calls[: len(self.calls)] != self.calls:
            # A format's stable() claimed too much; never retract what was sent.
            logger.error("%s parser: streamed text diverged from the final parse", self.parser.name)
            return out
        if len(content) > len(self.content):
            out.append(("content", content[len(self.content):]))
            self.content = content
        for index in range(len(self.calls), len(calls)):
            call = calls[index]
            out.append(("call", index, call.name))
            out.append(("args", index, call.arguments))
            self.calls.append(call)
        return out


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


class BlockToolParser(ToolParser):
    """Formats made of a start marker, then call blocks each closed by an end marker.

    ``content`` is the text before the first ``start`` (stripped when
    ``strip_content``, as most of SGLang's detectors do).  ``all_or_nothing``
    follows the SGLang detectors for which one unreadable block turns the whole
    output into content (no calls); the others skip just that block.  Under
    ``all_or_nothing`` no call is settled before the output ends, so such a
    format streams its calls at the end.
    """

    start = ""
    block_re = None  # compiled; matches complete blocks only
    strip_content = True
    all_or_nothing = True

    def parse_block(self, match):
        """Calls in one block (``[]`` when dropped); raise Malformed when unreadable."""
        raise NotImplementedError

    def blocks(self, text):
        return list(self.block_re.finditer(text))

    def parse(self, text):
        idx = text.find(self.start)
        if idx == -1:
            return text, []
        content = text[:idx].strip() if self.strip_content else text[:idx]
        calls = []
        for match in self.blocks(text):
            try:
                calls.extend(self.parse_block(match))
            except UNREADABLE as exc:
                if self.all_or_nothing:
                    logger.warning("%s: unreadable tool call (%s); output kept as content", self.name, exc)
                    return text, []
                logger.warning("%s: unreadable tool call (%s); dropped as SGLang does", self.name, exc)
        return content, calls

    def stable(self, text):
        idx = text.find(self.start)
        if idx == -1:
            head = text[: len(text) - partial_suffix(text, self.start)]
            return self._content_prefix(head, text), []
        content = text[:idx].strip() if self.strip_content else text[:idx]
        if self.all_or_nothing:
            return (content if text.startswith(content) else ""), []
        calls = []
        for match in self.block_re.finditer(text):
            try:
                calls.extend(self.parse_block(match))
            except UNREADABLE:
                pass
        return content, calls

    def _content_prefix(self, head, text):
        """Before any marker: what is certain whether or not a marker follows."""
        if not self.strip_content:
            return head
        if head[:1].isspace():
            return ""  # stripped if a call follows, kept if not: undecided
        return head.rstrip()
