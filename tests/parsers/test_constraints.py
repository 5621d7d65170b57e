"""Forced tool choices and ``response_format`` as output constraints (issue 25, item 8).

``tool_choice: "required"`` or a named function becomes SGLang's JSON schema
for an array of calls (``mtok/parsers/forced.py``), forwarded to an upstream
that constrains its output -- SGLang's ``json_schema`` sampling parameter,
vLLM's ``structured_outputs.json`` -- and the constrained answer is read back
as that JSON into ``tool_calls``, streamed and not.  The stand-ins
(``tests/upstream_standin.py``) record what they were sent and answer with a
canned constrained output; the echo engine, which cannot constrain, refuses
with a 400 naming the field that asked.
"""

from __future__ import annotations

import contextlib
import json
import os

import pytest

from support import ROOT, Server, import_real
from upstream_standin import SGLangStandIn, VLLMStandIn
from mtok.parsers.base import Call, collect
from mtok.parsers.forced import ForcedCalls, merged_defs, tool_call_schema

pytestmark = pytest.mark.timeout(180)

ECHO_LAST = os.path.join(ROOT, "examples", "chat_template_echo_last.jinja")
WEATHER = {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}
TOOLS = [{"type": "function", "function": {"name": "get_weather", "parameters": WEATHER}},
         {"type": "function", "function": {"name": "search"}}]
NAMED = {"type": "function", "function": {"name": "get_weather"}}
CALLS = '[{"name": "get_weather", "parameters": {"city": "Zürich"}}, {"name": "search", "parameters": {}}]'
WANT_CALLS = [("get_weather", '{"city": "Zürich"}'), ("search", "{}")]
# What SGLang 0.5.23's get_json_schema_constraint builds for TOOLS (srt/function_call/utils.py), written out.
NO_PARAMS = {"type": "object", "properties": {}}
REQUIRED_SCHEMA = {"type": "array", "minItems": 1, "items": {"type": "object", "anyOf": [
    {"properties": {"name": {"type": "string", "enum": ["get_weather"]}, "parameters": WEATHER},
     "required": ["name", "parameters"]},
    {"properties": {"name": {"type": "string", "enum": ["search"]}, "parameters": NO_PARAMS},
     "required": ["name", "parameters"]}]}}
NAMED_SCHEMA = {"type": "array", "minItems": 1, "maxItems": 1, "items": {
    "properties": {"name": {"type": "string", "enum": ["get_weather"]}, "parameters": WEATHER},
    "required": ["name", "parameters"]}}


# -- the schema and the parser, in process -------------------------------------------------
@pytest.mark.unit
def test_the_schema_of_a_forced_choice_is_sglangs():
    assert tool_call_schema(TOOLS, "required") == REQUIRED_SCHEMA
    assert tool_call_schema(TOOLS, NAMED, parallel_tool_calls=False) == NAMED_SCHEMA
    assert tool_call_schema(TOOLS, "required", False)["maxItems"] == 1
    assert "maxItems" not in tool_call_schema(TOOLS, NAMED)
    assert tool_call_schema(TOOLS, {"type": "function", "function": {"name": "nope"}}) is None


@pytest.mark.unit
def test_the_tools_defs_are_merged_at_the_top_and_a_conflict_is_an_error():
    point = {"type": "object", "properties": {"x": {"type": "number"}}}
    with_defs = [{"type": "function", "function": {"name": n, "parameters": {
        "type": "object", "properties": {"p": {"$ref": "#/$defs/Point"}}, "$defs": {"Point": d}}}}
        for n, d in (("a", point), ("b", point))]
    assert tool_call_schema(with_defs, "required")["$defs"] == {"Point": point}
    assert "$defs" not in tool_call_schema(with_defs, {"type": "function", "function": {"name": "a"}})
    with_defs[1]["function"]["parameters"]["$defs"]["Point"] = {"type": "string"}
    with pytest.raises(ValueError, match="Tool definition 'Point' has multiple schemas"):
        merged_defs(with_defs)


