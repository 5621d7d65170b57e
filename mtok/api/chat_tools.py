"""A chat request's ``tools`` and ``tool_choice``, checked before anything uses them.

SGLang judges them first, in this order (``serving_chat._validate_request``),
before the template renders and before a forced choice becomes a constraint:
a forced choice with no tools; a named function that is not among them
("Tool 'X' not found in tools list."); each tool's ``parameters``, which must
be a JSON Schema (SGLang runs ``Draft202012Validator.check_schema``); and for
``"required"``, the tools' ``$defs`` merged into one schema, where one name
defined twice differently cannot be.  So a client gets the same 400 for the
same mistake whichever engine serves it, and not a complaint about the
engine's capabilities (:mod:`mtok.api.constraints`) for a request that was
wrong anyway.

The schema check is the structure of Draft 2020-12's meta-schema (what each
keyword must hold), walked without recursion, so a deep schema costs its size
and cannot overflow the stack.  A ``type`` names one of the seven JSON
types, or a database-style name SGLang rewrites to one before it checks
(``varchar``, ``int32``, ``decimal(10,2)``, ``list[str]``): those pass as
given; any other name (``"unknown_type"``) is an invalid schema, as in SGLang.
"""

from __future__ import annotations

from typing import Any, Dict, List, Optional

from ..parsers.forced import forced_name, merged_defs
from .parser_routes import check_tools
from ..validate import bad, show

# keyword -> what it holds: a schema, a map of schemas, a non-empty list of schemas, or a plain JSON kind
_SCHEMA = ("items", "additionalProperties", "not", "if", "then", "else", "contains", "propertyNames",
           "unevaluatedItems", "unevaluatedProperties", "additionalItems")
_SCHEMA_MAP = ("properties", "patternProperties", "$defs", "definitions", "dependentSchemas")
_SCHEMA_LIST = ("allOf", "anyOf", "oneOf", "prefixItems")
_COUNTS = ("minLength", "maxLength", "minItems", "maxItems", "minProperties", "maxProperties", "minContains",
           "maxContains")
_NUMBERS = ("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum")
_STRINGS = ("$ref", "$id", "$anchor", "pattern", "format", "title", "description", "$comment")
_BOOLS = ("uniqueItems", "readOnly", "writeOnly", "deprecated")


JSON_TYPES = frozenset(("null", "boolean", "object", "array", "number", "string", "integer"))
# Database / ORM spellings, by the JSON type they stand for: whole names, and stems that
# may carry a size or parameters after them ("int64", "list[str]", "float(8)")
_DB_NAMES = frozenset("str text varchar char enum uuid date datetime time timestamp binary blob bytea bytes "
                      "varbinary bool bigint smallint tinyint double decimal real numeric arr tuple set map".split())
_DB_STEMS = ("int", "uint", "long", "short", "unsigned", "num", "float", "list", "dict")
_AFTER_STEM = frozenset("0123456789[<( \t")


def _known_type(name: str) -> bool:
    """One of the JSON types, or a name SGLang maps onto one."""
    if name in JSON_TYPES:
        return True
    base = name.split("(", 1)[0].strip().lower()
    if base in JSON_TYPES or base in _DB_NAMES:
        return True
    return any(base == stem or (base.startswith(stem) and base[len(stem):][:1] in _AFTER_STEM) for stem in _DB_STEMS)


def _is_count(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool) and v >= 0


