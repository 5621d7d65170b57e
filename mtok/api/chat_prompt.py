"""From OpenAI chat messages to the prompt a model's chat template renders.

Three steps, each a function:

* :func:`parse_messages` checks OpenAI's message shapes (roles ``system``,
  ``developer``, ``user``, ``assistant``, ``tool``; ``content`` a string, null,
  or a list of text parts).  Image, audio, video and file parts get a 400: no
  mtok engine takes them.
* :func:`template_messages` turns them into what templates expect, as SGLang
  does: text parts joined into one string unless the template loops over
  content; a null or absent ``content`` made ``""`` (an assistant turn that only
  calls tools: Qwen 3's template needs the key, Llama 3's would print "None");
  a tool call's ``arguments`` (a JSON string on the wire) parsed into the object
  templates ``tojson``; and, as transformers does, other keys whose value is
  null dropped and reasoning copied under its three names.
* :func:`render_prompt` builds the context transformers' ``apply_chat_template``
  gives (``messages``, ``tools``, ``documents``, ``add_generation_prompt``, the
  special tokens, every ``chat_template_kwargs`` key; ``raise_exception`` and
  ``strftime_now`` come with the template's environment) and renders it,
  cutting the end of the last turn for ``continue_final_message``.

Every failure is an APIError (400) naming the field at fault.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Dict, List, Optional

from ..chat import TemplateError
from ..chat_templates import Compiled, ModelChat
from .. import fields
from ..validate import _json_type, as_str, bad

ROLES = ("system", "developer", "user", "assistant", "tool")
TEXT_PART_TYPES = ("text", "input_text")
MEDIA_PART_TYPES = ("image_url", "input_image", "image", "input_audio", "audio_url", "video_url", "file")
REASONING_FIELDS = ("reasoning_content", "thinking", "reasoning")
# Keys of the template context that requests set through their own fields.
RESERVED_CONTEXT = ("messages", "tools", "documents", "add_generation_prompt")
# Appended to the last message for continue_final_message, then found and cut (transformers' way).
CONTINUE_TAG = "CONTINUE_FINAL_MESSAGE_TAG "


@dataclass
class ChatInput:
    """What a request gives the template (shared by chat completions and /tokenize)."""

    messages: List[Dict[str, Any]]
    tools: Optional[List[Any]] = None
    documents: Optional[List[Any]] = None
    add_generation_prompt: bool = True
    continue_final_message: bool = False
    kwargs: Optional[Dict[str, Any]] = None


def _check_part(part: Any, where: str) -> str:
    if not isinstance(part, dict) or not isinstance(part.get("type"), str):
        raise bad(f"'{where}' must be an object with a 'type', not {_json_type(part)}", where)
    kind = part["type"]
    if kind in MEDIA_PART_TYPES:
        raise bad(f"'{where}' is of type {kind!r}: this server's engines take text only", where)
    if kind not in TEXT_PART_TYPES:
        raise bad(f"'{where}' has unknown type {kind!r}; content parts must be of type 'text'", where)
    return as_str(part.get("text"), f"{where}.text")


def _check_tool_calls(calls: Any, where: str) -> None:
    if not isinstance(calls, list) or not all(isinstance(c, dict) for c in calls):
        raise bad(f"'{where}' must be an array of objects", where)
    for j, call in enumerate(calls):
        fn = call.get("function")
        if not isinstance(fn, dict) or not isinstance(fn.get("name"), str):
            raise bad(f"'{where}[{j}].function' must be an object with a 'name'", f"{where}[{j}].function")
        args = fn.get("arguments")
        if args is not None and not isinstance(args, (str, dict)):
            raise bad(f"'{where}[{j}].function.arguments' must be a JSON string", f"{where}[{j}].function.arguments")


def parse_messages(value: Any) -> List[Dict[str, Any]]:
    """Check ``messages``; the messages come back as given."""
    if not isinstance(value, list) or not value:
        raise bad("'messages' must be a non-empty array of messages"
                  if isinstance(value, list) or value is None else
                  f"'messages' must be an array of messages, not {_json_type(value)}", "messages")
    for i, msg in enumerate(value):
        where = f"messages[{i}]"
        if not isinstance(msg, dict):
            raise bad(f"'{where}' must be an object, not {_json_type(msg)}", where)
        role = msg.get("role")
        if role not in ROLES:
            raise bad(f"'{where}.role' must be one of {', '.join(map(repr, ROLES))}; got "
                      f"{role!r}" if isinstance(role, str) else f"'{where}.role' is required (a string)",
                      f"{where}.role")
        content = msg.get("content")
        if isinstance(content, list):
            for j, part in enumerate(content):
                _check_part(part, f"{where}.content[{j}]")
        elif content is not None and not isinstance(content, str):
            raise bad(f"'{where}.content' must be a string, null or an array of text parts, "
                      f"not {_json_type(content)}", f"{where}.content")
        if msg.get("tool_calls") is not None:
            _check_tool_calls(msg["tool_calls"], f"{where}.tool_calls")
    return value


def _content_for(content: Any, fmt: str, role: str) -> Any:
    """A list of text parts as the template wants it: one string (parts joined by a
    space, as SGLang does), or the parts themselves; a tool's text is always a string."""
    if not isinstance(content, list):
        return content
    texts = [p["text"] for p in content]
    if fmt == "string" or role == "tool":
        return " ".join(texts)
    return [{"type": "text", "text": t} for t in texts]


