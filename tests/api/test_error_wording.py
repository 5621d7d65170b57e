"""The error texts SGLang's own tests look for, in mtok's error shape, and
the order in which a chat request's tools are judged (SGLang's).

Over a real server with the echo engine and a small context, so every limit
is reached with a short prompt.
"""

from __future__ import annotations

import os
import socket

import pytest

from mtok.api.chat_tools import schema_problem
from support import ROOT

pytestmark = pytest.mark.fast

CONTEXT = 64


@pytest.fixture(scope="module")
def srv(server_factory):
    return server_factory("--context-length", str(CONTEXT), "--max-payload-size", "2048",
                          "--chat-template", os.path.join(ROOT, "examples", "chat_template_echo_last.jinja"))


def chat(content="hi", **kw):
    return dict({"messages": [{"role": "user", "content": content}]}, **kw)


def error(resp):
    assert set(resp) == {"error"}, resp  # mtok's shape, whatever the words
    return resp["error"]


# -- the context length ---------------------------------------------------------------------------
@pytest.mark.parametrize("path,body", [
    ("/generate", {"text": "hello " * 100}),
    ("/v1/completions", {"prompt": "hello " * 100}),
    ("/v1/chat/completions", chat("hello " * 100)),
])
def test_an_input_over_the_context_is_sglangs_sentence(srv, path, body):
    status, resp = srv.post(path, body)
    assert status == 400, resp
    msg = error(resp)["message"]
    assert "is longer than the model's context length" in msg, msg
    assert msg.startswith("The input (") and msg.endswith(f"tokens) is longer than the model's context length "
                                                          f"({CONTEXT} tokens)."), msg


@pytest.mark.parametrize("path,body", [
    ("/generate", {"text": "hello hello", "sampling_params": {"max_new_tokens": CONTEXT - 1}}),
    ("/v1/completions", {"prompt": "hello hello", "max_tokens": CONTEXT - 1}),
    ("/v1/chat/completions", chat("hello hello", max_tokens=CONTEXT - 1)),
])
def test_an_input_and_budget_over_the_context_is_sglangs_sentence(srv, path, body):
    status, resp = srv.post(path, body)
    assert status == 400, resp
    err = error(resp)
    assert err["message"].startswith(f"Requested token count exceeds the model's maximum context length of "
                                     f"{CONTEXT} tokens. You requested a total of "), err
    assert err["param"] == "max_new_tokens"


@pytest.mark.parametrize("name", ["max_tokens", "max_completion_tokens"])
def test_a_chat_budget_over_the_context_is_too_large_before_the_prompt_counts(srv, name):
    status, resp = srv.post("/v1/chat/completions", chat(**{name: CONTEXT + 1}))
    assert status == 400, resp
    err = error(resp)
    assert err["message"] == (f"max_completion_tokens is too large: {CONTEXT + 1}. This model supports at most "
                              f"{CONTEXT} completion tokens."), err
    assert err["param"] == name
    assert srv.post("/v1/chat/completions", chat(max_tokens=2))[0] == 200


# -- 413 ----------------------------------------------------------------------------------------------
def raw_request(srv, head: bytes, body: bytes) -> bytes:
    with socket.create_connection((srv.host, srv.port), timeout=30) as s:
        s.sendall(head + body)
        data = b""
        while True:
            chunk = s.recv(65536)
            if not chunk:
                return data
            data += chunk


