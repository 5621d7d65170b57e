"""/v1/chat/completions end to end: the official openai client, streamed and not,
N = 1 and 2, several models with their own templates.  With the echo engine, a
request whose max_tokens is the prompt's length gets the rendered prompt back,
which is compared with jinja2's rendering of the same template and context."""

from __future__ import annotations

import json
import os

import pytest

from chat_models import jinja2_render, model_dir, shared_template, special_tokens_of
from conftest import ROOT, Server
from mtok.tokenizer import DEFAULT_TOKENIZER_DIR

openai = pytest.importorskip("openai")

pytestmark = pytest.mark.fast

ECHO_LAST = os.path.join(ROOT, "examples", "chat_template_echo_last.jinja")
CONTEXT = 2048
CONVERSATION = [{"role": "system", "content": "You are terse."}, {"role": "user", "content": "2+2?"},
                {"role": "assistant", "content": "4"}, {"role": "user", "content": "And 3+3, in wörds? 👋"}]


@pytest.fixture(scope="module")
def configs():
    return {name: shared_template(name) for name in ("llama3", "gemma3")}


@pytest.fixture(scope="module", params=[1, 2], ids=["N1", "N2"])
def srv(request, server_factory, tmp_path_factory, configs):
    base = tmp_path_factory.mktemp("chat")
    kw_template = base / "kw.jinja"
    kw_template.write_text("thinking={{ enable_thinking }} tools={{ tools | length if tools else 0 }} "
                           "choice={{ tool_choice }}|{{ messages[-1].content }}")
    return server_factory(
        "--tokenizer-worker-num", str(request.param), "--context-length", str(CONTEXT),
        "--model", f"llama={model_dir(base, 'llama', configs['llama3'])}",
        "--model", f"gemma={model_dir(base, 'gemma', configs['gemma3'])}",
        "--model", f"plain={DEFAULT_TOKENIZER_DIR}",
        "--model", f"echo={DEFAULT_TOKENIZER_DIR}",
        "--model", f"kw={DEFAULT_TOKENIZER_DIR}",
        "--chat-template", f"echo={ECHO_LAST}", "--chat-template", f"kw={kw_template}",
    )


@pytest.fixture(scope="module")
def client(srv):
    return openai.OpenAI(base_url=f"http://{srv.host}:{srv.port}/v1", api_key="none", max_retries=0, timeout=60)


ECHO_ALL = {"skip_special_tokens": False, "ignore_eos": True}  # the whole prompt comes back, special tokens too


def reference(configs, name, messages, **extra):
    """jinja2's rendering of the model's template, in apply_chat_template's context."""
    config = configs[name]
    ctx = dict(special_tokens_of(config), messages=messages, tools=None, documents=None, add_generation_prompt=True)
    ctx.update(extra)
    return jinja2_render(config["chat_template"], **ctx)


def prompt_count(srv, model, messages, **extra):
    status, body = srv.post("/tokenize", dict({"model": model, "messages": messages}, **extra))
    assert status == 200, body
    return body["count"]


@pytest.mark.parametrize("model,name", [("llama", "llama3"), ("gemma", "gemma3")])
def test_echo_returns_the_rendered_prompt(client, srv, configs, model, name):
    n = prompt_count(srv, model, CONVERSATION[1:])
    resp = client.chat.completions.create(model=model, messages=CONVERSATION[1:], max_tokens=n,
                                          extra_body=ECHO_ALL)
    choice = resp.choices[0]
    assert choice.message.role == "assistant" and choice.finish_reason == "length"
    assert choice.message.content == reference(configs, name, CONVERSATION[1:])
    assert resp.object == "chat.completion" and resp.model == model and resp.id.startswith("chatcmpl-")
    assert (resp.usage.prompt_tokens, resp.usage.completion_tokens) == (n, n)


