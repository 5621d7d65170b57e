"""Model outputs for the parser tests, per format: the same situations written
in each format's syntax (single call, several, text around them, nested JSON and
strings holding the markers, unicode, a call cut off at ``length``, an undeclared
function, malformed JSON).  ``scripts/gen_parser_fixtures.py`` records SGLang's
results for them in ``parser_fixtures.json``.
"""

import json

TOOLS = [
    {"type": "function", "function": {"name": "get_weather", "parameters": {
        "type": "object", "properties": {"city": {"type": "string"}, "days": {"type": "integer"}}}}},
    {"type": "function", "function": {"name": "search", "parameters": {
        "type": "object", "properties": {"query": {"type": "string"}, "filters": {"type": "object"}}}}},
]

WEATHER = ("get_weather", {"city": "Paris", "days": 3})
SEARCH = ("search", {"query": "a <tool_call> inside, [TOOL_CALLS] too", "filters": {"tags": ["x", {"y": [1, 2.5, None, True]}]}})
UNICODE = ("get_weather", {"city": "Zürich 東京 \U0001f600", "days": 1})
MARKERS = ("search", {"query": "</tool_call> <｜tool▁call▁end｜> <|tool_call_end|> \"q\" \\ }"})
UNKNOWN = ("launch_rocket", {"target": "moon"})


def _j(args):
    return json.dumps(args, ensure_ascii=False)


def hermes(calls, nl=False):
    sep = "\n" if nl else ""
    return "".join("<tool_call>%s%s%s</tool_call>\n" % (sep, json.dumps({"name": n, "arguments": a}, ensure_ascii=False), sep)
                   for n, a in calls).rstrip("\n")


def deepseekv3(calls):
    body = "".join("<｜tool▁call▁begin｜>function<｜tool▁sep｜>%s\n```json\n%s\n```<｜tool▁call▁end｜>" % (n, _j(a))
                   for n, a in calls)
    return "<｜tool▁calls▁begin｜>" + body + "<｜tool▁calls▁end｜>"


def deepseekv31(calls):
    body = "".join("<｜tool▁call▁begin｜>%s<｜tool▁sep｜>%s<｜tool▁call▁end｜>" % (n, _j(a)) for n, a in calls)
    return "<｜tool▁calls▁begin｜>" + body + "<｜tool▁calls▁end｜>"


def kimi_k2(calls):
    body = "".join("<|tool_call_begin|>functions.%s:%d<|tool_call_argument_begin|>%s<|tool_call_end|>" % (n, i, _j(a))
                   for i, (n, a) in enumerate(calls))
    return "<|tool_calls_section_begin|>" + body + "<|tool_calls_section_end|>"


def llama3(calls, tag=True):
    body = ";".join(json.dumps({"name": n, "parameters": a}, ensure_ascii=False) for n, a in calls)
    return ("<|python_tag|>" if tag else "") + body


def mistral(calls, compact=False):
    if compact:
        return "".join("[TOOL_CALLS]%s[ARGS]%s" % (n, _j(a)) for n, a in calls)
    return "[TOOL_CALLS] " + json.dumps([{"name": n, "arguments": a} for n, a in calls], ensure_ascii=False)


def _text(value):
    return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)


def glm45(calls):
    return "".join("<tool_call>%s\n%s</tool_call>\n" % (n, "".join(
        "<arg_key>%s</arg_key>\n<arg_value>%s</arg_value>\n" % (k, _text(v)) for k, v in a.items()))
        for n, a in calls).rstrip("\n")


def qwen3_coder(calls):
    return "".join("<tool_call>\n<function=%s>\n%s</function>\n</tool_call>\n" % (n, "".join(
        "<parameter=%s>\n%s\n</parameter>\n" % (k, _text(v)) for k, v in a.items()))
        for n, a in calls).rstrip("\n")


def _py(value):
    if isinstance(value, dict):
        return "{%s}" % ", ".join("%s: %s" % (_py(k), _py(v)) for k, v in value.items())
    if isinstance(value, list):
        return "[%s]" % ", ".join(_py(v) for v in value)
    return repr(value)


def pythonic(calls):
    return "[%s]" % ", ".join("%s(%s)" % (n, ", ".join("%s=%s" % (k, _py(v)) for k, v in a.items()))
                              for n, a in calls)


RENDER = {
    "hermes": hermes,
    "qwen25": lambda calls: hermes(calls, nl=True),
    "deepseekv3": deepseekv3,
    "deepseekv31": deepseekv31,
    "kimi_k2": kimi_k2,
    "llama3": llama3,
    "mistral": mistral,
    "glm45": glm45,
    "qwen3_coder": qwen3_coder,
    "pythonic": pythonic,
}


def lone_surrogate_call(fmt):
    """A call whose JSON (or literal) writes a lone surrogate as the escape ``\\ud800``."""
    return RENDER[fmt]([("search", {"query": "SUR", "filters": {"k": "SUR"}})]).replace("SUR", "a\\ud800b")


