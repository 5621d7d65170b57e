"""/v1/chat/completions end to end: the official openai client, streamed and not,
N = 1 and 2 (one with each template backend), several models with their own templates.  With the echo engine, a
request whose max_tokens is the prompt's length gets the rendered prompt back,
which is compared with jinja2's rendering of the same template and context."""

from __future__ import annotations

import json
import os
import random

import pytest

from chat_models import jinja2_render, model_dir, shared_template, special_tokens_of
from support import ROOT, Server, import_real
from mtok.tokenizer import DEFAULT_TOKENIZER_DIR

openai = import_real("openai")

pytestmark = pytest.mark.fast

ECHO_LAST = os.path.join(ROOT, "examples", "chat_template_echo_last.jinja")
CONTEXT = 2048
CONVERSATION = [{"role": "system", "content": "You are terse."}, {"role": "user", "content": "2+2?"},
                {"role": "assistant", "content": "4"}, {"role": "user", "content": "And 3+3, in wörds? 👋"}]


DUMP_TEMPLATE = ("{% for m in messages %}{{ m.role }}:{{ m.content | tojson if m.content is defined }}"
                 "{{ m.tool_calls | tojson if m.tool_calls is defined }}{{ m.reasoning_content }}{% endfor %}"
                 "{{ tools | tojson }}{{ documents | tojson }}")


@pytest.fixture(scope="module")
def configs():
    return {name: shared_template(name) for name in ("llama3", "gemma3")}


@pytest.fixture(scope="module", params=[(1, "auto"), (2, "python")], ids=["N1-auto", "N2-python"])
def srv(request, server_factory, tmp_path_factory, configs):
    workers, backend = request.param
    base = tmp_path_factory.mktemp("chat")
    kw_template = base / "kw.jinja"
    kw_template.write_text("thinking={{ enable_thinking }} tools={{ tools | length if tools else 0 }} "
                           "choice={{ tool_choice }}|{{ messages[-1].content }}")
    dump_template = base / "dump.jinja"
    dump_template.write_text(DUMP_TEMPLATE)
    return server_factory(
        "--tokenizer-worker-num", str(workers), "--chat-template-backend", backend, "--context-length", str(CONTEXT),
        "--model", f"dump={DEFAULT_TOKENIZER_DIR}", "--chat-template", f"dump={dump_template}",
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
    assert first["choices"][0]["delta"] == {"role": "assistant", "content": "", "reasoning_content": None}
    assert all(set(e["choices"][0]["delta"]) == {"content", "reasoning_content"} for e in middle)
    assert "".join(e["choices"][0]["delta"]["content"] for e in middle) == "one two"
    assert finish["choices"][0]["delta"] == {"reasoning_content": None}  # SGLang sends the key on every delta
    assert finish["choices"][0]["finish_reason"] == "length"
    assert usage["choices"] == [] and usage["usage"]["total_tokens"] == 4
    assert all(e["usage"] is None for e in events[:-2])
    plain = srv.stream("/v1/chat/completions", {"model": "echo", "messages": [{"role": "user", "content": "x"}],
                                                "max_tokens": 1, "stream": True})
    assert [e == "[DONE]" or "usage" in e for e in plain] == [False, False, False, True]


def test_concurrent_streams_lose_no_text(srv):
    """Many streams at once, so that the receiver thread writes while the chunks are built."""
    import threading
    texts = [f"stream {i}: " + " ".join(f"w{i}x{j}" for j in range(40)) for i in range(12)]
    results = {}

    def go(i):
        msgs = [{"role": "user", "content": texts[i]}]
        n = prompt_count(srv, "echo", msgs)
        events = srv.stream("/v1/chat/completions", {"model": "echo", "messages": msgs, "max_tokens": n,
                                                     "stream": True})
        results[i] = "".join(e["choices"][0]["delta"].get("content", "") for e in events[:-1])

    for _ in range(3):
        threads = [threading.Thread(target=go, args=(i,)) for i in range(len(texts))]
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
        assert [results.get(i) for i in range(len(texts))] == texts
        results.clear()


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
    assert srv.post("/v1/tokenize", {"model": "llama", "messages": msgs, "bogus": 1})[1] == as_chat  # ignored


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
                        ({"messages": [{"role": "user", "content": "x"}], "n": 0}, "n"),
                        ({"messages": [{"role": "user", "content": "x"}], "logprobs": 3}, "logprobs"),
                        ({"messages": [{"role": "user", "content": "x"}], "top_logprobs": 3}, "top_logprobs"),
                        ({"messages": [{"role": "user", "content": "x"}], "max_tokens": 0}, "max_tokens"),
                        ({"messages": [{"role": "user", "content": "x"}], "max_tokens": CONTEXT}, "max_new_tokens"),
                        ({"messages": [{"role": "user", "content": "x"}], "tool_choice": "maybe"}, "tool_choice"),
                        ({"messages": [{"role": "user", "content": "x"}], "response_format": {"type": "json_object"}},
                         "response_format"),  # the echo engine has no constrained decoding (mtok.fields)
                        ({"messages": [{"role": "user", "content": "x"}], "image_data": "x.png"}, "image_data")):
        status, resp = srv.post("/v1/chat/completions", dict(body, model="echo"))
        assert status == 400 and resp["error"]["param"] == param, (body, resp)
    status, resp = srv.post("/v1/chat/completions", {"model": "echo", "messages": [{"role": "system", "content": "x"}]})
    assert status == 400 and "empty prompt" in resp["error"]["message"]  # echo_last renders no user message: ""
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


