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

SGLang's expressions for glm45's name and ``<arg_key>``/``<arg_value>`` pairs
retry from every tag when one is left open (quadratic in the block); the
readers here find the same pairs with forward searches.  qwen3_coder's own
expressions never rescan, so they are used as they are, once per block.
"""

import json
import re

from mtok.parsers.base import UNREADABLE, Call, dump_args, tool_schema
from mtok.parsers.blocks import BlockToolParser
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
    start = open = "<tool_call>"
    close = "</tool_call>"
    name_end = re.compile(r"\\n|\n")  # SGLang: <tool_call>(.*?)(?:\\n|\n)(.*)</tool_call>
    pair_gap = re.compile(r"(?:\\n|\s)*")
    # SGLang gives up on the whole output when a value cannot be written as
    # JSON; dump_args writes it as text instead, so one block never undoes others.
    all_or_nothing = False

    def read_block(self, text, at, body, close_at):
        end = self.search(self.name_end, text, body, close_at)
        if end is None:
            return []
        name = text[body:end.start()]
        props = schema_properties(tool_schema(self.tools, name)) if name in self.names else {}
        args = {}
        for key, raw in self.pairs(text, end.end(), close_at):
            key = key.strip()
            kind = schema_type(props.get(key)) if key in props else None
            value, _ = glm_value(raw, kind)
            if kind == "string" and not isinstance(value, str):
                value = dump_args(value) if isinstance(value, (dict, list)) else str(value)
            args[key] = value
        return self.calls_from_json({"name": name, "parameters": args})

    def pairs(self, text, pos, end):
        """SGLang's ``<arg_key>(.*?)</arg_key>(?:\\n|\\s)*<arg_value>(.*?)</arg_value>``
        matches in ``text[pos:end]``: a key runs to the first ``</arg_key>`` that
        ``<arg_value>`` follows; when a value has no close, no later pair has one."""
        found = []
        while True:
            key = self.find(text, "<arg_key>", pos, end)
            if key == -1:
                return found
            key += len("<arg_key>")
            key_end, value = self._key_end(text, key, end)
            close = self.find(text, "</arg_value>", value, end) if key_end != -1 else -1
            if close == -1:
                return found
            found.append((text[key:key_end], text[value:close]))
            pos = close + len("</arg_value>")

    def _key_end(self, text, key, end):
        """(where the key ends, where its value begins), or (-1, -1)."""
        at = key
        while True:
            at = self.find(text, "</arg_key>", at, end)
            if at == -1:
                return -1, -1
            gap = self.run(self.pair_gap, text, at + len("</arg_key>"), end)
            if text.startswith("<arg_value>", gap, end):
                return at, gap + len("<arg_value>")
            at += 1


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
    start = open = "<tool_call>"
    close = "</tool_call>"
    function_re = re.compile(r"<function=(.*?)</function>|<function=(.*)$", re.S)
    param_re = re.compile(r"<parameter=(.*?)(?:</parameter>|(?=<parameter=)|(?=</function>)|$)", re.S)
    strip_content = False
    all_or_nothing = False
    index_by_call = True

    def read_block(self, text, at, body, close_at):
        return self._calls(self.slice(text, body, close_at))

    def tail_calls(self, stream, text):
        """No block closed: SGLang reads ``<function=`` wherever it is in the output."""
        if stream.closed or self.find(text, "<function=", 0) == -1:
            return []
        return self._calls(self.slice(text, 0, len(text)))

    def _calls(self, body):
        self.read(2 * len(body))  # function_re, then param_re within each function: one pass each
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