def _is_number(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def _keyword_problem(key: str, v: Any) -> Optional[str]:
    """What is wrong with one keyword's value on its own (sub-schemas are walked by the caller)."""
    if key in _SCHEMA_MAP and not isinstance(v, dict):
        return f"{show(v)} is not of type 'object'"
    if key in _SCHEMA_LIST and not (isinstance(v, list) and v):
        return f"{show(v)} is not a non-empty array"
    if key == "type":
        names = [v] if isinstance(v, str) else v if isinstance(v, list) and v else None
        if names is None or not all(isinstance(t, str) for t in names) or len(set(names)) != len(names):
            return f"{show(v)} is not a type name or an array of distinct type names"
        unknown = next((t for t in names if not _known_type(t)), None)
        if unknown is not None:
            return f"{show(unknown)} is not one of {', '.join(map(repr, sorted(JSON_TYPES)))}"
    if key == "required" and not (isinstance(v, list) and all(isinstance(n, str) for n in v) and len(set(v)) == len(v)):
        return f"{show(v)} is not an array of distinct strings"
    if key == "enum" and not isinstance(v, list):
        return f"{show(v)} is not of type 'array'"
    checks = ((_COUNTS, _is_count, "a non-negative integer"), (_NUMBERS, _is_number, "a number"),
              (_STRINGS, lambda x: isinstance(x, str), "a string"), (_BOOLS, lambda x: isinstance(x, bool), "a boolean"))
    for keys, ok, what in checks:
        if key in keys and not ok(v):
            return f"{show(v)} is not {what}"
    if key == "multipleOf" and not (_is_number(v) and v > 0):
        return f"{show(v)} is not a number above 0"
    return None


def schema_problem(schema: Any) -> Optional[str]:
    """Why ``schema`` is not a JSON Schema (Draft 2020-12's meta-schema), or None.
    Each node keeps a link to its parent, so the path is spelled only for the answer."""
    stack: List[Any] = [(schema, None)]  # (node, (parent link, step)): the path as a linked list
    while stack:
        node, link = stack.pop()
        if isinstance(node, bool):
            continue
        if not isinstance(node, dict):
            return f"{show(node)} is not of type 'object', 'boolean' (at {_path(link)})"
        for key, v in node.items():
            problem = _keyword_problem(key, v)
            if problem is not None:
                return f"{problem} (at {_path((link, key))})"
            if key in _SCHEMA:
                stack.append((v, (link, key)))
            elif key in _SCHEMA_MAP:
                stack.extend((sub, ((link, key), name)) for name, sub in v.items())
            elif key in _SCHEMA_LIST:
                stack.extend((sub, ((link, key), i)) for i, sub in enumerate(v))
    return None


def _path(link: Any) -> str:
    """``schema['a']['b']``; a deep one by its last ten steps (a client's huge path is not echoed whole)."""
    steps = []
    while link is not None:
        link, step = link
        steps.append(f"[{show(step)}]")
    steps.reverse()
    return "schema" + ("".join(steps) if len(steps) <= 10 else "[...]" + "".join(steps[-10:]))


def check_tool_request(body: Dict[str, Any]) -> List[Dict[str, Any]]:
    """The request's tools, after SGLang's checks of them and of ``tool_choice``, in SGLang's order and words."""
    tools = check_tools(body.get("tools"))
    choice = body.get("tool_choice")
    if choice == "required" and not tools:
        raise bad("Tools cannot be empty if tool choice is set to required.", "tool_choice")
    name = forced_name(choice) if isinstance(choice, dict) else None
    if name is not None:
        if not tools:
            raise bad("Tools cannot be empty if tool choice is set to a specific tool.", "tool_choice")
        if not any(t["function"]["name"] == name for t in tools):
            shown = name if len(name) <= 200 else name[:197] + "..."  # a client's huge name is not echoed whole
            raise bad(f"Tool '{shown}' not found in tools list.", "tool_choice")
    for i, tool in enumerate(tools):
        params = tool["function"].get("parameters")
        problem = None if params is None else schema_problem(params)
        if problem is not None:
            raise bad(f"Tool {i} function has invalid 'parameters' schema: {problem}", f"tools[{i}].function.parameters")
    if choice == "required":
        try:
            merged_defs(tools)
        except ValueError as e:
            raise bad(f"Invalid tool configuration: {e}", "tools") from None
    return tools
