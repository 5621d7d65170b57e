"""Tool-call formats with XML-like argument tags whose values are typed from the
request's schema: ``glm45`` and ``qwen3_coder``.

glm45::

    <tool_call>get_weather
    <arg_key>city</arg_key>
    <arg_value>Paris</arg_value>
    </tool_call>

qwen3_coder::

    <tool_call>
    <function=get_weather>
    <parameter=city>
    Paris
    </parameter>
    </function>
    </tool_call>

Following SGLang (0.5.23): glm45 strips the content and drops calls to
undeclared functions; qwen3_coder keeps the content as written, keeps calls to
any function name, and with no closed ``<tool_call>`` block at all still reads
``<function=...>`` found anywhere (a call cut off at ``length`` survives).
"""

import json
import re

from mtok.parsers.base import UNREADABLE, BlockToolParser, Call, dump_args, tool_schema
from mtok.parsers.schema import literal_eval, schema_properties, schema_type


def _number(text):
    try:
        return float(text) if "." in text or "e" in text.lower() else int(text)
    except ValueError:
        return text


def glm_value(raw, kind):
    """(value, read well) for one ``<arg_value>``: JSON, then JSON-escaped JSON,
    then (strings) the text itself, then a Python literal, then the text."""
    for attempt in (lambda: json.loads(raw), lambda: json.loads(json.loads('{"t": "' + raw + '"}')["t"])):
        try:
            value = attempt()
        except (KeyError,) + UNREADABLE:
            continue
        return (_number(value) if kind == "number" and isinstance(value, str) else value), True
    if kind == "string":
        quoted = len(raw) >= 2 and raw[0] == raw[-1] and raw[0] in "\"'"
        return (raw[1:-1] if quoted else raw), True
    try:
        return literal_eval(raw), True
    except (SyntaxError,) + UNREADABLE:
        return raw, True  # SGLang: json.dumps(str(raw)) read back, i.e. the text


class Glm45Parser(BlockToolParser):
    name = "glm45"
    start = "<tool_call>"
    block_re = re.compile(r"<tool_call>.*?</tool_call>", re.S)
    detail_re = re.compile(r"<tool_call>(.*?)(?:\\n|\n)(.*)</tool_call>", re.S)
    arg_re = re.compile(r"<arg_key>(.*?)</arg_key>(?:\\n|\s)*<arg_value>(.*?)</arg_value>", re.S)
    # SGLang gives up on the whole output when a value cannot be written as
    # JSON; dump_args writes it as text instead, so one block never undoes others.
    all_or_nothing = False

    def parse_block(self, match):
        detail = self.detail_re.search(match.group(0))
        if detail is None:
            return []
        name = detail.group(1) or ""
        props = schema_properties(tool_schema(self.tools, name)) if name in self.names else {}
        args = {}
        for key, raw in self.arg_re.findall(detail.group(2) or ""):
            key = key.strip()
            kind = schema_type(props.get(key)) if key in props else None
            value, _ = glm_value(raw, kind)
            if kind == "string" and not isinstance(value, str):
                value = dump_args(value) if isinstance(value, (dict, list)) else str(value)
            args[key] = value
        return self.calls_from_json({"name": name, "parameters": args})


def coder_value(raw, name, config):
    """qwen3_coder: a ``<parameter>``'s text converted by its schema type."""
    if raw.lower() == "null":
        return None
    if name not in config:
        return raw
    kind = str(schema_type(config[name]) or "string").strip().lower()
    if kind in ("string", "str", "text", "varchar", "char", "enum"):
        return raw
    if kind.startswith(("int", "uint", "long", "short", "unsigned")):
        try:
            return int(raw)
        except ValueError:
            return raw
    if kind.startswith(("num", "float")):
        try:
            value = float(raw)
        except ValueError:
            return raw
        plain = "." not in raw and "e" not in raw.lower()
        return int(value) if plain and value.is_integer() else value
    if kind in ("boolean", "bool", "binary"):
        return raw.lower() == "true"
    if kind in ("object", "array", "arr") or kind.startswith(("dict", "list")):
        try:
            return json.loads(raw)
        except UNREADABLE:
            pass
    try:
        return literal_eval(raw)
    except (SyntaxError,) + UNREADABLE:
        return raw


class Qwen3CoderParser(BlockToolParser):
    name = "qwen3_coder"
    start = "<tool_call>"
    block_re = re.compile(r"<tool_call>(.*?)</tool_call>", re.S)
    function_re = re.compile(r"<function=(.*?)</function>|<function=(.*)$", re.S)
    param_re = re.compile(r"<parameter=(.*?)(?:</parameter>|(?=<parameter=)|(?=</function>)|$)", re.S)
    strip_content = False
    index_by_call = True

    def blocks(self, text):
        found = [m.group(1) for m in self.block_re.finditer(text)]
        return found or ([text] if "<function=" in text else [])

    def parse(self, text):
        if self.start not in text:
            return text, []
        return text[: text.find(self.start)], [c for body in self.blocks(text) for c in self._calls(body)]

    def stable(self, text):
        if self.start not in text:
            return super().stable(text)
        closed = [m.group(1) for m in self.block_re.finditer(text)]
        return text[: text.find(self.start)], [c for body in closed for c in self._calls(body)]

    def _calls(self, body):
        calls = []
        for closed, open_ in self.function_re.findall(body):
            func = closed or open_
            if ">" not in func:
                continue
            name, params = func.split(">", 1)
            schema = tool_schema(self.tools, name)
            config = schema_properties(schema) or ({} if "properties" in schema else schema)
            args = {}
            for item in self.param_re.findall(params):
                if ">" not in item:
                    continue
                key, value = item.split(">", 1)
                value = value[1:] if value.startswith("\n") else value
                value = value[:-1] if value.endswith("\n") else value
                args[key] = coder_value(value, key, config)
            try:
                calls.append(Call(name, dump_args(args)))
            except UNREADABLE:  # nested past what json can write: the call is dropped
                continue
        return calls