def _arguments_object(args: Any, where: str) -> Any:
    if not isinstance(args, str):
        return args
    try:
        value = json.loads(args)
    except (ValueError, RecursionError):
        raise bad(f"'{where}' must be a JSON object in a string; it is not valid JSON", where) from None
    if not isinstance(value, dict):
        raise bad(f"'{where}' must be a JSON object in a string, not {_json_type(value)}", where)
    return value


def _call_for_template(call: Dict[str, Any], where: str) -> Dict[str, Any]:
    fn = call["function"]
    if "arguments" not in fn:
        return call
    return dict(call, function=dict(fn, arguments=_arguments_object(fn["arguments"], f"{where}.function.arguments")))


def template_messages(messages: List[Dict[str, Any]], fmt: str) -> List[Dict[str, Any]]:
    """Fresh copies of the messages, in the shape chat templates read."""
    out = []
    for i, msg in enumerate(messages):
        m = {k: v for k, v in msg.items() if v is not None}
        m["content"] = _content_for(m.get("content", ""), fmt, m["role"])
        if "tool_calls" in m:
            m["tool_calls"] = [_call_for_template(c, f"messages[{i}].tool_calls[{j}]")
                               for j, c in enumerate(m["tool_calls"])]
        reasoning = next((m[k] for k in REASONING_FIELDS if k in m), None)
        if reasoning is not None:
            m = {"thinking": reasoning, **m, "reasoning_content": reasoning}
        out.append(m)
    return out


def template_tools(tools: Optional[List[Any]], choice: Any) -> Optional[List[Any]]:
    """The tools the template sees, as SGLang gives them: none for an empty list or
    ``tool_choice: "none"``, only the named one for ``{"function": {"name": ...}}``."""
    if not tools or choice == "none":
        return None
    if isinstance(choice, dict):
        name = choice["function"]["name"]
        named = [t for t in tools if isinstance(t.get("function"), dict) and t["function"].get("name") == name]
        if not named:
            raise bad(f"'tool_choice' names the function {name!r}, which is not in 'tools'", "tool_choice")
        return named
    return tools


def parse_chat_input(body: Dict[str, Any]) -> ChatInput:
    """The template fields of a chat request (or of ``/tokenize`` with messages)."""
    messages = parse_messages(body.get("messages"))
    tools, documents, kwargs = body.get("tools"), body.get("documents"), body.get("chat_template_kwargs")
    for name, value in (("tools", tools), ("documents", documents)):
        if value is not None and (not isinstance(value, list) or not all(isinstance(v, dict) for v in value)):
            raise bad(f"'{name}' must be an array of objects", name)
    if kwargs is not None:
        if not isinstance(kwargs, dict):
            raise bad(f"'chat_template_kwargs' must be an object, not {_json_type(kwargs)}", "chat_template_kwargs")
        clash = [k for k in RESERVED_CONTEXT if k in kwargs]
        if clash:
            raise bad(f"'chat_template_kwargs' must not set {clash[0]!r}; it is a request field of its own",
                      "chat_template_kwargs")
    cont = fields.from_body(body, fields.CHAT, "continue_final_message")
    add = fields.from_body(body, fields.CHAT, "add_generation_prompt")
    if add is None:
        add = not cont
    if cont and add:
        raise bad("'continue_final_message' and 'add_generation_prompt' cannot both be true", "continue_final_message")
    return ChatInput(messages, template_tools(tools, body.get("tool_choice")), documents, add, cont, kwargs)


def _mark_final(messages: List[Dict[str, Any]]) -> str:
    """Append the continue tag to the last message's text; return that text."""
    last = messages[-1]
    content = last.get("content")
    if isinstance(content, list):
        texts = [p for p in content if "text" in p]
        if not texts:
            raise bad("'continue_final_message' needs text in the last message", "continue_final_message")
        part = texts[-1]
        final, part["text"] = part["text"], part["text"] + CONTINUE_TAG
        return final
    if not isinstance(content, str):
        raise bad("'continue_final_message' needs the last message to have content", "continue_final_message")
    last["content"] = content + CONTINUE_TAG
    return content


def _cut_at_final(rendered: str, final: str) -> str:
    """The rendering up to where the last message's content ends."""
    tag = CONTINUE_TAG.strip()
    if final.strip() not in rendered or tag not in rendered:
        raise bad("'continue_final_message': the chat template does not render the last message's content "
                  "whole, so there is no place to continue it from", "continue_final_message")
    at = rendered.rindex(tag)
    if rendered[at:at + len(CONTINUE_TAG)] == CONTINUE_TAG:
        return rendered[:at]
    return rendered[:at].rstrip()  # the template trimmed the message: cut its trailing space too


def render_prompt(chat: ModelChat, inp: ChatInput) -> str:
    """The prompt text, as ``apply_chat_template(..., tokenize=False)`` gives it."""
    compiled: Compiled = chat.pick(inp.tools is not None)
    messages = template_messages(inp.messages, compiled.content_format)
    final = _mark_final(messages) if inp.continue_final_message else None
    context: Dict[str, Any] = dict(chat.special_tokens)
    context.update(inp.kwargs or {})
    context.update(messages=messages, tools=inp.tools, documents=inp.documents,
                   add_generation_prompt=inp.add_generation_prompt)
    try:
        rendered = compiled.template.render_dict(context)
    except TemplateError as e:
        raise bad(f"the chat template failed: {e}", "messages") from None
    return rendered if final is None else _cut_at_final(rendered, final)