def test_streamed_echo_returns_the_rendered_prompt(client, srv, configs):
    n = prompt_count(srv, "llama", CONVERSATION)
    stream = client.chat.completions.create(model="llama", messages=CONVERSATION, max_completion_tokens=n,
                                            stream=True, stream_options={"include_usage": True},
                                            extra_body=ECHO_ALL)
    chunks = list(stream)
    assert chunks[0].choices[0].delta.role == "assistant"
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == reference(configs, "llama3", CONVERSATION)
    assert [c.choices[0].finish_reason for c in chunks if c.choices][-1] == "length"
    assert chunks[-1].choices == [] and chunks[-1].usage.completion_tokens == n
    assert len({c.id for c in chunks}) == 1 and all(c.object == "chat.completion.chunk" for c in chunks)


def test_stream_events_in_openai_order(srv):
    events = srv.stream("/v1/chat/completions", {"model": "echo", "messages": [{"role": "user", "content": "one two"}],
                                                 "max_tokens": 2, "stream": True,
                                                 "stream_options": {"include_usage": True}})
    assert events[-1] == "[DONE]"
    first, *middle, finish, usage, _ = events
    assert first["choices"][0]["delta"] == {"role": "assistant", "content": ""}
    assert all(set(e["choices"][0]["delta"]) == {"content"} for e in middle)
    assert "".join(e["choices"][0]["delta"]["content"] for e in middle) == "one two"
    assert finish["choices"][0]["delta"] == {} and finish["choices"][0]["finish_reason"] == "length"
    assert usage["choices"] == [] and usage["usage"]["total_tokens"] == 4
    assert all(e["usage"] is None for e in events[:-2])
    plain = srv.stream("/v1/chat/completions", {"model": "echo", "messages": [{"role": "user", "content": "x"}],
                                                "max_tokens": 1, "stream": True})
    assert [e == "[DONE]" or "usage" in e for e in plain] == [False, False, False, True]


def test_stop_and_sampling_fields(client):
    resp = client.chat.completions.create(model="echo", messages=[{"role": "user", "content": "alpha beta gamma"}],
                                          max_tokens=20, stop=[" gamma"], temperature=0, top_p=0.5, seed=3,
                                          presence_penalty=0.1, frequency_penalty=0.1,
                                          extra_body={"top_k": 5, "min_p": 0.1, "repetition_penalty": 1.1,
                                                      "ignore_eos": True, "skip_special_tokens": True})
    assert resp.choices[0].message.content == "alpha beta" and resp.choices[0].finish_reason == "stop"


def test_default_max_tokens_fills_the_context(srv):
    status, body = srv.post("/v1/chat/completions", {"model": "echo", "messages": [{"role": "user", "content": "ab"}]})
    assert status == 200, body
    assert body["usage"]["total_tokens"] == CONTEXT and body["choices"][0]["finish_reason"] == "length"


def test_text_parts_as_the_template_wants_them(client, srv, configs):
    parts = [{"role": "user", "content": [{"type": "text", "text": "first"}, {"type": "text", "text": "second"}]}]
    for model, name, seen in (("llama", "llama3", [{"role": "user", "content": "first second"}]),
                              ("gemma", "gemma3", parts)):
        n = prompt_count(srv, model, parts)
        resp = client.chat.completions.create(model=model, messages=parts, max_tokens=n, extra_body=ECHO_ALL)
        assert resp.choices[0].message.content == reference(configs, name, seen)


def test_continue_final_message(srv, configs):
    msgs = [{"role": "user", "content": "Say hi"}, {"role": "assistant", "content": "Hi there"}]
    n = prompt_count(srv, "llama", msgs, continue_final_message=True)
    status, body = srv.post("/v1/chat/completions", {"model": "llama", "messages": msgs, "max_tokens": n,
                                                     "continue_final_message": True, **ECHO_ALL})
    assert status == 200, body
    text = body["choices"][0]["message"]["content"]
    assert text.endswith("Hi there") and text == reference(configs, "llama3", msgs)[:len(text)]


