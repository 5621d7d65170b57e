"""A forced tool call: ``tool_choice: "required"`` or a named function.

The model cannot be trusted to call a tool because it was asked to, so SGLang
(``srt/function_call/utils.py`` ``get_json_schema_constraint``, used by
``serving_chat.py`` when no tool-call format's own constraint applies) turns
the choice into an output constraint: a JSON schema for an array of at least
one ``{"name", "parameters"}`` object -- any declared function for
``"required"``, the named one only otherwise -- with ``maxItems: 1`` when
``parallel_tool_calls`` is false and the tools' ``$defs`` merged at the top
(two tools defining one name differently is an error, as in SGLang).  An
engine that constrains its output then emits exactly that array, and it is
read here as JSON (SGLang's ``_process_tool_calls`` ``is_required`` branch and
its streaming ``JsonArrayParser``), not through the model's own tool-call
format: the constraint replaced that format.

:func:`tool_call_schema` builds the schema; :class:`ForcedCalls` is the
parser of what comes back: an array (or one object) of calls becomes the
calls, with ``parameters`` as the arguments; anything else -- an output cut
short by ``max_tokens`` -- stays content, as SGLang leaves it.  Streamed, the
calls are sent when the output ends: a truncated array is content, and mtok
never takes back what it streamed.

Stdlib only; nothing here knows about HTTP or the server.
"""

import json

from mtok.parsers.base import UNREADABLE, Call, ToolParser, ToolStream, dump_args


def forced_name(choice):
    """The function a named ``tool_choice`` names; None for ``"required"``."""
    return choice["function"]["name"] if isinstance(choice, dict) else None


def _function(tool):
    return tool.get("function") or {}


def _call_schema(tool):
    """One call of ``tool``: its name, and its parameters' schema (any object when it has none)."""
    fn = _function(tool)
    return {"properties": {"name": {"type": "string", "enum": [fn.get("name")]},
                           "parameters": fn.get("parameters") or {"type": "object", "properties": {}}},
            "required": ["name", "parameters"]}


def merged_defs(tools):
    """Every tool's ``parameters.$defs`` in one table; ValueError where two disagree."""
    out = {}
    for tool in tools:
        params = _function(tool).get("parameters")
        defs = params.get("$defs") if isinstance(params, dict) else None
        for name, schema in (defs if isinstance(defs, dict) else {}).items():
            if name in out and out[name] != schema:
                raise ValueError("Tool definition '%s' has multiple schemas, which is not supported." % name)
            out[name] = schema
    return out


def tool_call_schema(tools, choice, parallel_tool_calls=True):
    """The JSON schema an output must match to be the call(s) ``choice`` forces.

    ``tools`` is the request's OpenAI ``tools`` list; ``choice`` is ``"required"``
    or ``{"type": "function", "function": {"name": ...}}``.  None when the named
    function is not among the tools (the request is refused before this).
    """
    name = forced_name(choice)
    if name is not None:
        tool = next((t for t in tools if _function(t).get("name") == name), None)
        if tool is None:
            return None
        schema = {"type": "array", "minItems": 1, "items": _call_schema(tool)}
    else:
        schema = {"type": "array", "minItems": 1,
                  "items": {"type": "object", "anyOf": [_call_schema(t) for t in tools]}}
    if not parallel_tool_calls:
        schema["maxItems"] = 1
    defs = merged_defs(tools) if name is None else {}
    if defs:
        schema["$defs"] = defs
    return schema


class ForcedCalls(ToolParser):
    """The constrained output of a forced tool choice, read as JSON."""

    name = "forced"

    def parse(self, text):
        calls = read_calls(text)
        return ("", calls) if calls is not None else (text, [])

    def stream(self):
        return ForcedStream(self)


def read_calls(text):
    """The calls of ``[{"name", "parameters"}, ...]`` (or one such object); None if ``text`` is not that."""
    try:
        value = json.loads(text)
    except UNREADABLE:
        return None
    if isinstance(value, dict):
        value = [value]
    if not isinstance(value, list) or not all(isinstance(c, dict) and "name" in c for c in value):
        return None
    if not all(isinstance(c["name"], str) for c in value):
        return None
    return [Call(c["name"], dump_args(c.get("parameters", {}))) for c in value]


class ForcedStream(ToolStream):
    """Nothing until the output ends (the array is only known to be whole then); then the one-shot result."""

    def step(self, text):
        return []

    def final(self, text):
        content, calls = self.parser.parse(text)
        return self.complete(content, calls)