def test_a_body_over_the_limit_says_payload_too_large(srv):
    """--max-payload-size is SGLang's name for --max-request-bytes; the body
    SGLang's test reads must hold "Payload Too Large"."""
    status, resp = srv.post("/v1/chat/completions", chat("hello " * 400))
    assert status == 413 and error(resp)["message"].startswith("Payload Too Large: "), resp
    body = b"5\r\nhello\r\n" * 300 + b"0\r\n\r\n"
    got = raw_request(srv, b"POST /generate HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                           b"Transfer-Encoding: chunked\r\n\r\n", body)
    assert got.startswith(b"HTTP/1.1 413") and b"Payload Too Large" in got, got[:300]
    assert srv.post("/generate", {"text": "still serving", "sampling_params": {"max_new_tokens": 1}})[0] == 200


# -- tools and tool_choice, in SGLang's order -------------------------------------------------------
def tool(name="get_weather", parameters=None):
    fn = {"name": name}
    if parameters is not None:
        fn["parameters"] = parameters
    return {"type": "function", "function": fn}


WEATHER = {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}


@pytest.mark.parametrize("body,param,message", [
    (chat(tool_choice="required"), "tool_choice", "Tools cannot be empty if tool choice is set to required."),
    (chat(tool_choice={"type": "function", "function": {"name": "f"}}), "tool_choice",
     "Tools cannot be empty if tool choice is set to a specific tool."),
    (chat(tools=[tool(parameters=WEATHER)], tool_choice={"type": "function", "function": {"name": "nonexistent"}}),
     "tool_choice", "Tool 'nonexistent' not found in tools list."),
])
def test_a_forced_choice_without_its_tool_is_refused_in_sglangs_words(srv, body, param, message):
    status, resp = srv.post("/v1/chat/completions", body)
    assert status == 400 and error(resp) == {"message": message, "type": "invalid_request_error", "code": 400,
                                             "param": param}, resp


@pytest.mark.parametrize("choice", ["auto", "required", {"type": "function", "function": {"name": "get_weather"}}])
@pytest.mark.parametrize("bad_params,words", [
    ({"type": "object", "properties": {"city": "a string, please"}}, "'a string, please' is not of type 'object', "
                                                                     "'boolean'"),
    ({"type": "object", "properties": {"city": {"type": "unknown_type"}}}, "'unknown_type' is not one of"),
])
def test_an_invalid_parameters_schema_is_judged_before_the_choice(srv, choice, bad_params, words):
    status, resp = srv.post("/v1/chat/completions", chat(tools=[tool(parameters=WEATHER), tool("t2", bad_params)],
                                                         tool_choice=choice))
    assert status == 400, resp
    err = error(resp)
    assert err["message"].startswith(f"Tool 1 function has invalid 'parameters' schema: {words}"), err
    assert err["param"] == "tools[1].function.parameters"


def test_conflicting_defs_with_a_required_choice_are_an_invalid_tool_configuration(srv):
    def with_defs(name, kind):
        return tool(name, {"type": "object", "properties": {"data": {"$ref": "#/$defs/DataType"}},
                           "$defs": {"DataType": {"type": "object", "properties": {"value": {"type": kind}}}}})

    status, resp = srv.post("/v1/chat/completions", chat(tools=[with_defs("a", "string"), with_defs("b", "number")],
                                                         tool_choice="required"))
    assert status == 400, resp
    msg = error(resp)["message"]
    assert msg == ("Invalid tool configuration: Tool definition 'DataType' has multiple schemas, which is not "
                   "supported."), msg
    # the same tools with "auto" are fine: only a required choice merges the $defs
    status, resp = srv.post("/v1/chat/completions", chat(tools=[with_defs("a", "string"), with_defs("b", "number")],
                                                         tool_choice="auto", max_tokens=2))
    assert status == 200, resp


def test_a_tool_without_a_name_is_refused_naming_it(srv):
    status, resp = srv.post("/v1/chat/completions", chat(tools=[{"type": "function", "function": {
        "parameters": WEATHER}}], tool_choice="required"))
    assert status == 400 and "name" in error(resp)["message"], resp


# -- the schema check, in process ----------------------------------------------------------------------
@pytest.mark.unit
@pytest.mark.parametrize("schema", [
    WEATHER, True, {}, {"type": ["string", "null"]}, {"type": "varchar"}, {"type": "int64"},
    {"type": "decimal(10,2)"}, {"type": "list[str]"}, {"type": "Integer"},
    {"type": "object", "properties": {"o": {"$ref": "#/$defs/O"}}, "$defs": {"O": {"type": "object",
     "additionalProperties": False, "properties": {"u": {"enum": ["c", "f"], "default": "c"}}}}},
    {"anyOf": [{"type": "integer", "minimum": 0}, False], "items": {"type": "string", "maxLength": 3}},
])
def test_schemas_that_are_json_schemas_pass(schema):
    assert schema_problem(schema) is None


@pytest.mark.unit
@pytest.mark.parametrize("schema,where", [
    ([], "schema"), ({"properties": []}, "['properties']"), ({"required": "city"}, "['required']"),
    ({"required": ["a", "a"]}, "['required']"), ({"items": 3}, "['items']"), ({"anyOf": []}, "['anyOf']"),
    ({"minLength": -1}, "['minLength']"), ({"type": 5}, "['type']"), ({"multipleOf": 0}, "['multipleOf']"),
    ({"type": "unknown_type"}, "['type']"), ({"type": "internal"}, "['type']"), ({"type": ["string", "listing"]},
                                                                               "['type']"),
    ({"properties": {"a": {"properties": {"b": None}}}}, "['properties']['a']['properties']['b']"),
])
def test_schemas_that_are_not_say_where(schema, where):
    problem = schema_problem(schema)
    assert problem is not None and problem.endswith(f"(at schema{where})" if where != "schema" else "(at schema)"), \
        problem


@pytest.mark.unit
def test_a_deep_schema_is_walked_without_recursion():
    deep = {}
    node = deep
    for _ in range(100_000):
        node["items"] = {}
        node = node["items"]
    node["type"] = 7
    problem = schema_problem(deep)
    assert "is not a type name" in problem and problem.endswith("(at schema[...]" + "['items']" * 9 + "['type'])"), \
        problem