@pytest.mark.unit
@pytest.mark.parametrize("text,want", [
    (CALLS, ("", [Call(n, a) for n, a in WANT_CALLS])),
    ('{"name": "search", "parameters": {"q": [1, null]}}', ("", [Call("search", '{"q": [1, null]}')])),
    ('[{"name": "search"}]', ("", [Call("search", "{}")])),
    ('[{"name": "get_weather", "parameters": {"ci', ('[{"name": "get_weather", "parameters": {"ci', [])),  # cut short
    ('[{"parameters": {}}]', ('[{"parameters": {}}]', [])),
    ('[{"name": 3}]', ('[{"name": 3}]', [])),
    ("[" * 100000, ("[" * 100000, [])),  # deep nesting is unreadable, not a server error
    ('"just text"', ('"just text"', [])),
])
def test_the_constrained_output_is_read_as_json_streamed_as_one_shot(text, want):
    parser = ForcedCalls(TOOLS)
    assert parser.parse(text) == want
    stream = parser.stream()
    deltas = [d for i in range(0, len(text), 7) for d in stream.feed(text[i:i + 7])]
    assert deltas == []  # the array is whole only at the end
    assert collect(stream.finish()) == want


@pytest.mark.unit
@pytest.mark.real
def test_the_schema_matches_sglangs_own_builder():
    """Differential, where SGLang imports (.ci/requirements-real.txt)."""
    utils = import_real("sglang.srt.function_call.utils", reason="SGLang is not installed")
    from sglang.srt.entrypoints.openai.protocol import Tool, ToolChoice
    from sglang.utils import convert_json_schema_to_str
    tools = TOOLS + [{"type": "function", "function": {"name": "deep", "parameters": {
        "type": "object", "properties": {"p": {"$ref": "#/$defs/P"}}, "$defs": {"P": {"type": "integer"}}}}}]
    theirs = [Tool(**t) for t in tools]
    for choice in ("required", NAMED, {"type": "function", "function": {"name": "deep"}}):
        for parallel in (True, False):
            sgl_choice = choice if choice == "required" else ToolChoice(**choice)
            want = convert_json_schema_to_str(utils.get_json_schema_constraint(theirs, sgl_choice, parallel))
            assert json.dumps(tool_call_schema(tools, choice, parallel)) == want, (choice, parallel)


# -- over HTTP, mtok in front of the stand-ins -------------------------------------------------
@contextlib.contextmanager
def fronted(kind):
    standin = {"sglang": SGLangStandIn, "vllm": VLLMStandIn}[kind]()
    srv = Server("--engine", f"{kind}:{standin.url}?timeout=10", "--chat-template", ECHO_LAST,
                 "--tool-call-parser", "hermes")
    try:
        yield srv, standin
    finally:
        srv.stop()
        standin.stop()


@pytest.fixture(scope="module", params=["sglang", "vllm"])
def upstream(request):
    with fronted(request.param) as pair:
        yield pair


@pytest.fixture(autouse=True)
def fresh(request):
    if "upstream" in request.fixturenames:
        standin = request.getfixturevalue("upstream")[1]
        standin.behaviour.clear()
        standin.seen.clear()
    yield


def constraint_sent(standin, kind="json_schema"):
    """The constraint the upstream got, as a string, under its own name for it."""
    params = standin.seen[-1]["sampling_params"]
    if standin.kind == "sglang":
        return params.get(kind)
    return (params.get("structured_outputs") or {}).get({"json_schema": "json", "ebnf": "grammar"}.get(kind, kind))


def say(srv, standin, text):
    status, body = srv.post("/tokenize", {"prompt": text})
    assert status == 200, body
    standin.behaviour["says"] = body["tokens"]


def chat(srv, stream=False, **kw):
    body = dict({"messages": [{"role": "user", "content": "weather?"}], "tools": TOOLS, "stream": stream}, **kw)
    if not stream:
        return srv.post("/v1/chat/completions", body)
    return 200, srv.stream("/v1/chat/completions", body)


def answer(status, got, stream):
    """(content, [(name, arguments)], finish) of a chat answer, streamed or not."""
    assert status == 200, got
    if not stream:
        choice = got["choices"][0]
        msg = choice["message"]
        return (msg.get("content"), [(c["function"]["name"], c["function"]["arguments"])
                                     for c in msg.get("tool_calls") or []], choice["finish_reason"])
    assert got[-1] == "[DONE]"
    content, calls, finish = "", {}, None
    for event in got[:-1]:
        choice = event["choices"][0]
        delta = choice["delta"]
        content += delta.get("content") or ""
        for c in delta.get("tool_calls") or []:
            entry = calls.setdefault(c["index"], ["", ""])
            entry[0] += c["function"].get("name") or ""
            entry[1] += c["function"].get("arguments") or ""
        finish = choice["finish_reason"] or finish
    return content or None, [tuple(calls[i]) for i in sorted(calls)], finish


