"""``POST /v1/responses``: OpenAI's Responses API as SGLang serves it, over the chat path.

A Responses body is read through its own rows of the field table
(:data:`mtok.fields.RESP`), then rewritten as a chat completion body
(:func:`chat_body`: ``instructions`` and ``input`` become messages, function
tools chat tools, ``max_output_tokens`` ``max_tokens``, ``text.format``
``response_format``) and built by the chat route's own
:meth:`~mtok.api.chat.ChatRoutes.chat_request`: one template, one set of
sampling checks, the same ``--tool-call-parser`` and ``--reasoning-parser``.
The parsed message becomes output items (:func:`output_items`): a ``reasoning``
item, a ``message`` with ``output_text``, ``function_call`` items.

A stream sends OpenAI's typed events, each with its ``sequence_number``:
``response.created``, ``response.in_progress``, then per item
``response.output_item.added``, ``response.content_part.added``, the deltas
(``response.reasoning_text.delta``, ``response.output_text.delta``,
``response.function_call_arguments.delta``) and their ``.done`` events, and
last ``response.completed`` (``response.incomplete`` when the token budget ran
out, ``response.failed`` when the request failed) with the whole response.
At most one item is open at a time: the next one closes it (:class:`EventWriter`).

**No response store.** SGLang keeps responses in memory only with
``--enable-response-store`` (off by default, and unbounded); mtok keeps none,
so ``previous_response_id`` and ``background`` are refused (400) as SGLang
refuses them without its store, ``store`` is accepted and keeps nothing, and
``GET /v1/responses/{id}`` is a 404.  A client carries the conversation in
``input`` instead (function calls and their outputs are input items).

``usage`` has the Responses names (``input_tokens``, ``output_tokens``, their
details, ``total_tokens``) and, beside them, the chat names SGLang's own tests
read (``prompt_tokens``, ``completion_tokens``).  Errors have OpenAI's nested
shape, as SGLang's Responses route answers them.
"""

from __future__ import annotations

import time
import uuid
from typing import Any, Dict, Iterator, List, Optional

from .. import fields
from .openai import openai_finish
from .routes import NOT_YET, Job, Pending, Request, route
from ..validate import APIError, _json_type, bad, require_object, show

# Responses fields that go to the chat body under the same name (checked there by the chat rows)
AS_ON_CHAT = ("model", "temperature", "top_p", "top_k", "min_p", "frequency_penalty", "presence_penalty",
              "repetition_penalty", "stop", "seed", "user", "stream", "parallel_tool_calls", "chat_template_kwargs")
TEXT_PARTS = ("input_text", "output_text", "text")


def new_id(prefix: str) -> str:
    return f"{prefix}_{uuid.uuid4().hex}"


def content_text(content: Any, where: str) -> str:
    """A message's content: a string, or text parts (joined); anything else is refused (text only)."""
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        raise bad(f"'{where}.content' must be a string or a list of content parts, not {_json_type(content)}", where)
    out = []
    for part in content:
        if not isinstance(part, dict) or part.get("type") not in TEXT_PARTS or not isinstance(part.get("text"), str):
            kind = part.get("type") if isinstance(part, dict) else _json_type(part)
            raise bad(f"'{where}.content' holds a {kind!r} part: this server's engines take text only", where)
        out.append(part["text"])
    return "".join(out)


def input_messages(value: Any) -> List[Dict[str, Any]]:
    """``input`` as chat messages: a string is one user message; a list holds
    messages, ``function_call`` items (an assistant's tool calls) and
    ``function_call_output`` items (tool messages).  Reasoning items are dropped,
    as templates are not shown past reasoning."""
    if isinstance(value, str):
        return [{"role": "user", "content": value}]
    if not isinstance(value, list) or not value:
        raise bad("'input' must be a string or a non-empty list of input items", "input")
    messages: List[Dict[str, Any]] = []
    for i, item in enumerate(value):
        where = f"input[{i}]"
        if not isinstance(item, dict):
            raise bad(f"'{where}' must be an object, not {_json_type(item)}", where)
        kind = item.get("type", "message")
        if kind == "message":
            role = item.get("role")
            if role not in ("user", "assistant", "system", "developer"):
                raise bad(f"'{where}.role' must be 'user', 'assistant', 'system' or 'developer'", where)
            messages.append({"role": "system" if role == "developer" else role,
                             "content": content_text(item.get("content"), where)})
        elif kind == "function_call":
            call = {"id": item.get("call_id"), "type": "function",
                    "function": {"name": item.get("name"), "arguments": item.get("arguments")}}
            if not all(isinstance(x, str) for x in (call["id"], item.get("name"), item.get("arguments"))):
                raise bad(f"'{where}' needs string 'call_id', 'name' and 'arguments'", where)
            last = messages[-1] if messages else None
            if last is not None and last["role"] == "assistant" and "tool_calls" in last:
                last["tool_calls"].append(call)
            else:
                messages.append({"role": "assistant", "content": None, "tool_calls": [call]})
        elif kind == "function_call_output":
            if not isinstance(item.get("call_id"), str):
                raise bad(f"'{where}.call_id' must be a string", where)
            messages.append({"role": "tool", "tool_call_id": item["call_id"],
                             "content": content_text(item.get("output"), where)})
        elif kind != "reasoning":
            raise bad(f"'{where}.type' {kind!r} is not supported: send messages, function_call and "
                      "function_call_output items", where)
    return messages