def fuzz_value(r, depth=0):
    choices = [None, True, 0, -1, 2.5, "", "x", "<|endoftext|>", "\u0000", "{\"a\": 1}", "[1]", "{bad"]
    if depth < 3 and r.random() < 0.4:
        if r.random() < 0.5:
            return [fuzz_value(r, depth + 1) for _ in range(r.randint(0, 3))]
        keys = ["role", "content", "type", "text", "function", "name", "arguments", "tool_calls", "image_url"]
        return {r.choice(keys): fuzz_value(r, depth + 1) for _ in range(r.randint(0, 3))}
    return r.choice(choices)


def fuzz_message(r):
    broken = r.random() < 0.1  # most messages are well formed, so that the rest of the body gets looked at
    msg = {"role": r.choice(["robot", None, 1] if broken else ["system", "developer", "user", "assistant", "tool"]),
           "content": r.choice(["hi", None, [], [{"type": "text", "text": "a"}, {"type": "input_text", "text": "b"}]]
                               if r.random() < 0.9 else [[{"type": "image_url"}], [{"type": "text"}], fuzz_value(r)])}
    if r.random() < 0.3:
        msg["tool_calls"] = r.choice([[{"id": "c", "type": "function", "function": {
            "name": "f", "arguments": r.choice(["{}", "{\"x\": [1, 2]}", "[]", "nope", {"x": 1}, None, 5])}}],
            fuzz_value(r)] if broken else [[{"id": "c", "type": "function", "function": {"name": "g", "arguments": "{}"}}]])
    if r.random() < 0.2:
        msg[r.choice(["reasoning_content", "thinking", "reasoning", "name", "tool_call_id", "extra"])] = fuzz_value(r)
    return msg


def fuzz_body(r):
    body = {"model": r.choice(["dump", "dump", "gemma", "llama", "kw", "echo", "plain"]),
            "max_tokens": r.randint(1, 4), "messages": [fuzz_message(r) for _ in range(r.randint(1, 3))]}
    for key in r.sample(["tools", "documents", "chat_template_kwargs", "tool_choice", "continue_final_message",
                         "add_generation_prompt", "reasoning_effort", "stream", "stop", "response_format"],
                        r.randint(0, 3)):
        good = {"tools": [{"type": "function", "function": {"name": "f"}}], "documents": [{"text": "d"}],
                "chat_template_kwargs": {"enable_thinking": 1}, "tool_choice": "auto", "continue_final_message": True,
                "add_generation_prompt": False, "reasoning_effort": "low", "stream": True, "stop": ["x"],
                "response_format": {"type": "text"}}
        body[key] = fuzz_value(r) if r.random() < 0.3 else good[key]
    return body


@pytest.mark.slow
def test_fuzzed_chat_requests_get_200_or_400(srv):
    """Near-valid chat bodies with something broken: a 200 or a 4xx with a JSON error, never a 5xx."""
    r = random.Random(1234)
    outcomes = {}
    for i in range(300):
        body = fuzz_body(r)
        path = "/v1/chat/completions" if i % 4 else "/tokenize"
        if path == "/tokenize":
            body = {k: v for k, v in body.items() if k in ("model", "messages", "tools", "documents",
                                                          "chat_template_kwargs", "continue_final_message",
                                                          "add_generation_prompt")}
        status, _, resp = srv.request("POST", path, body)
        assert status in (200, 400), (body, status, resp)
        if status == 400:
            assert isinstance(resp["error"]["message"], str) and resp["error"]["message"], resp
        outcomes[status] = outcomes.get(status, 0) + 1
    assert outcomes.get(200, 0) > 20 and outcomes.get(400, 0) > 20, outcomes
    assert srv.get("/health")[0] == 200


def test_a_streamed_request_that_cannot_render_is_an_http_400(srv):
    """The template runs before the stream starts, so its failure is a status, not an event."""
    status, _, resp = srv.request("POST", "/v1/chat/completions", {
        "model": "gemma", "messages": [{"role": "user", "content": "a"}] * 2, "stream": True, "max_tokens": 1})
    assert status == 400 and "Conversation roles must alternate" in resp["error"]["message"]
