"""What a tool's JSON schema says about one argument, for the formats whose
arguments arrive as text (glm45, qwen3_coder) and are typed from the request's
``tools``, as SGLang types them (``srt/function_call/utils.py``).
"""

import ast
import warnings


def schema_properties(schema):
    """Top-level ``properties``, merging ``anyOf``/``oneOf``/``allOf`` branches when absent."""
    if not isinstance(schema, dict):
        return {}
    props = schema.get("properties")
    if isinstance(props, dict):
        return props
    merged = {}
    for keyword in ("anyOf", "oneOf", "allOf"):
        branches = schema.get(keyword)
        for branch in branches if isinstance(branches, list) else ():
            for key, value in schema_properties(branch).items():
                merged.setdefault(key, value)
    return merged


def _type_of_value(value):
    if value is None:
        return "null"
    for kind, name in ((bool, "boolean"), (int, "integer"), (float, "number"), (str, "string"),
                       (list, "array"), (dict, "object")):
        if isinstance(value, kind):
            return name
    return "string"


def schema_type(schema):
    """The one type name an argument's schema stands for, or None (SGLang's inference)."""
    if not isinstance(schema, dict):
        return None
    kind = schema.get("type")
    if isinstance(kind, str):
        return kind
    if isinstance(kind, list) and kind:
        return ([k for k in kind if k != "null"] or ["string"])[0]
    options = schema.get("anyOf") or schema.get("oneOf")
    if ("anyOf" in schema or "oneOf" in schema) and isinstance(options, list):
        types = [t for t in (schema_type(s) for s in options) if t]
        if types:
            distinct = set(types)
            if len(distinct) == 1:
                return types[0]
            if len(distinct) == 2 and "null" in distinct:
                return [t for t in types if t != "null"][0]
            return "string" if "string" in distinct else types[0]
    if isinstance(schema.get("enum"), list):
        kinds = {_type_of_value(v) for v in schema["enum"]}
        return kinds.pop() if len(kinds) == 1 else "string"
    if isinstance(schema.get("allOf"), list):
        for sub in schema["allOf"]:
            kind = schema_type(sub)
            if kind and kind != "string":
                return kind
        return "string"
    if "properties" in schema:
        return "object"
    if "items" in schema:
        return "array"
    return None


def literal_eval(text):
    """``ast.literal_eval`` without the invalid-escape warnings (a ``"\\d"`` keeps its backslash)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return ast.literal_eval(text)
