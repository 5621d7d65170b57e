"""SGLang's parser helper routes and the --tool-call-parser / --reasoning-parser
flags, through a real server for N = 1 and N = 2."""

from __future__ import annotations

import json

import pytest

from mtok.wire.args import ServerArgs
from mtok.tokenizer import DEFAULT_TOKENIZER_DIR
from parser_corpus import LONE_SURROGATE_ARGS, TOOLS as CORPUS_TOOLS, lone_surrogate_call

pytestmark = pytest.mark.fast

TOOLS = [{"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object"}}},
         {"type": "function", "function": {"name": "search", "parameters": {"type": "object"}}}]
HERMES = 'Let me see. <tool_call>{"name": "search", "arguments": {"q": "Zürich"}}</tool_call>'


@pytest.fixture(scope="module", params=[1, 2], ids=["N1", "N2"])
def srv(request, server_factory):
    return server_factory(
        "--tokenizer-worker-num", str(request.param),
        "--model", f"plain={DEFAULT_TOKENIZER_DIR}",
        "--model", f"qwen={DEFAULT_TOKENIZER_DIR}",
        "--tool-call-parser", "hermes", "--tool-call-parser", "qwen=qwen25",
        "--reasoning-parser", "qwen=qwen3",
    )


def test_parse_function_call_as_sglang(srv):
    status, body = srv.post("/parse_function_call", {"text": HERMES, "tools": TOOLS, "tool_call_parser": "hermes"})
    assert status == 200, body
    assert body == {"normal_text": "Let me see.", "calls": [
        {"tool_index": 1, "name": "search", "parameters": json.dumps({"q": "Zürich"}, ensure_ascii=False)}]}


def test_parse_function_call_uses_the_models_configured_parser(srv):
    _, plain = srv.post("/parse_function_call", {"text": HERMES, "tools": TOOLS})
    assert [c["name"] for c in plain["calls"]] == ["search"]
    _, qwen = srv.post("/parse_function_call", {"text": HERMES, "tools": TOOLS, "model": "qwen"})
    assert qwen == {"normal_text": HERMES, "calls": []}  # qwen25 wants "<tool_call>\n"


def test_separate_reasoning_as_sglang(srv):
    text = "<think>hmm</think>\n\nAnswer"
    status, body = srv.post("/separate_reasoning", {"text": text, "reasoning_parser": "deepseek-r1"})
    assert status == 200 and body == {"reasoning_text": "hmm", "text": "\n\nAnswer"}
    _, body = srv.post("/separate_reasoning", {"text": "plain", "model": "qwen", "return_blocks": True,
                                               "chat_template_kwargs": {"enable_thinking": False}})
    assert body == {"reasoning_text": "", "text": "plain", "reasoning_blocks": [], "text_blocks": ["plain"]}


@pytest.mark.parametrize("name", ["qwen3", "glm45", "kimi_k2", "interns1"])
def test_separate_reasoning_without_toggles_reads_unopened_text_as_text(srv, name):
    """Issue 25: SGLang's route builds the parser with no request toggles, so a
    hybrid-thinking format takes its detector's default (not forced): text with
    no start marker is text.  ``enable_thinking: true`` asks for the template's
    opened block, as the chat path assumes by default."""
    text = "thoughts</think>answer"
    _, body = srv.post("/separate_reasoning", {"text": text, "reasoning_parser": name})
    assert body == {"reasoning_text": "", "text": text}
    _, body = srv.post("/separate_reasoning", {"text": "<think>t</think>a", "reasoning_parser": name})
    assert body == {"reasoning_text": "t", "text": "a"}
    key = "thinking" if name == "kimi_k2" else "enable_thinking"
    _, body = srv.post("/separate_reasoning", {"text": text, "reasoning_parser": name,
                                               "chat_template_kwargs": {key: True}})
    assert body == {"reasoning_text": "thoughts", "text": "answer"}


def test_separate_reasoning_keeps_always_thinking_formats_forced(srv):
    _, body = srv.post("/separate_reasoning", {"text": "thoughts</think>answer", "reasoning_parser": "qwen3-thinking"})
    assert body == {"reasoning_text": "thoughts", "text": "answer"}


@pytest.mark.parametrize("name,opened", [
    ("glm45", "<tool_call>get_weather\n<arg_key>city</arg_key>\n<arg_value>Pa"),
    ("qwen3_coder", "<tool_call>\n<function=get_weather>\n<parameter=city>\nPa"),
    ("qwen25", '<tool_call>\n{"name": "get_weather", "arguments": {"ci'),
], ids=["glm45", "qwen3_coder", "qwen25"])
def test_megabytes_of_unclosed_tags_are_answered_at_once(srv, name, opened):
    """Issue 23, finding 4: 330 KB of unclosed ``<tool_call>`` tags got no answer in
    60 s (glm45, qwen3_coder: a rescan from every tag) and froze a one-worker
    server; 2.2 MB got both workers of two killed.  One pass answers in well under
    the 30 s this client waits (test_parsers_linear.py counts the work)."""
    text = opened * (2200000 // len(opened))
    status, body = srv.post("/parse_function_call", {"text": text, "tools": TOOLS, "tool_call_parser": name},
                            conn=srv.conn(timeout=30))
    assert status == 200, body
    assert srv.get("/health")[0] == 200


@pytest.mark.parametrize("name", ["hermes", "qwen25", "llama3", "mistral", "deepseekv3", "glm45"])
def test_a_lone_surrogate_in_the_calls_json_is_answered_as_sglang_parses_it(srv, name):
    """Issue 23, finding 5a: ``"\\ud800"`` in the model's JSON was a 500 UnicodeEncodeError."""
    status, body = srv.post("/parse_function_call", {"text": lone_surrogate_call(name), "tools": CORPUS_TOOLS,
                                                     "tool_call_parser": name})
    assert status == 200, body
    assert [(c["name"], c["parameters"]) for c in body["calls"]] == [("search", LONE_SURROGATE_ARGS[name])]
    assert srv.get("/health")[0] == 200


@pytest.mark.parametrize("path,body,param", [
    ("/parse_function_call", {"text": "x", "tool_call_parser": "nope"}, "tool_call_parser"),
    ("/parse_function_call", {"text": "x", "tools": [{"type": "function"}]}, "tools[0]"),
    ("/parse_function_call", {"tools": TOOLS}, "text"),
    ("/parse_function_call", {"text": 1}, "text"),
    ("/separate_reasoning", {"text": "x"}, "reasoning_parser"),       # model "plain" has none
    ("/separate_reasoning", {"text": "x", "reasoning_parser": "qwen3", "extra": 1}, "extra"),
])
def test_bad_requests_are_400_and_the_server_keeps_serving(srv, path, body, param):
    status, err = srv.post(path, body)
    assert status == 400, err
    assert err["error"]["param"] == param and err["error"]["message"]
    assert srv.get("/health")[0] == 200


def test_flags_resolve_per_model():
    args = ServerArgs(models=[f"a={DEFAULT_TOKENIZER_DIR}", f"b={DEFAULT_TOKENIZER_DIR}"],
                      tool_call_parser=["b=mistral", "llama3"], reasoning_parser=["a=kimi"])
    assert args.parsers() == {"tool": {"a": "llama3", "b": "mistral"}, "reasoning": {"a": "kimi"}}
    for bad in (ServerArgs(tool_call_parser=["nope"]), ServerArgs(reasoning_parser=["zz=qwen3"])):
        with pytest.raises(ValueError, match="parser"):
            bad.check()
