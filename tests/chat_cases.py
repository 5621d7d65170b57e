"""Shared inputs of the chat template tests: the templates and the contexts they render.

Templates: the four real ones in ../shared/chat_templates, the ones in
tests/chat_templates (from npm model packages, see its README), and the family-style
ones in tests/chat_families.py.  Contexts: what transformers' apply_chat_template
passes, over the shapes that matter (system or not, multi-turn, tool calls and tool
results, content as a list of parts, thinking on and off, add_generation_prompt both
ways, tools or none).
"""

from __future__ import annotations

import copy
import itertools
import json
import os
from typing import Any, Dict, List, Tuple

from chat_families import FAMILIES
from support import ROOT

SHARED_TEMPLATES = os.path.join(os.path.dirname(ROOT), "shared", "chat_templates")
OWN_TEMPLATES = os.path.join(ROOT, "tests", "chat_templates")


def _load_dir(directory: str) -> Dict[str, Tuple[str, Dict[str, Any]]]:
    out = {}
    if not os.path.isdir(directory):
        return out
    for name in sorted(os.listdir(directory)):
        if name.endswith(".json"):
            with open(os.path.join(directory, name), encoding="utf-8") as f:
                data = json.load(f)
            special = {k: v for k, v in data.items() if k.endswith("_token") and isinstance(v, str)}
            out[name[:-5]] = (data["chat_template"], special)
    return out


def real_templates() -> Dict[str, Tuple[str, Dict[str, Any]]]:
    """name -> (template source, special tokens) for every template file we have."""
    out = {f"shared/{k}": v for k, v in _load_dir(SHARED_TEMPLATES).items()}
    out.update({f"own/{k}": v for k, v in _load_dir(OWN_TEMPLATES).items()})
    return out


def all_templates() -> Dict[str, Tuple[str, Dict[str, Any]]]:
    out = real_templates()
    out.update({f"family/{k}": v for k, v in FAMILIES.items()})
    return out


TOOLS = [
    {"type": "function", "function": {
        "name": "get_weather", "description": "Get the weather in a city.",
        "parameters": {"type": "object", "properties": {
            "city": {"type": "string", "description": "The city, e.g. Paris"},
            "unit": {"type": ["string", "null"], "enum": ["c", "f"]},
            "days": {"type": "array", "items": {"type": "integer"}},
            "opts": {"type": "object", "additionalProperties": {"type": "boolean"}}},
            "required": ["city"]}}},
    {"type": "function", "function": {
        "name": "search", "description": "Search the web — «quoted» & <tagged>.",
        "parameters": {"type": "object", "properties": {"q": {"type": "string", "description": "query"}}}}},
]

SYSTEM = {"role": "system", "content": "You are a helpful assistant.\n"}
USER = {"role": "user", "content": "What's the weather in Paris? {{ not a tag }}"}
ASSISTANT = {"role": "assistant", "content": "  It is sunny, 21°C.  "}
USER2 = {"role": "user", "content": "And tomorrow? 👋"}
TOOL_CALL = {"role": "assistant", "content": None, "tool_calls": [
    {"id": "call12345", "type": "function", "function": {"name": "get_weather", "arguments": {"city": "Paris", "days": [1]}}}]}
TOOL_CALL_STR = {"role": "assistant", "content": "Let me check.", "tool_calls": [
    {"id": "call67890", "type": "function", "function": {"name": "search", "arguments": "{\"q\": \"paris\"}"}}]}
TOOL_RESULT = {"role": "tool", "tool_call_id": "call12345", "name": "get_weather", "content": "{\"temp\": 21}"}
TOOL_RESULT2 = {"role": "tool", "tool_call_id": "call67890", "content": "Paris is in France."}
PARTS = {"role": "user", "content": [{"type": "text", "text": "Describe this image:"}, {"type": "image"},
                                     {"type": "text", "text": " briefly."}]}
THINKING = {"role": "assistant", "content": "<think>\nLet me think.\n</think>\n\nThe answer is 42."}
REASONING = {"role": "assistant", "content": "The answer is 42.", "reasoning_content": "Six times seven."}

CONVERSATIONS: Dict[str, List[Dict[str, Any]]] = {
    "single": [USER],
    "system": [SYSTEM, USER],
    "multi_turn": [USER, ASSISTANT, USER2],
    "system_multi_turn": [SYSTEM, USER, ASSISTANT, USER2],
    "tool_call": [USER, TOOL_CALL, TOOL_RESULT],
    "tool_calls_then_answer": [SYSTEM, USER, TOOL_CALL_STR, TOOL_RESULT2, ASSISTANT, USER2],
    "two_tool_results": [USER, TOOL_CALL, TOOL_RESULT, TOOL_RESULT2],
    "parts": [PARTS],
    "thinking": [USER, THINKING, USER2],
    "reasoning_field": [SYSTEM, USER, REASONING],
    "thinking_last": [USER, THINKING],
    "two_users": [USER, USER2],
    "assistant_first": [ASSISTANT, USER],
    "empty": [],
}

OPTIONS: List[Dict[str, Any]] = [
    {"add_generation_prompt": True},
    {"add_generation_prompt": False},
    {"add_generation_prompt": True, "tools": TOOLS},
    {"add_generation_prompt": True, "enable_thinking": False},
    {"add_generation_prompt": True, "enable_thinking": True, "tools": TOOLS},
    {},
]


def contexts() -> List[Tuple[str, Dict[str, Any]]]:
    """(id, context) pairs: every conversation under every option set."""
    out = []
    for (cname, messages), opts in itertools.product(CONVERSATIONS.items(), OPTIONS):
        ctx = {"messages": copy.deepcopy(messages), **copy.deepcopy(opts)}
        label = "-".join(f"{k}={len(v) if k == 'tools' else v}" for k, v in opts.items()) or "none"
        out.append((f"{cname}-{label}", ctx))
    return out


def outcome(template: Any, ctx: Dict[str, Any]) -> Any:
    """The rendered string, or ("error",) where rendering raised TemplateError."""
    from mtok.chat import TemplateError

    try:
        return template.render(**copy.deepcopy(ctx))
    except TemplateError:
        return ("error",)