@pytest.mark.parametrize("stream", [False, True], ids=["one-shot", "streamed"])
def test_required_forwards_sglangs_schema_and_the_answer_becomes_tool_calls(upstream, stream):
    srv, standin = upstream
    say(srv, standin, CALLS)
    content, calls, finish = answer(*chat(srv, stream, tool_choice="required"), stream)
    assert json.loads(constraint_sent(standin)) == REQUIRED_SCHEMA
    assert constraint_sent(standin) == json.dumps(REQUIRED_SCHEMA)
    assert (content, calls, finish) == (None, WANT_CALLS, "tool_calls")


def test_each_of_n_choices_is_read_on_its_own(upstream):
    srv, standin = upstream
    say(srv, standin, CALLS)
    status, got = chat(srv, tool_choice="required", n=2)
    assert status == 200, got
    assert len(standin.seen) == 2 and all(json.loads(b["sampling_params"].get("json_schema") or
                                                     b["sampling_params"]["structured_outputs"]["json"])
                                          == REQUIRED_SCHEMA for b in standin.seen)
    for choice in got["choices"]:
        calls = [(c["function"]["name"], c["function"]["arguments"]) for c in choice["message"]["tool_calls"]]
        assert calls == WANT_CALLS and choice["finish_reason"] == "tool_calls"
    assert len({c["id"] for ch in got["choices"] for c in ch["message"]["tool_calls"]}) == 4


@pytest.mark.parametrize("stream", [False, True], ids=["one-shot", "streamed"])
def test_a_named_tool_forwards_its_schema_alone(upstream, stream):
    srv, standin = upstream
    say(srv, standin, '[{"name": "get_weather", "parameters": {"city": "Oslo"}}]')
    got = answer(*chat(srv, stream, tool_choice=NAMED, parallel_tool_calls=False), stream)
    assert json.loads(constraint_sent(standin)) == NAMED_SCHEMA
    assert got == (None, [("get_weather", '{"city": "Oslo"}')], "tool_calls")


@pytest.mark.parametrize("stream", [False, True], ids=["one-shot", "streamed"])
def test_an_answer_cut_short_stays_content(upstream, stream):
    srv, standin = upstream
    say(srv, standin, CALLS)
    got = answer(*chat(srv, stream, tool_choice="required", max_tokens=5), stream)
    assert got[1] == [] and got[2] == "length" and CALLS.startswith(got[0])


@pytest.mark.parametrize("stream", [False, True], ids=["one-shot", "streamed"])
def test_response_format_json_schema_is_forwarded_and_the_json_is_content(upstream, stream):
    srv, standin = upstream
    schema = {"type": "object", "properties": {"city": {"type": "string"}}}
    say(srv, standin, '{"city": "Oslo"}')
    fmt = {"type": "json_schema", "json_schema": {"name": "w", "schema": schema}}
    got = answer(*chat(srv, stream, response_format=fmt, tools=None), stream)
    assert constraint_sent(standin) == json.dumps(schema)
    assert got == ('{"city": "Oslo"}', [], "stop")
    chat(srv, response_format={"type": "json_object"}, tools=None)
    assert constraint_sent(standin) == '{"type": "object"}'
    tag = {"type": "structural_tag", "structures": [{"begin": "<a>", "schema": {}, "end": "</a>"}], "triggers": ["<a>"]}
    chat(srv, response_format=tag, tools=None)
    assert constraint_sent(standin, "structural_tag") == json.dumps(tag)  # the whole object, as SGLang sends it