def chat_tools(tools: Any) -> Optional[List[Dict[str, Any]]]:
    """Function tools as chat tools; other tool types (web search, ...) have nothing here to run them."""
    if tools is None:
        return None
    if not isinstance(tools, list):
        raise bad("'tools' must be a list", "tools")
    out = []
    for tool in tools:
        if not isinstance(tool, dict) or tool.get("type") != "function":
            kind = tool.get("type") if isinstance(tool, dict) else _json_type(tool)
            raise bad(f"tools of type {kind!r} are not supported: only 'function' tools", "tools")
        if not isinstance(tool.get("name"), str) or not tool["name"]:
            raise bad("Function tools must include a name.", "tools")
        fn = {k: tool[k] for k in ("name", "description", "parameters", "strict") if tool.get(k) is not None}
        out.append({"type": "function", "function": fn})
    return out


def chat_tool_choice(choice: Any) -> Any:
    if choice is None or choice in ("auto", "none", "required"):
        return choice
    if isinstance(choice, dict) and choice.get("type") == "function" and isinstance(choice.get("name"), str):
        return {"type": "function", "function": {"name": choice["name"]}}
    raise bad("'tool_choice' must be 'auto', 'none', 'required' or {\"type\": \"function\", \"name\": ...}",
              "tool_choice")


def response_format(text: Any) -> Optional[Dict[str, Any]]:
    """``text.format`` as chat's ``response_format`` (None for plain text)."""
    fmt = (text or {}).get("format") if isinstance(text, dict) else None
    if fmt is None or not isinstance(fmt, dict) or fmt.get("type") == "text":
        return None
    if fmt.get("type") == "json_schema":
        return {"type": "json_schema", "json_schema": {"name": fmt.get("name"), "schema": fmt.get("schema"),
                                                       "strict": fmt.get("strict")}}
    return {"type": fmt.get("type")}


def reasoning_effort(got: Dict[str, Any]) -> Any:
    """``reasoning.effort``, if the body gives one."""
    reasoning = got.get("reasoning")
    return reasoning.get("effort") if isinstance(reasoning, dict) else None


def chat_body(got: Dict[str, Any]) -> Dict[str, Any]:
    """The chat completion body a Responses body stands for."""
    if "input" not in got:
        raise bad("'input' is required", "input")
    messages = input_messages(got["input"])
    if got.get("instructions"):
        messages.insert(0, {"role": "system", "content": got["instructions"]})
    chat: Dict[str, Any] = {k: got[k] for k in AS_ON_CHAT if k in got}
    chat["messages"] = messages
    if "max_output_tokens" in got:
        chat["max_tokens"] = got["max_output_tokens"]
    for key, value in (("tools", chat_tools(got.get("tools"))), ("tool_choice", chat_tool_choice(got.get("tool_choice"))),
                       ("response_format", response_format(got.get("text")))):
        if value is not None:
            chat[key] = value
    effort = reasoning_effort(got)
    if effort == "none":  # as SGLang: thinking off, whichever key the template reads
        chat["chat_template_kwargs"] = {"thinking": False, "enable_thinking": False,
                                        **(chat.get("chat_template_kwargs") or {})}
    elif isinstance(effort, str):
        chat["reasoning_effort"] = effort
    return chat


# -- the answer ---------------------------------------------------------------------
def reasoning_item(item_id: str, text: str, status: str) -> Dict[str, Any]:
    return {"id": item_id, "type": "reasoning", "summary": [], "status": status,
            "content": [{"type": "reasoning_text", "text": text}] if status == "completed" else []}


def text_part(text: str) -> Dict[str, Any]:
    return {"type": "output_text", "text": text, "annotations": [], "logprobs": []}