# SGLang 0.5.23's arguments for lone_surrogate_call (not in parser_fixtures.json:
# a lone surrogate cannot be written to a UTF-8 file): the JSON formats decode
# the escape and json.dumps(ensure_ascii=False) keeps the lone surrogate; glm45
# and qwen3_coder keep a string-typed value's text as written; kimi_k2 passes
# the arguments on unread.
_DECODED = '{"query": "a\ud800b", "filters": {"k": "a\ud800b"}}'
LONE_SURROGATE_ARGS = dict(
    dict.fromkeys(["hermes", "qwen25", "llama3", "mistral", "deepseekv3", "deepseekv31", "pythonic"], _DECODED),
    glm45='{"query": "a\\\\ud800b", "filters": {"k": "a\ud800b"}}',
    qwen3_coder='{"query": "a\\\\ud800b", "filters": {"k": "a\ud800b"}}',
    kimi_k2='{"query": "a\\ud800b", "filters": {"k": "a\\ud800b"}}')


def _cases(fmt, render):
    one = render([WEATHER])
    two = render([WEATHER, SEARCH])
    cases = [
        ("plain text", "The weather is fine, no tool needed."),
        ("leading whitespace text", "\n\n  Just text.  \n"),
        ("single call", one),
        ("several calls", two),
        ("text before", "Let me check that for you.\n\n" + one),
        ("text before and after", "Sure. " + two + "\nDone, anything else?"),
        ("nested json", render([SEARCH])),
        ("strings holding markers", render([MARKERS])),
        ("unicode", "Voilà: " + render([UNICODE])),
        ("undeclared function", render([UNKNOWN, WEATHER])),
        ("truncated at length", two[: len(two) - 17]),
        ("truncated after first", "Checking. " + render([WEATHER, SEARCH])[: len(one) + 12]),
        ("malformed json", render([WEATHER]).replace('"Paris"', "Paris", 1)),
        ("marker-like text", "Use <tool or [TOOL or <｜tool or <|python in prose, then stop <"),
    ]
    if fmt == "llama3":
        cases.append(("bare json object", llama3([WEATHER], tag=False)))
        cases.append(("bare json, two", llama3([WEATHER, SEARCH], tag=False)))
    if fmt in ("glm45", "qwen3_coder"):
        cases.append(("types from the schema", render([("get_weather", {"city": "42", "days": "7"}),
                                                        ("search", {"query": "[1, 2]", "filters": '{"a": [1, null]}',
                                                                    "extra": "not in schema"})])))
        cases.append(("python literal values", render([("search", {"filters": "{'a': (1, 2), 'b': True}",
                                                                    "query": "None"})])))
    if fmt == "pythonic":
        cases.append(("llama4 stray tokens", "<|python_start|>" + one + "<|python_end|>"))
        cases.append(("not calls", "A list [1, 2] and [x(] here."))
        cases.append(("non-literal argument", "[get_weather(city=f(x)), search(query='ok')]"))
        cases.append(("no arguments", "[search()]"))
    if fmt == "mistral":
        cases.append(("compact form", mistral([WEATHER], compact=True)))
        cases.append(("compact form, two", mistral([WEATHER, SEARCH], compact=True)))
        cases.append(("compact form, text before", "I'll look. " + mistral([UNICODE], compact=True)))
    return [(fmt, label, text) for label, text in cases]


TOOL_CASES = [case for fmt, render in RENDER.items() for case in _cases(fmt, render)]

_R_TEXTS = [
    ("open and close", "<think>Let me think.\nOK.</think>\n\nThe answer is 42."),
    ("no opening tag", "Thinking without a tag...</think>Answer."),
    ("no reasoning", "Just the answer."),
    ("truncated reasoning", "<think>still thinking about the"),
    ("tool call inside reasoning", "<think>I should call a tool.\n<tool_call>\n{\"name\": \"f\"}\n</tool_call>"),
    ("kimi section in reasoning", "<think>plan<|tool_calls_section_begin|><|tool_call_begin|>x"),
    ("unicode", "<think>Überlegung 思考 \U0001f914</think>Antwort ✓"),
    ("empty reasoning", "<think></think>Direct."),
    ("kimi markers", "\u25c1think\u25b7pondering\u25c1/think\u25b7Result."),
    ("end marker in answer", "<think>a</think>b</think>c"),
]

REASONING_CASES = [
    (name, label, text, kwargs)
    for name, kwargs_list in [
        ("deepseek-r1", [{}]), ("qwen3", [{}, {"enable_thinking": False}]),
        ("glm45", [{}]), ("kimi", [{}]), ("kimi_k2", [{}, {"thinking": False}]),
        ("qwen3-thinking", [{}]),
    ]
    for kwargs in kwargs_list
    for label, text in _R_TEXTS
]
