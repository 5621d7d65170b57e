"""The chat endpoint's output parser: the plain :class:`OutputParser`, which
passes text through, and when the server has ``--tool-call-parser``
or ``--reasoning-parser``, ``mtok.parsers`` run in the worker that owns the
request, turning the model's text into OpenAI's ``reasoning_content``,
``content`` and ``tool_calls``, streamed or not.

Per request (as SGLang):

* reasoning is separated when the model has a reasoning parser and
  ``separate_reasoning`` is not false; ``stream_reasoning: false`` sends it in
  one piece once it is complete; ``chat_template_kwargs`` (``enable_thinking``,
  ``thinking``) reach the parser as they reach the template;
* tool calls are parsed when the model has a tool-call parser, the request has
  ``tools`` and ``tool_choice`` is not ``"none"``; ``"required"`` and a named
  function constrain the output to a JSON array of calls
  (:mod:`mtok.api.constraints`), which is read as that JSON with or without a
  tool-call parser.

The streamed deltas come from the parsers' streams, whose pieces add up to their
one-shot results, so a streamed response concatenates to the non-streamed one.
"""

from __future__ import annotations

import uuid
from typing import TYPE_CHECKING, Any, Dict, List, Optional

from .constraints import forced_parser
from .parser_routes import check_tools
from ..parsers import make_reasoning_parser, make_tool_parser
from .. import fields

if TYPE_CHECKING:
    from ..models import ModelEntry

PARSER_FIELDS = {"separate_reasoning", "stream_reasoning"}


class OutputParser:
    """Generated text -> the assistant message's fields.  This one passes text
    through as ``content``; parsers for reasoning and tool calls subclass it.

    Streaming calls ``feed`` with each text delta and ``flush`` at the end; each
    returns the deltas to send (``{"content": ...}``, ``{"reasoning_content": ...}``,
    ``{"tool_calls": [...]}``).  A non-streaming response calls ``message`` once
    with the whole text.  ``finish_reason`` may rename the finish (``tool_calls``).
    """

    def feed(self, text: str) -> List[Dict[str, Any]]:
        return [{"content": text}] if text else []

    def flush(self) -> List[Dict[str, Any]]:
        return []

    def message(self, text: str) -> Dict[str, Any]:
        return {"content": text}

    def finish_reason(self, reason: Optional[str]) -> Optional[str]:
        return reason


def make_output_parser(body: Dict[str, Any], model: "ModelEntry", server_args: Any) -> OutputParser:
    """The hook: which parser a chat request's output goes through."""
    return output_parser_for(body, model.name, server_args) or OutputParser()


def configured(server_args: Any) -> Dict[str, Dict[str, str]]:
    """The server's parsers per model, worked out once per process."""
    cached = getattr(server_args, "_parsers_cache", None)
    if cached is None:
        cached = server_args.parsers()
        object.__setattr__(server_args, "_parsers_cache", cached)
    return cached


def call_id() -> str:
    return "call_" + uuid.uuid4().hex[:24]


class ParsedOutput(OutputParser):
    """Reasoning first, then tool calls in what is left; either may be absent."""

    def __init__(self, reasoning: Any = None, tools: Any = None, stream_reasoning: bool = True):
        self.reasoning = reasoning
        self.tools = tools
        self.r_stream = reasoning.stream(stream_reasoning) if reasoning else None
        self.t_stream = tools.stream() if tools else None
        self.ids: List[str] = []
        self.called = False

    # -- streaming ------------------------------------------------------------------
    def feed(self, text: str) -> List[Dict[str, Any]]:
        if not text:
            return []
        if self.r_stream is None:
            return self._content(text)
        r, c = self.r_stream.feed(text)
        return ([{"reasoning_content": r}] if r else []) + self._content(c)

    def flush(self) -> List[Dict[str, Any]]:
        out: List[Dict[str, Any]] = []
        if self.r_stream is not None:
            r, c = self.r_stream.finish()
            out = ([{"reasoning_content": r}] if r else []) + self._content(c)
        if self.t_stream is not None:
            out += self._tool_deltas(self.t_stream.finish())
        return out

    def _content(self, text: str) -> List[Dict[str, Any]]:
        if not text:
            return []
        if self.t_stream is None:
            return [{"content": text}]
        return self._tool_deltas(self.t_stream.feed(text))

    def _tool_deltas(self, deltas: List[tuple]) -> List[Dict[str, Any]]:
        out = []
        for d in deltas:
            if d[0] == "content":
                out.append({"content": d[1]})
            elif d[0] == "call":
                self.called = True
                self.ids.append(call_id())
                out.append({"tool_calls": [{"index": d[1], "id": self.ids[d[1]], "type": "function",
                                            "function": {"name": d[2], "arguments": ""}}]})
            elif d[2]:
                out.append({"tool_calls": [{"index": d[1], "function": {"arguments": d[2]}}]})
        return out

    # -- one response ----------------------------------------------------------------
    def message(self, text: str) -> Dict[str, Any]:
        msg: Dict[str, Any] = {}
        if self.reasoning is not None:
            reasoning, text = self.reasoning.parse(text)
            msg["reasoning_content"] = reasoning or None
        calls = []
        if self.tools is not None:
            text, calls = self.tools.parse(text)
        self.called = bool(calls)
        msg["content"] = text or None
        if calls:
            msg["tool_calls"] = [{"id": call_id(), "type": "function",
                                  "function": {"name": c.name, "arguments": c.arguments}} for c in calls]
        return msg

    def finish_reason(self, reason: Optional[str]) -> Optional[str]:
        return "tool_calls" if self.called and reason == "stop" else reason


def _tool_parser(body: Dict[str, Any], name: Optional[str]) -> Any:
    tools = check_tools(body.get("tools"))
    choice = body.get("tool_choice")
    forced = forced_parser(body)  # the constrained output is JSON, whatever the model's own format
    if forced is not None:
        return forced
    if name is None or not tools or choice == "none":
        return None
    return make_tool_parser(name, tools)


def output_parser_for(body: Dict[str, Any], model_name: str, server_args: Any) -> Optional[OutputParser]:
    """A ParsedOutput for this request, or None when no parser applies."""
    parsers = configured(server_args)
    tools = _tool_parser(body, parsers["tool"].get(model_name))
    separate = fields.from_body(body, fields.CHAT, "separate_reasoning")
    stream_reasoning = fields.from_body(body, fields.CHAT, "stream_reasoning")
    kwargs = body.get("chat_template_kwargs") or {}
    name = parsers["reasoning"].get(model_name)
    reasoning = make_reasoning_parser(name, kwargs) if name and separate else None
    if tools is None and reasoning is None:
        return None
    return ParsedOutput(reasoning, tools, stream_reasoning)
