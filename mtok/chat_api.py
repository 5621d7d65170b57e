"""``POST /v1/chat/completions``, in OpenAI's shapes, and ``/tokenize`` of messages.

A chat request becomes the same :class:`GenerateReqInput` as ``/v1/completions``
(its sampling fields go through :func:`~mtok.openai_api.parse_openai_sampling`),
with token ids instead of text: the prompt is the model's chat template
rendered (:mod:`mtok.chat_prompt`) and tokenized without adding special tokens
again, since templates write their own ``bos_token`` (as SGLang and vLLM do).

What the model generates reaches the client through an :class:`OutputParser`,
chosen per request by :func:`make_output_parser`: the plain one passes text
through as ``content``; a reasoning or tool-call parser can replace it there
and turn text deltas into ``reasoning_content`` / ``tool_calls`` deltas.
"""

from __future__ import annotations

import time
import uuid
from typing import TYPE_CHECKING, Any, Dict, Iterator, List, Optional

from .chat_prompt import ChatInput, parse_chat_input, render_prompt
from .http_server import EventStream, Request, route
from .io_struct import GenerateReqInput
from .openai_api import SAMPLING_FIELDS, openai_finish, parse_openai_sampling
from .validate import bad, check_unknown, get_bool, get_int, get_str, require_object

if TYPE_CHECKING:
    from .tokenizer_manager import ModelEntry, ReqState

# What the template sees, besides messages.
TEMPLATE_FIELDS = ("messages", "tools", "documents", "chat_template_kwargs", "add_generation_prompt",
                   "continue_final_message")
CHAT_FIELDS = SAMPLING_FIELDS | set(TEMPLATE_FIELDS) | {
    "max_tokens", "max_completion_tokens", "logprobs", "top_logprobs", "tool_choice", "parallel_tool_calls",
    "response_format", "reasoning_effort",
}
TOKENIZE_CHAT_FIELDS = TEMPLATE_FIELDS + ("model", "add_special_tokens")
TOOL_CHOICES = ("none", "auto", "required")


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
    return OutputParser()


def _check_chat_only(body: Dict[str, Any]) -> None:
    """Fields of chat requests that mtok checks but has no use for beyond the template."""
    if get_bool(body, "logprobs", False) or get_int(body, "top_logprobs", 0, 0, 20):
        raise bad("'logprobs' is not supported", "logprobs")
    fmt = body.get("response_format")
    if fmt is not None and (not isinstance(fmt, dict) or fmt.get("type") != "text"):
        raise bad("'response_format' other than {\"type\": \"text\"} is not supported", "response_format")
    choice = body.get("tool_choice")
    if choice is not None and choice not in TOOL_CHOICES and not (
            isinstance(choice, dict) and isinstance(choice.get("function"), dict)
            and isinstance(choice["function"].get("name"), str)):
        raise bad(f"'tool_choice' must be one of {', '.join(map(repr, TOOL_CHOICES))} or "
                  "{\"type\": \"function\", \"function\": {\"name\": ...}}", "tool_choice")
    get_bool(body, "parallel_tool_calls", True)
    get_str(body, "reasoning_effort")


def template_extras(body: Dict[str, Any]) -> Dict[str, Any]:
    """Request fields a template may read besides transformers' context (as SGLang passes them)."""
    return {k: body[k] for k in ("tool_choice", "reasoning_effort") if body.get(k) is not None}


def chat_max_tokens(body: Dict[str, Any]) -> Optional[int]:
    """``max_completion_tokens`` (OpenAI's current name), else ``max_tokens``; None: up to the context."""
    n = get_int(body, "max_completion_tokens", None, 1)
    return n if n is not None else get_int(body, "max_tokens", None, 1)


def prompt_ids(model: "ModelEntry", inp: ChatInput, add_special_tokens: bool = False) -> List[int]:
    return model.tokenizer.encode(render_prompt(model.chat, inp), add_special_tokens)


class ChatRoutes:
    """Mixed into :class:`mtok.api.Api`, which provides tm, args, collect, first_then_rest, usage."""

    @route("POST", "/v1/chat/completions")
    def chat_completions(self, req: Request) -> Any:
        body = require_object(req.json())
        check_unknown(body, CHAT_FIELDS)
        if "messages" not in body:
            raise bad("'messages' is required", "messages")
        _check_chat_only(body)
        max_tokens = chat_max_tokens(body)
        sp, include_usage = parse_openai_sampling(body, max_tokens or 1)
        model = self.tm.model(get_str(body, "model"))
        inp = parse_chat_input(body)
        inp.kwargs = dict(template_extras(body), **(inp.kwargs or {}))
        ids = prompt_ids(model, inp)
        if not ids:
            raise bad("the chat template rendered an empty prompt for these messages", "messages")
        if max_tokens is None:
            sp.max_new_tokens = max(1, model.context_length - len(ids))
        obj = GenerateReqInput(input_ids=ids, sampling_params=sp, stream=get_bool(body, "stream", False),
                               model=model.name)
        parser = make_output_parser(body, model, self.args)
        states = self.tm.generate_request(obj, req.watch)
        head = {"id": f"chatcmpl-{uuid.uuid4().hex}", "object": "chat.completion", "created": int(time.time()),
                "model": model.name}
        if obj.stream:
            head["object"] = "chat.completion.chunk"
            return EventStream(self._chat_chunks(self.first_then_rest(states), head, parser, include_usage))
        st = self.collect(states, 1)[0]
        finish, matched = openai_finish(st)
        choice = {"index": 0, "message": {"role": "assistant", **parser.message(st.text)}, "logprobs": None,
                  "finish_reason": parser.finish_reason(finish), "stop_reason": matched}
        return dict(head, choices=[choice], usage=self.usage([st]))

    def tokenize_chat(self, body: Dict[str, Any]) -> Dict[str, Any]:
        """``/tokenize`` with ``messages`` (vLLM's TokenizeChatRequest): the rendered prompt's tokens."""
        check_unknown(body, TOKENIZE_CHAT_FIELDS)
        model = self.tm.model(get_str(body, "model"))
        ids = prompt_ids(model, parse_chat_input(body), get_bool(body, "add_special_tokens", False))
        return {"tokens": ids, "count": len(ids), "max_model_len": model.context_length}

    def _chat_chunks(self, states: Iterator["ReqState"], head: Dict[str, Any], parser: OutputParser,
                     include_usage: bool) -> Iterator[Any]:
        """Role first, then content deltas, then the finish, then usage, then [DONE] (OpenAI's order)."""

        def chunk(delta: Dict[str, Any], finish: Optional[str] = None, matched: Any = None) -> Dict[str, Any]:
            out = dict(head, choices=[{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish,
                                       "stop_reason": matched}])
            if include_usage:
                out["usage"] = None
            return out

        yield chunk({"role": "assistant", "content": ""})
        sent, final = 0, None
        for st in states:
            if final is not None:
                continue  # the state seen finished early is handed over once more; its finish is sent
            err = st.error()
            if err is not None:
                yield err.body()
                break
            # The receiver thread grows st.text meanwhile: read the finish first (its text
            # is complete by then), then one snapshot of the text for both slice and mark.
            finish, matched = openai_finish(st)
            text = st.text
            for delta in parser.feed(text[sent:]):
                yield chunk(delta)
            sent = len(text)
            if finish is not None:
                for delta in parser.flush():
                    yield chunk(delta)
                yield chunk({}, parser.finish_reason(finish), matched)
                final = st
        if include_usage and final is not None:
            yield dict(head, choices=[], usage=self.usage([final]))
        yield "[DONE]"

