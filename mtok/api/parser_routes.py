"""SGLang's parser helper routes, ``POST /parse_function_call`` and
``POST /separate_reasoning``: the tool-call and reasoning parsers of
``mtok.parsers`` on a text the client sends, in SGLang's request and response
shapes.  They run in the worker, like tokenization; nothing reaches the engine.

No template ran before ``/separate_reasoning``'s text, so a hybrid-thinking
format (``qwen3``) reads reasoning only from an explicit start marker unless
the request's ``chat_template_kwargs`` turn thinking on, as SGLang's route
builds its parser without a chat request's toggles.

Where SGLang requires a parser name, mtok falls back to the one the server was
started with (``--tool-call-parser`` / ``--reasoning-parser`` for the request's
``model``), and answers 400 when there is none.
"""

from __future__ import annotations

from typing import Any, Dict, List

from .server import Request, route
from ..parsers import REASONING_FORMATS, TOOL_PARSERS, make_reasoning_parser, make_tool_parser
from ..validate import bad, check_unknown, get_bool, get_str, require_object


def check_tools(tools: Any, param: str = "tools") -> List[Dict[str, Any]]:
    """OpenAI's ``tools``: a list of ``{"type": "function", "function": {"name", ...}}``."""
    if tools is None:
        return []
    if not isinstance(tools, list):
        raise bad("'%s' must be an array of tools" % param, param)
    for i, tool in enumerate(tools):
        fn = tool.get("function") if isinstance(tool, dict) else None
        if not isinstance(fn, dict) or not isinstance(fn.get("name"), str) or not fn["name"]:
            raise bad("'%s[%d]' must be {\"type\": \"function\", \"function\": {\"name\": ...}}" % (param, i),
                      "%s[%d]" % (param, i))
    return tools


def pick_parser(body: Dict[str, Any], key: str, configured: Dict[str, str], model: str, known) -> str:
    name = get_str(body, key) or configured.get(model)
    if name is None:
        raise bad("'%s' is required: the server has no --%s for model %r"
                  % (key, key.replace("_", "-"), model), key)
    if name not in known:
        raise bad("unknown %s %r; mtok has %s" % (key, name, ", ".join(sorted(known))), key)
    return name


class ParserRoutes:
    """Mixed into ``Api``: needs ``self.tm`` (its ``model()``) and ``self.args``."""

    def configured_parsers(self) -> Dict[str, Dict[str, str]]:
        cached = getattr(self, "_configured_parsers", None)
        if cached is None:
            cached = self._configured_parsers = self.args.parsers()
        return cached

    @route("POST", "/parse_function_call", inline=True, offload=True)
    def parse_function_call(self, req: Request) -> Any:
        body = require_object(req.json())
        check_unknown(body, ("text", "tools", "tool_call_parser", "model"))
        text = get_str(body, "text")
        if text is None:
            raise bad("'text' is required", "text")
        tools = check_tools(body.get("tools"))
        model = self.tm.model(get_str(body, "model")).name
        name = pick_parser(body, "tool_call_parser", self.configured_parsers()["tool"], model, TOOL_PARSERS)
        parser = make_tool_parser(name, tools)
        content, calls = parser.parse(text)
        position = {t["function"]["name"]: i for i, t in reversed(list(enumerate(tools)))}
        return {"normal_text": content, "calls": [
            {"tool_index": i if parser.index_by_call else position.get(c.name, -1),
             "name": c.name, "parameters": c.arguments} for i, c in enumerate(calls)]}

    @route("POST", "/separate_reasoning", inline=True, offload=True)
    def separate_reasoning(self, req: Request) -> Any:
        body = require_object(req.json())
        check_unknown(body, ("text", "reasoning_parser", "return_blocks", "chat_template_kwargs", "model"))
        text = get_str(body, "text")
        if text is None:
            raise bad("'text' is required", "text")
        kwargs = body.get("chat_template_kwargs") or {}
        if not isinstance(kwargs, dict):
            raise bad("'chat_template_kwargs' must be an object", "chat_template_kwargs")
        model = self.tm.model(get_str(body, "model")).name
        name = pick_parser(body, "reasoning_parser", self.configured_parsers()["reasoning"], model,
                           REASONING_FORMATS)
        reasoning, content = make_reasoning_parser(name, kwargs, template_opens=False).parse(text)
        out = {"reasoning_text": reasoning, "text": content}
        if get_bool(body, "return_blocks", False):
            out["reasoning_blocks"] = [reasoning] if reasoning else []
            out["text_blocks"] = [content]
        return out