def message_item(item_id: str, text: str, status: str) -> Dict[str, Any]:
    return {"id": item_id, "type": "message", "role": "assistant", "status": status,
            "content": [text_part(text)] if status == "completed" else []}


def call_item(item_id: str, call_id: str, name: str, arguments: str, status: str) -> Dict[str, Any]:
    return {"id": item_id, "type": "function_call", "call_id": call_id, "name": name, "arguments": arguments,
            "status": status}


def output_items(message: Dict[str, Any]) -> List[Dict[str, Any]]:
    """An output parser's message (content, reasoning_content, tool_calls) as output items."""
    items = []
    if message.get("reasoning_content"):
        items.append(reasoning_item(new_id("rs"), message["reasoning_content"], "completed"))
    if message.get("content"):
        items.append(message_item(new_id("msg"), message["content"], "completed"))
    for call in message.get("tool_calls") or ():
        fn = call["function"]
        items.append(call_item(new_id("fc"), call["id"], fn["name"], fn["arguments"], "completed"))
    return items


def usage(st: Any) -> Dict[str, Any]:
    p, c = st.prompt_tokens, st.completion_tokens
    return {"input_tokens": p, "input_tokens_details": {"cached_tokens": 0}, "output_tokens": c,
            "output_tokens_details": {"reasoning_tokens": 0}, "total_tokens": p + c,
            "prompt_tokens": p, "completion_tokens": c}


def status_of(st: Any) -> str:
    finish, _ = openai_finish(st)
    return "incomplete" if finish == "length" else "completed"


class ResponsesRoutes:
    """Mixed into :class:`mtok.api.native.Api`, which provides tm, args, start_stream and chat_request."""

    @route("POST", "/v1/responses", inline=True, offload=True)
    def responses(self, req: Request) -> Any:
        got = fields.read(require_object(req.json()), fields.RESP, self.args.strict_fields)
        chat = chat_body(got)
        obj, model, parsers, _ = self.chat_request(chat, fields.read(chat, fields.CHAT, False))
        rid = self.tm.assign_rids(obj)
        head = response_head(f"resp_{rid}", model.name, got)

        def answer(handle: Any) -> Any:
            if obj.stream:
                return self.start_stream(handle, EventWriter(head, parsers[0]).events(handle))
            return Pending(handle, lambda results: finished(head, output_items(parsers[0].message(results[0].text)),
                                                            results[0]))
        return Job((obj, req.watch), answer)

    @route("GET", "/v1/responses/{response_id}")
    def retrieve_response(self, req: Request) -> Any:
        response_id = req.path.rpartition("/")[2]
        raise APIError(f"Response with id {show(response_id)} not found: this server keeps no responses "
                       "(there is no response store)", 404, "response_id")


def response_head(response_id: str, model: str, got: Dict[str, Any]) -> Dict[str, Any]:
    """The response object, in progress: what every event's ``response`` starts from."""
    effort = reasoning_effort(got)
    return {"id": response_id, "object": "response", "created_at": int(time.time()), "model": model,
            "status": "in_progress", "output": [], "usage": None, "error": None, "incomplete_details": None,
            "instructions": got.get("instructions"), "max_output_tokens": got.get("max_output_tokens"),
            "previous_response_id": None, "parallel_tool_calls": fields.value(got, fields.RESP, "parallel_tool_calls"),
            "tool_choice": got.get("tool_choice", "auto"), "tools": got.get("tools", []),
            "reasoning": {"effort": effort, "summary": None}, "store": fields.value(got, fields.RESP, "store"),
            "temperature": got.get("temperature"), "top_p": got.get("top_p"),
            "text": got.get("text") or {"format": {"type": "text"}},
            "truncation": "disabled", "user": got.get("user"), "metadata": got.get("metadata") or {},
            "background": False}


def finished(head: Dict[str, Any], items: List[Dict[str, Any]], st: Any) -> Dict[str, Any]:
    """The whole response, from its output items and the request's final state."""
    out = dict(head, output=items, status=status_of(st), usage=usage(st))
    if out["status"] == "incomplete":
        out["incomplete_details"] = {"reason": "max_output_tokens"}
    return out