def test_completions_and_generate_forward_every_constraint(upstream):
    srv, standin = upstream
    status, body = srv.post("/v1/completions", {"prompt": "a", "max_tokens": 2, "response_format": {
        "type": "json_schema", "json_schema": {"name": "x", "schema": {"type": "integer"}}}})
    assert status == 200, body
    assert constraint_sent(standin) == '{"type": "integer"}'
    for kind, value in (("json_schema", '{"type": "string"}'), ("regex", "[ab]+"), ("ebnf", 'root ::= "a"'),
                        ("structural_tag", '{"type": "structural_tag", "structures": [], "triggers": []}')):
        status, body = srv.post("/generate", {"text": "a", "sampling_params": {"max_new_tokens": 2, kind: value}})
        assert status == 200, (kind, body)
        assert constraint_sent(standin, kind) == value


@pytest.mark.parametrize("extra,param,words", [
    ({"response_format": {"type": "json_object"}}, "tool_choice", "cannot be combined with response_format"),
    ({"regex": "x"}, "tool_choice", "cannot be combined"),
    ({"tools": []}, "tool_choice", "Tools cannot be empty"),
    ({"tool_choice": {"type": "function", "function": {"name": "nope"}}}, "tool_choice", "nope"),
])
def test_what_cannot_be_forced_is_a_400_and_nothing_goes_upstream(upstream, extra, param, words):
    srv, standin = upstream
    status, body = chat(srv, **dict({"tool_choice": "required"}, **extra))
    assert status == 400 and body["error"]["param"] == param and words in body["error"]["message"], body
    assert standin.seen == []
    assert srv.get("/health")[0] == 200


def test_tools_whose_defs_conflict_are_a_400(upstream):
    srv, standin = upstream
    tools = [{"type": "function", "function": {"name": n, "parameters": {"type": "object", "$defs": {"D": d}}}}
             for n, d in (("a", {"type": "string"}), ("b", {"type": "integer"}))]
    status, body = chat(srv, tools=tools, tool_choice="required")
    assert status == 400 and "multiple schemas" in body["error"]["message"], body
    assert standin.seen == []


# -- the echo engine cannot constrain: a clear 400 naming the field --------------------------
@pytest.fixture(scope="module")
def echo():
    srv = Server("--chat-template", ECHO_LAST, "--tool-call-parser", "hermes")
    yield srv
    srv.stop()


@pytest.mark.parametrize("stream", [False, True], ids=["one-shot", "streamed"])
@pytest.mark.parametrize("path,body,param", [
    ("/v1/chat/completions", {"tools": TOOLS, "tool_choice": "required"}, "tool_choice"),
    ("/v1/chat/completions", {"tools": TOOLS, "tool_choice": NAMED}, "tool_choice"),
    ("/v1/chat/completions", {"response_format": {"type": "json_schema", "json_schema": {"schema": {}}}},
     "response_format"),
    ("/v1/completions", {"prompt": "a", "response_format": {"type": "json_object"}}, "response_format"),
    ("/v1/completions", {"prompt": "a", "response_format": {"type": "structural_tag", "structures": [],
                                                            "triggers": []}}, "response_format"),
    ("/generate", {"text": "a", "sampling_params": {"json_schema": "{}"}}, "json_schema"),
    ("/generate", {"text": "a", "sampling_params": {"ebnf": 'root ::= "a"'}}, "ebnf"),
])
def test_an_engine_that_cannot_constrain_refuses_naming_the_field(echo, path, body, param, stream):
    if "prompt" not in body and "text" not in body:
        body = dict(body, messages=[{"role": "user", "content": "hi"}])
    status, got = echo.post(path, dict(body, stream=stream))
    assert status == 400, got
    assert got["error"]["param"] == param
    assert "constrain its output" in got["error"]["message"] and "EchoEngine" in got["error"]["message"]
    assert echo.post("/v1/chat/completions", {"messages": [{"role": "user", "content": "ok"}],
                                              "max_tokens": 1})[0] == 200


@pytest.mark.parametrize("fmt", [{"type": "json_schema", "json_schema": "x"}, {"type": "json_schema"},
                                 {"type": "json_schema", "json_schema": {"schema": []}}, {"type": "yaml"}])
def test_a_malformed_response_format_is_a_400(echo, fmt):
    """``json_schema`` that is not an object used to reach ``.get`` on a string: a 500."""
    status, got = echo.post("/v1/chat/completions", {"messages": [{"role": "user", "content": "hi"}],
                                                     "response_format": fmt})
    assert status == 400 and got["error"]["param"] == "response_format", got
    assert echo.get("/health")[0] == 200