def test_template_kwargs_tools_and_tool_choice_reach_the_template(client):
    tools = [{"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}]
    resp = client.chat.completions.create(model="kw", messages=[{"role": "user", "content": "q"}], max_tokens=64,
                                          tools=tools, tool_choice="auto", stop=["|"],
                                          extra_body={"chat_template_kwargs": {"enable_thinking": False}})
    assert resp.choices[0].message.content == "thinking=False tools=1 choice=auto"


def test_tokenize_messages(srv, configs):
    msgs = CONVERSATION[1:]
    rendered = reference(configs, "llama3", msgs)
    as_text = srv.post("/tokenize", {"model": "llama", "prompt": rendered, "add_special_tokens": False})[1]
    as_chat = srv.post("/tokenize", {"model": "llama", "messages": msgs})[1]
    assert as_chat == as_text
    with_prompt = srv.post("/tokenize", {"model": "gemma", "messages": msgs})[1]
    no_prompt = srv.post("/tokenize", {"model": "gemma", "messages": msgs, "add_generation_prompt": False})[1]
    assert no_prompt["tokens"] == with_prompt["tokens"][:no_prompt["count"]] and no_prompt["count"] < with_prompt["count"]
    assert srv.post("/v1/tokenize", {"model": "llama", "messages": msgs, "bogus": 1})[0] == 400


def test_errors_are_400s_that_name_the_fix(client, srv):
    with pytest.raises(openai.BadRequestError) as e:
        client.chat.completions.create(model="plain", messages=[{"role": "user", "content": "x"}], max_tokens=1)
    assert "--chat-template" in str(e.value)
    with pytest.raises(openai.BadRequestError) as e:  # gemma3's template raises on roles that do not alternate
        client.chat.completions.create(model="gemma", messages=[{"role": "user", "content": "a"}] * 2, max_tokens=1)
    assert "Conversation roles must alternate" in str(e.value)
    image = [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "data:,"}}]}]
    with pytest.raises(openai.BadRequestError) as e:
        client.chat.completions.create(model="gemma", messages=image, max_tokens=1)
    assert "text only" in str(e.value)
    for body, param in (({"messages": []}, "messages"), ({}, "messages"),
                        ({"messages": [{"role": "user", "content": "x"}], "n": 2}, "n"),
                        ({"messages": [{"role": "user", "content": "x"}], "logprobs": True}, "logprobs"),
                        ({"messages": [{"role": "user", "content": "x"}], "max_tokens": 0}, "max_tokens"),
                        ({"messages": [{"role": "user", "content": "x"}], "max_tokens": CONTEXT}, "max_new_tokens"),
                        ({"messages": [{"role": "user", "content": "x"}], "tool_choice": "maybe"}, "tool_choice"),
                        ({"messages": [{"role": "user", "content": "x"}], "response_format": {"type": "json_object"}},
                         "response_format"),
                        ({"messages": [{"role": "user", "content": "x"}], "prompt": "x"}, "prompt")):
        status, resp = srv.post("/v1/chat/completions", dict(body, model="echo"))
        assert status == 400 and resp["error"]["param"] == param, (body, resp)
    assert srv.post("/v1/chat/completions", {"model": "nope", "messages": [{"role": "user", "content": "x"}]})[0] == 404
    assert srv.get("/health")[0] == 200


def test_bad_template_file_stops_the_boot(tmp_path):
    bad = tmp_path / "bad.jinja"
    bad.write_text("{% for x in %}")
    srv = Server("--chat-template", str(bad), expect_ready=False)
    assert srv.proc.wait(60) == 3
    assert "bad.jinja" in srv.stderr()
    missing = Server("--chat-template", str(tmp_path / "nope.jinja"), expect_ready=False)
    assert missing.proc.wait(60) == 2 and "no such file" in missing.stderr()


def test_json_template_file(tmp_path):
    path = tmp_path / "t.json"
    path.write_text(json.dumps("[{{ messages[0].content }}]"))
    srv = Server("--chat-template", str(path))
    try:
        msgs = [{"role": "user", "content": "hey"}]
        n = prompt_count(srv, None, msgs)
        status, body = srv.post("/v1/chat/completions", {"messages": msgs, "max_tokens": n})
        assert status == 200 and body["choices"][0]["message"]["content"] == "[hey]"
    finally:
        srv.stop()
