"""A tool-calling conversation as the openai client sends it (tool-call arguments as
JSON strings, ``content: null``), through Qwen 3's template: with the echo engine
the rendered prompt comes back, and it is jinja2's rendering of the conversation in
the shape templates read (arguments as objects, content "")."""

from __future__ import annotations

import json

import pytest

from chat_models import jinja2_render, model_dir, shared_template, special_tokens_of
from support import import_real

openai = import_real("openai")

pytestmark = pytest.mark.fast

TOOLS = [{"type": "function", "function": {"name": "get_weather", "description": "Weather in a city",
                                           "parameters": {"type": "object",
                                                          "properties": {"city": {"type": "string"}}}}}]
ARGS = {"city": "Paris", "unit": "°C"}


def conversation(arguments, content):
    return [{"role": "system", "content": "Answer with tools."},
            {"role": "user", "content": "Weather in Paris?"},
            {"role": "assistant", "content": content, "tool_calls": [
                {"id": "call_1", "type": "function", "function": {"name": "get_weather", "arguments": arguments}}]},
            {"role": "tool", "tool_call_id": "call_1", "content": "22"},
            {"role": "user", "content": "Thanks. And tomorrow?"}]


@pytest.fixture(scope="module")
def qwen3():
    return shared_template("qwen3")


@pytest.fixture(scope="module")
def srv(server_factory, tmp_path_factory, qwen3):
    return server_factory("--model", f"qwen3={model_dir(tmp_path_factory.mktemp('tools'), 'qwen3', qwen3)}")


@pytest.mark.parametrize("thinking", [True, False])
def test_tool_conversation_renders_as_jinja2_does(srv, qwen3, thinking):
    client = openai.OpenAI(base_url=f"http://{srv.host}:{srv.port}/v1", api_key="none", max_retries=0, timeout=60)
    wire = conversation(json.dumps(ARGS), None)
    extra = {"chat_template_kwargs": {"enable_thinking": thinking}}
    count = srv.post("/tokenize", {"messages": wire, "tools": TOOLS, **extra})[1]["count"]
    resp = client.chat.completions.create(model="qwen3", messages=wire, tools=TOOLS, max_tokens=count,
                                          extra_body={"skip_special_tokens": False, "ignore_eos": True, **extra})
    expected = jinja2_render(qwen3["chat_template"], messages=conversation(ARGS, ""), tools=TOOLS, documents=None,
                             add_generation_prompt=True, enable_thinking=thinking, **special_tokens_of(qwen3))
    assert resp.choices[0].message.content == expected
    assert '"name": "get_weather"' in expected and '"unit": "°C"' in expected  # the call, arguments as an object
    assert ("<think>" in expected.rsplit("<|im_start|>assistant", 1)[1]) is not thinking  # enable_thinking reached it
