"""Tool calls and reasoning through /v1/chat/completions, end to end with the
official openai client, streamed and not, N = 1 and 2.

The echo engine and ``examples/chat_template_echo_last.jinja`` make the "model"
say whatever the test's last user message says; a stop string after it ends the
output with finish "stop", as a model's end of turn would.
"""

from __future__ import annotations

import json
import os

import pytest

from support import ROOT, import_real
from mtok.tokenizer import DEFAULT_TOKENIZER_DIR

openai = import_real("openai")

pytestmark = pytest.mark.fast

ECHO_LAST = os.path.join(ROOT, "examples", "chat_template_echo_last.jinja")
END = "<<END>>"
TOOLS = [{"type": "function", "function": {"name": "get_weather", "description": "weather",
                                            "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}},
         {"type": "function", "function": {"name": "search", "parameters": {"type": "object"}}}]
SAYS = ('<think>The user wants weather; call the tool.</think>Let me check, 👋.\n'
        '<tool_call>{"name": "get_weather", "arguments": {"city": "Zürich"}}</tool_call>\n'
        '<tool_call>{"name": "search", "arguments": {"q": "a <tool_call> [TOOL_CALLS] inside", "n": [1, {"a": null}]}}</tool_call>')


@pytest.fixture(scope="module", params=[1, 2], ids=["N1", "N2"])
def srv(request, server_factory):
    return server_factory(
        "--tokenizer-worker-num", str(request.param),
        "--model", f"qwen={DEFAULT_TOKENIZER_DIR}", "--model", f"plain={DEFAULT_TOKENIZER_DIR}",
        "--chat-template", f"qwen={ECHO_LAST}", "--chat-template", f"plain={ECHO_LAST}",
        "--tool-call-parser", "qwen=hermes", "--reasoning-parser", "qwen=qwen3",
    )


@pytest.fixture(scope="module")
def client(srv):
    return openai.OpenAI(base_url=f"http://{srv.host}:{srv.port}/v1", api_key="none", max_retries=0, timeout=60)


def ask(client, says, model="qwen", stream=False, **kw):
    kw.setdefault("tools", TOOLS)
    kw.setdefault("max_tokens", 4 * len(says.encode()) + 64)
    return client.chat.completions.create(model=model, messages=[{"role": "user", "content": says + END}],
                                          stop=[END], stream=stream, **kw)


def one_shot(client, says, **kw):
    choice = ask(client, says, **kw).choices[0]
    msg = choice.message
    calls = [(c.id, c.type, c.function.name, c.function.arguments) for c in msg.tool_calls or []]
    return {"reasoning": getattr(msg, "reasoning_content", None), "content": msg.content, "calls": calls,
            "finish": choice.finish_reason}


def streamed(client, says, **kw):
    """The deltas folded as a client does; checks each call's first delta carries id, type and name."""
    reasoning, content, calls, finish = [], [], {}, None
    for chunk in ask(client, says, stream=True, **kw):
        choice = chunk.choices[0]
        delta = choice.delta
        reasoning.append(getattr(delta, "reasoning_content", None) or "")
        content.append(delta.content or "")
        for tc in delta.tool_calls or []:
            if tc.index not in calls:
                assert tc.id and tc.type == "function" and tc.function.name, tc
                calls[tc.index] = [tc.id, tc.type, tc.function.name, tc.function.arguments or ""]
            else:
                assert tc.id is None and tc.function.name is None
                calls[tc.index][3] += tc.function.arguments or ""
        finish = choice.finish_reason or finish
    return {"reasoning": "".join(reasoning) or None, "content": "".join(content) or None,
            "calls": [tuple(calls[i]) for i in sorted(calls)], "finish": finish}


def without_ids(result):
    return dict(result, calls=[c[1:] for c in result["calls"]])


WANT_CALLS = [("function", "get_weather", json.dumps({"city": "Zürich"}, ensure_ascii=False)),
              ("function", "search", json.dumps({"q": "a <tool_call> [TOOL_CALLS] inside", "n": [1, {"a": None}]}))]


def test_tool_calls_and_reasoning_not_streamed(client):
    got = one_shot(client, SAYS)
    assert without_ids(got) == {"reasoning": "The user wants weather; call the tool.",
                                "content": "Let me check, 👋.", "calls": WANT_CALLS, "finish": "tool_calls"}
    assert all(c[0].startswith("call_") for c in got["calls"]) and len({c[0] for c in got["calls"]}) == 2


def test_streamed_equals_not_streamed(client):
    assert without_ids(streamed(client, SAYS)) == without_ids(one_shot(client, SAYS))


@pytest.mark.parametrize("says", [
    "No tools needed, plain answer.",
    '<think>short</think><tool_call>{"name": "search", "arguments": {}}</tool_call>',
    'text <tool_call>{"name": "nope", "arguments": {}}</tool_call>',               # undeclared: dropped, as SGLang
    'text <tool_call>{"name": "search", "arguments": {bad json}}</tool_call>',     # malformed: all content, as SGLang
    "<think>thinking, never closed",
])
def test_more_outputs_streamed_equal_not_streamed(client, says):
    assert without_ids(streamed(client, says)) == without_ids(one_shot(client, says))


def test_a_call_cut_off_at_length(srv, client):
    status, body = srv.post("/tokenize", {"model": "qwen", "prompt": SAYS + END})
    assert status == 200
    n = body["count"] - 12  # the output stops inside the second call
    cut = one_shot(client, SAYS, max_tokens=n)
    assert cut["finish"] == "length" and without_ids(cut) == without_ids(streamed(client, SAYS, max_tokens=n))
    # hermes, as SGLang: an unreadable (cut) block makes the whole answer content, nothing is lost
    assert cut["calls"] == [] and cut["content"].startswith("Let me check, 👋.\n<tool_call>")


def test_tool_choice_none_leaves_the_text_alone(client):
    got = one_shot(client, SAYS, tool_choice="none")
    assert got["calls"] == [] and "<tool_call>" in got["content"] and got["finish"] == "stop"
    assert got["reasoning"] == "The user wants weather; call the tool."


def test_separate_reasoning_false_and_thinking_off(client):
    got = one_shot(client, SAYS, extra_body={"separate_reasoning": False})
    assert got["reasoning"] is None and got["content"] == "<think>The user wants weather; call the tool.</think>Let me check, 👋."
    assert [c[2] for c in got["calls"]] == ["get_weather", "search"]
    thinking_off = one_shot(client, "thoughts</think>answer",
                            extra_body={"chat_template_kwargs": {"enable_thinking": False}})
    assert thinking_off["reasoning"] is None and thinking_off["content"] == "thoughts</think>answer"
    assert one_shot(client, "thoughts</think>answer")["reasoning"] == "thoughts"


def test_stream_reasoning_false_sends_the_reasoning_in_one_piece(client):
    pieces = []
    for chunk in ask(client, SAYS, stream=True, extra_body={"stream_reasoning": False}):
        r = getattr(chunk.choices[0].delta, "reasoning_content", None)
        if r:
            pieces.append(r)
    assert pieces == ["The user wants weather; call the tool."]


@pytest.mark.parametrize("choice", ["required", {"type": "function", "function": {"name": "search"}}])
def test_required_tool_choice_is_a_clear_400(client, choice):
    with pytest.raises(openai.BadRequestError) as e:
        one_shot(client, SAYS, tool_choice=choice)
    assert "tool_choice" in str(e.value)


def test_model_without_parsers_and_request_without_tools_pass_text_through(client):
    assert one_shot(client, SAYS, model="plain")["content"] == SAYS
    got = one_shot(client, SAYS, tools=openai.NOT_GIVEN)
    assert got["calls"] == [] and got["content"].startswith("Let me check") and got["finish"] == "stop"


def test_a_lone_surrogate_in_the_calls_json_reaches_the_client_streamed_and_not(srv, client):
    """Issue 23, finding 5a: the model writes ``"\\ud800"`` in a call's JSON; the parser
    decodes it as SGLang does (a lone surrogate in ``arguments``) and the reply
    carries it as a JSON escape, where the connection used to close unanswered."""
    says = '<think>t</think>Look: <tool_call>{"name": "search", "arguments": {"q": "a\\ud800b"}}</tool_call>'
    want = {"reasoning": "t", "content": "Look:", "finish": "tool_calls",
            "calls": [("function", "search", '{"q": "a\ud800b"}')]}
    assert without_ids(one_shot(client, says)) == want
    assert without_ids(streamed(client, says)) == want
    assert srv.get("/health")[0] == 200