class EventWriter:
    """One response's stream of typed events, numbered; at most one item open at a time."""

    def __init__(self, head: Dict[str, Any], parser: Any):
        self.head, self.parser = head, parser
        self.seq = 0
        self.items: List[Dict[str, Any]] = []  # the closed items, in order
        self.open: Optional[Dict[str, Any]] = None  # kind, id, text (and call_id, name), output_index, key

    def event(self, kind: str, **body: Any) -> Dict[str, Any]:
        out = {"type": kind, "sequence_number": self.seq, **body}
        self.seq += 1
        return out

    def events(self, states: Iterator[Any]) -> Iterator[Dict[str, Any]]:
        yield self.event("response.created", response=self.head)
        yield self.event("response.in_progress", response=self.head)
        sent = 0
        for st in states:
            if st is NOT_YET:  # the event loop's: resumed when the mailbox fills
                yield st
                continue
            err = st.error()
            if err is not None:
                failed = dict(self.head, status="failed", output=self.items,
                              error={"code": "server_error", "message": err.message})
                yield self.event("response.failed", response=failed)
                return
            finish, _ = openai_finish(st)  # first: the text is complete once the finish is in
            text = st.text
            deltas = self.parser.feed(text[sent:])
            sent = len(text)
            if finish is not None:
                deltas += self.parser.flush()
            for delta in deltas:
                yield from self.delta(delta)
            if finish is not None:
                yield from self.close()
                done = finished(self.head, self.items, st)
                yield self.event(f"response.{done['status']}", response=done)
                return

    def delta(self, delta: Dict[str, Any]) -> Iterator[Dict[str, Any]]:
        if delta.get("reasoning_content"):
            yield from self.text_delta("reasoning", delta["reasoning_content"])
        if delta.get("content"):
            yield from self.text_delta("message", delta["content"])
        for call in delta.get("tool_calls") or ():
            yield from self.call_delta(call)

    def text_delta(self, kind: str, piece: str) -> Iterator[Dict[str, Any]]:
        if self.open is None or self.open["kind"] != kind:
            yield from self.close()
            yield from self.start(kind, new_id("rs" if kind == "reasoning" else "msg"))
        self.open["text"] += piece
        name = "response.reasoning_text.delta" if kind == "reasoning" else "response.output_text.delta"
        extra = {} if kind == "reasoning" else {"logprobs": []}
        yield self.event(name, item_id=self.open["id"], output_index=self.open["index"], content_index=0,
                         delta=piece, **extra)

    def call_delta(self, call: Dict[str, Any]) -> Iterator[Dict[str, Any]]:
        key = ("call", call.get("index"))
        if self.open is None or self.open.get("key") != key:
            yield from self.close()
            fn = call.get("function") or {}
            yield from self.start("function_call", new_id("fc"), key=key, call_id=call.get("id"), name=fn.get("name"))
        piece = (call.get("function") or {}).get("arguments") or ""
        if piece:
            self.open["text"] += piece
            yield self.event("response.function_call_arguments.delta", item_id=self.open["id"],
                             output_index=self.open["index"], delta=piece)

    def start(self, kind: str, item_id: str, **more: Any) -> Iterator[Dict[str, Any]]:
        self.open = {"kind": kind, "id": item_id, "text": "", "index": len(self.items), **more}
        yield self.event("response.output_item.added", output_index=self.open["index"],
                         item=self.item("in_progress"))
        if kind != "function_call":
            part = text_part("") if kind == "message" else {"type": "reasoning_text", "text": ""}
            yield self.event("response.content_part.added", item_id=item_id, output_index=self.open["index"],
                             content_index=0, part=part)

    def item(self, status: str) -> Dict[str, Any]:
        o = self.open
        assert o is not None
        if o["kind"] == "reasoning":
            return reasoning_item(o["id"], o["text"], status)
        if o["kind"] == "message":
            return message_item(o["id"], o["text"], status)
        return call_item(o["id"], o["call_id"], o["name"], o["text"], status)

    def close(self) -> Iterator[Dict[str, Any]]:
        o = self.open
        if o is None:
            return
        where = {"item_id": o["id"], "output_index": o["index"]}
        if o["kind"] == "function_call":
            yield self.event("response.function_call_arguments.done", **where, name=o["name"], arguments=o["text"])
        elif o["kind"] == "message":
            yield self.event("response.output_text.done", **where, content_index=0, text=o["text"], logprobs=[])
            yield self.event("response.content_part.done", **where, content_index=0, part=text_part(o["text"]))
        else:
            yield self.event("response.reasoning_text.done", **where, content_index=0, text=o["text"])
            yield self.event("response.content_part.done", **where, content_index=0,
                             part={"type": "reasoning_text", "text": o["text"]})
        item = self.item("completed")
        yield self.event("response.output_item.done", output_index=o["index"], item=item)
        self.items.append(item)
        self.open = None
