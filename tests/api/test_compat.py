"""mtok as a drop-in for SGLang's and OpenAI's clients: the requests they send,
logprobs, ``n``, prefill-only scoring, the extra routes.

SGLang's own clients (``bench_serving``, the frontend language) are in
``test_compat_clients.py``; this file needs nothing but the standard library
and the ``openai`` package.
"""

from __future__ import annotations

import json
import math
import os
import re
import threading

import pytest

from support import ROOT, import_real, parse_sse, wait_for
from mtok.engines.echo import echo_logprob

pytestmark = pytest.mark.fast

LN2 = math.log(2.0)
ECHO_CHAT = os.path.join(ROOT, "examples", "chat_template_echo_last.jinja")


@pytest.fixture(scope="module", params=[1, 2], ids=["N1", "N2"])
def srv(request, server_factory):
    return server_factory("--tokenizer-worker-num", str(request.param), "--chat-template", ECHO_CHAT)


def ids_of(srv, text):
    return srv.post("/tokenize", {"prompt": text})[1]["tokens"]


def token_text(srv, tid):
    return srv.post("/detokenize", {"tokens": [tid]})[1]["text"]


def vocab(srv):
    return srv.get("/get_model_info")[1]["vocab_size"]


# -- what SGLang's clients send ------------------------------------------------------
def test_bench_serving_payload_with_its_defaults(srv):
    """bench_serving --backend sglang always sends these, at these values."""
    body = {"text": "warm up", "sampling_params": {"temperature": 0.0, "max_new_tokens": 4, "ignore_eos": True},
            "stream": False, "lora_path": None, "return_logprob": False, "return_routed_experts": False,
            "logprob_start_len": -1}
    status, resp = srv.post("/generate", body)
    assert status == 200 and resp["meta_info"]["completion_tokens"] == 4, resp


def test_frontend_language_shapes(srv):
    """sgl.gen sends stop_regex: [] and its constraint fields at null; sgl.select
    scores choices with return_logprob and max_new_tokens: 0."""
    gen = {"text": "Hello there", "sampling_params": {
        "max_new_tokens": 2, "stop": [], "stop_token_ids": [], "stop_regex": [], "temperature": 1.0,
        "top_p": 1.0, "top_k": -1, "min_p": 0.0, "frequency_penalty": 0.0, "presence_penalty": 0.0,
        "ignore_eos": False, "regex": None, "json_schema": None, "ebnf": None, "n": 1,
        "no_stop_trim": False, "spaces_between_special_tokens": True, "skip_special_tokens": True}, "stream": False}
    status, resp = srv.post("/generate", gen)
    assert status == 200 and resp["text"] == "Hello there", resp
    prompt = "The answer is yes"
    ids = ids_of(srv, prompt)
    select = {"text": [prompt, prompt], "sampling_params": {"max_new_tokens": 0, "temperature": 0},
              "return_logprob": True, "logprob_start_len": len(ids) - 2, "return_text_in_logprobs": True}
    status, resp = srv.post("/generate", select)
    assert status == 200, resp
    for r in resp:
        meta = r["meta_info"]
        assert r["output_ids"] == [] and meta["completion_tokens"] == 0 and meta["output_token_logprobs"] == []
        assert [t[1] for t in meta["input_token_logprobs"]] == ids[-2:]
        assert all(t[0] == pytest.approx(-LN2) for t in meta["input_token_logprobs"])


def test_constraints_are_refused_not_dropped(srv):
    for sp in ({"regex": "[0-9]+"}, {"json_schema": "{}"}, {"ebnf": "root ::= \"a\""}):
        status, resp = srv.post("/generate", {"text": "abc", "sampling_params": sp})
        assert status == 400 and resp["error"]["param"] == next(iter(sp)), resp
        assert "capability" in resp["error"]["message"]
    status, resp = srv.post("/v1/completions", {"prompt": "abc", "max_tokens": 2, "lora_path": "adapter"})
    assert status == 400 and resp["error"]["param"] == "lora_path", resp


def test_any_model_name_is_served_with_one_model(srv):
    assert srv.post("/v1/completions", {"model": "default", "prompt": "x", "max_tokens": 1})[0] == 200
    assert srv.post("/generate", {"model": "whatever", "text": "x"})[0] == 200
    status, card = srv.get("/v1/models/mtok-default")
    assert status == 200 and card["id"] == "mtok-default" and card["object"] == "model"
    assert srv.get("/v1/models/default")[0] == 404  # a card is looked up by its exact name (SGLang's 404)


# -- logprobs --------------------------------------------------------------------------
def test_native_logprobs_follow_the_echo_formula(srv):
    prompt = "Logprobs, exactly."
    ids, v = ids_of(srv, prompt), vocab(srv)
    status, resp = srv.post("/generate", {
        "text": prompt, "sampling_params": {"max_new_tokens": 3}, "return_logprob": True, "logprob_start_len": 0,
        "top_logprobs_num": 2, "token_ids_logprob": [5, 7], "return_text_in_logprobs": True})
    assert status == 200, resp
    meta = resp["meta_info"]
    first, *rest = meta["input_token_logprobs"]
    assert first == [None, ids[0], token_text(srv, ids[0])] and meta["input_top_logprobs"][0] is None
    assert [t[1] for t in rest] == ids[1:] and all(t[0] == pytest.approx(-LN2) for t in rest)
    assert [t[1] for t in meta["output_token_logprobs"]] == resp["output_ids"] == ids[:3]
    for (lp, tid, text), top, by_id in zip(meta["output_token_logprobs"], meta["output_top_logprobs"],
                                           meta["output_token_ids_logprobs"]):
        assert lp == pytest.approx(-LN2) and text == token_text(srv, tid)
        assert [(t[1], round(t[0], 9)) for t in top] == [(tid, round(-LN2, 9)), ((tid + 1) % v, round(-2 * LN2, 9))]
        assert [t[1] for t in by_id] == [5, 7]
        assert [t[0] for t in by_id] == pytest.approx([echo_logprob(tid, 5, v), echo_logprob(tid, 7, v)])
    status, resp = srv.post("/generate", {"text": prompt, "sampling_params": {"max_new_tokens": 2},
                                          "return_logprob": True})
    meta = resp["meta_info"]  # the defaults: no prompt logprobs, no texts
    assert meta["input_token_logprobs"] == [] and [t[2] for t in meta["output_token_logprobs"]] == [None, None]


def test_streamed_logprobs_are_cumulative_like_the_text(srv):
    body = {"text": "stream my logprobs", "sampling_params": {"max_new_tokens": 5}, "return_logprob": True,
            "stream": True}
    events = [e for e in srv.stream("/generate", body) if e != "[DONE]"]
    whole = srv.post("/generate", dict(body, stream=False))[1]
    last = events[-1]
    assert last["text"] == whole["text"] and last["output_ids"] == whole["output_ids"]
    assert last["meta_info"]["output_token_logprobs"] == whole["meta_info"]["output_token_logprobs"]
    for e in events:
        assert len(e["meta_info"]["output_token_logprobs"]) == len(e["output_ids"])


def test_openai_completions_logprobs_echo_and_n(srv):
    openai = import_real("openai")
    client = openai.OpenAI(base_url=f"http://{srv.host}:{srv.port}/v1", api_key="x", max_retries=0, timeout=30)
    prompt = "Echo and score"
    ids = ids_of(srv, prompt)
    resp = client.completions.create(model="m", prompt=prompt, max_tokens=len(ids), logprobs=2, echo=True, n=2)
    assert [c.index for c in resp.choices] == [0, 1]
    for c in resp.choices:
        lp = c.logprobs
        assert c.text == prompt + prompt and lp.token_logprobs[0] is None and lp.top_logprobs[0] is None
        assert len(lp.tokens) == 2 * len(ids) and "".join(lp.tokens) == c.text
        assert lp.text_offset == [sum(len(t) for t in lp.tokens[:i]) for i in range(len(lp.tokens))]
        assert all(x == pytest.approx(-LN2) for x in lp.token_logprobs[1:])
        assert all(len(t) >= 2 for t in lp.top_logprobs[1:])
    assert resp.usage.completion_tokens == 2 * len(ids)
    chunks = list(client.completions.create(model="m", prompt=prompt, max_tokens=len(ids), logprobs=1, n=2,
                                            stream=True))
    for i in (0, 1):
        mine = [c.choices[0] for c in chunks if c.choices and c.choices[0].index == i]
        assert "".join(c.text for c in mine) == prompt
        assert sum(len(c.logprobs.tokens) for c in mine if c.logprobs) == len(ids)
        assert mine[-1].finish_reason == "length"
    assert resp.id and srv.post("/v1/completions", {"prompt": "x", "max_tokens": 1, "suffix": "y"})[0] == 400
    zero = client.completions.create(model="m", prompt=prompt, max_tokens=2, logprobs=0).choices[0].logprobs
    assert zero.top_logprobs == [{t: x} for t, x in zip(zero.tokens, zero.token_logprobs)]  # the sampled token


def test_openai_chat_logprobs_and_n(srv):
    openai = import_real("openai")
    client = openai.OpenAI(base_url=f"http://{srv.host}:{srv.port}/v1", api_key="x", max_retries=0, timeout=30)
    text = "Chat logprobs"
    n_tok = len(ids_of(srv, text))
    msgs = [{"role": "user", "content": text}]
    resp = client.chat.completions.create(model="m", messages=msgs, max_tokens=n_tok, logprobs=True, top_logprobs=2,
                                          n=2)
    assert [c.index for c in resp.choices] == [0, 1]
    for c in resp.choices:
        content = c.logprobs.content
        assert "".join(t.token for t in content) == c.message.content == text
        assert all(t.logprob == pytest.approx(-LN2) and len(t.top_logprobs) == 2 for t in content)
        assert all(bytes(t.bytes).decode() == t.token for t in content)
    chunks = list(client.chat.completions.create(model="m", messages=msgs, max_tokens=n_tok, logprobs=True, n=2,
                                                 stream=True))
    for i in (0, 1):
        mine = [c.choices[0] for c in chunks if c.choices and c.choices[0].index == i]
        assert "".join(c.delta.content or "" for c in mine) == text
        assert "".join(t.token for c in mine if c.logprobs for t in c.logprobs.content) == text


# -- n -----------------------------------------------------------------------------------
def test_n_on_generate(srv):
    status, resp = srv.post("/generate", {"text": "twice", "sampling_params": {"max_new_tokens": 2, "n": 3}})
    assert status == 200 and len(resp) == 3 and len({r["meta_info"]["id"] for r in resp}) == 3
    events = [e for e in srv.stream("/generate", {"text": ["a b", "c d"], "stream": True,
                                                  "sampling_params": {"max_new_tokens": 2, "n": 2}}) if e != "[DONE]"]
    finals = {e["index"]: e for e in events if e["meta_info"]["finish_reason"]}
    assert sorted(finals) == [0, 1, 2, 3] and finals[0]["text"] == finals[1]["text"] != finals[2]["text"]


# -- routes -------------------------------------------------------------------------------
def test_probe_routes_and_put(srv):
    assert srv.get("/ready") == (200, {"status": "ready"})
    assert srv.get("/ping")[0] == 200 and srv.get("/")[1]["name"] == "mtok"
    status, _, resp = srv.request("PUT", "/generate", {"text": "put it", "sampling_params": {"max_new_tokens": 2}})
    assert status == 200 and resp["text"] == "put it"
    assert srv.request("PUT", "/encode", {"text": "put it"})[0] == 200
    status, _, resp = srv.request("POST", "/flush_cache", b"")
    assert status == 200 and resp.startswith(b"Cache flushed")


def test_abort_by_completion_id_and_abort_all(server_factory):
    slow = server_factory("--engine-step-delay", "0.05")
    conn = slow.conn()
    conn.request("POST", "/v1/completions", body=json.dumps({"prompt": ["slow " * 50, "slower " * 50],
                                                              "max_tokens": 200, "stream": True, "n": 2}),
                 headers={"Content-Type": "application/json"})
    resp = conn.getresponse()
    events = parse_sse(resp)
    first = next(events)
    status, body = slow.post("/abort_request", {"rid": first["id"]})
    assert status == 200 and body["aborted"] is True
    rest = [e for e in events if e != "[DONE]"]
    reasons = [c["finish_reason"] for e in [first] + rest for c in e["choices"] if c["finish_reason"]]
    assert reasons == ["abort"] * 4  # two prompts, two choices each
    results = []
    t = threading.Thread(target=lambda: results.append(slow.post("/generate", {
        "text": ["x y", "z w"], "sampling_params": {"max_new_tokens": 500}})))
    t.start()
    wait_for(lambda: slow.info()["scheduler"]["num_running"] == 2, what="two requests running")
    assert slow.post("/abort_request", {"abort_all": True}) == (200, {"aborted": 2})
    t.join(30)
    status, body = results[0]
    assert status == 200 and [r["meta_info"]["finish_reason"]["type"] for r in body] == ["abort", "abort"]


def test_api_key_spares_probes_and_cors(server_factory):
    srv = server_factory("--api-key", "sk-x", "--cors-allow-origins", "http://app.example")
    for path in ("/health", "/ready", "/ping", "/metrics", "/health_generate"):
        assert srv.get(path)[0] == 200, path
    assert srv.get("/v1/models")[0] == 401
    status, headers, _ = srv.request("OPTIONS", "/v1/completions", headers={
        "Origin": "http://app.example", "Access-Control-Request-Method": "POST",
        "Access-Control-Request-Headers": "authorization, content-type"})
    assert status == 204 and headers["access-control-allow-origin"] == "http://app.example"
    assert "POST" in headers["access-control-allow-methods"]
    assert "authorization" in headers["access-control-allow-headers"]
    status, headers, _ = srv.request("GET", "/v1/models", headers={"Origin": "http://app.example",
                                                                  "Authorization": "Bearer sk-x"})
    assert status == 200 and headers["access-control-allow-origin"] == "http://app.example"
    _, headers, _ = srv.request("GET", "/v1/models", headers={"Origin": "http://evil.example",
                                                             "Authorization": "Bearer sk-x"})
    assert "access-control-allow-origin" not in headers


# -- streaming sizes (issue 16, finding 14) -------------------------------------------------
def test_incremental_streaming_output(server_factory):
    srv = server_factory("--incremental-streaming-output")
    body = {"text": "one two three four five", "stream": True, "return_logprob": True,
            "sampling_params": {"max_new_tokens": 40}}
    events = [e for e in srv.stream("/generate", body) if e != "[DONE]"]
    whole = srv.post("/generate", dict(body, stream=False))[1]
    assert "".join(e["text"] for e in events) == whole["text"]
    assert [t for e in events for t in e["output_ids"]] == whole["output_ids"]
    assert [x for e in events for x in e["meta_info"]["output_token_logprobs"]] == \
        whole["meta_info"]["output_token_logprobs"]


# -- issue 16, finding 11 ------------------------------------------------------------------
def test_huge_numbers_are_short_400s(srv):
    huge = 10 ** 4000
    for path, body, param in (
            ("/generate", {"text": "a", "sampling_params": {"temperature": huge}}, "sampling_params.temperature"),
            ("/generate", {"text": "a", "sampling_params": {"frequency_penalty": -huge}},
             "sampling_params.frequency_penalty"),
            ("/generate", {"text": "a", "sampling_params": {"max_new_tokens": huge}}, "max_new_tokens"),
            ("/generate", {"input_ids": [huge]}, "input_ids"),
            ("/v1/completions", {"prompt": "a", "top_p": huge}, "top_p"),
            ("/v1/completions", {"prompt": "a", "repetition_penalty": huge}, "repetition_penalty"),
            ("/v1/completions", {"prompt": "a", "max_tokens": 4, "min_tokens": 5}, "min_new_tokens"),
            ("/v1/chat/completions", {"messages": [{"role": "user", "content": "a"}], "min_p": huge}, "min_p"),
    ):
        status, resp = srv.post(path, body)
        assert status == 400 and resp["error"]["param"] == param, (body, resp)
        message = resp["error"]["message"]
        # the value is cut short, never echoed whole (SGLang's context sentence alone is ~300 characters)
        assert len(message) < 400 and not re.search(r"\d{41}", message), message[:400]


def test_prompt_scoring_with_echo_and_no_tokens(srv):
    prompt = "score this prompt"
    ids = ids_of(srv, prompt)
    status, resp = srv.post("/v1/completions", {"prompt": prompt, "max_tokens": 0, "echo": True, "logprobs": 1})
    assert status == 200, resp
    choice = resp["choices"][0]
    assert choice["text"] == prompt and len(choice["logprobs"]["tokens"]) == len(ids)
    assert choice["logprobs"]["token_logprobs"][0] is None and resp["usage"]["completion_tokens"] == 0


def test_odd_bytes_in_query_and_headers_are_not_500s(srv):
    conn = srv.conn()
    conn.putrequest("GET", "/get_model_info?model=%ED%A0%80%FF")
    conn.putheader("X-Odd", b"\xed\xa0\x80\xff")
    conn.putheader("Authorization", b"Bearer \xed\xa0\x80")
    conn.endheaders()
    resp = conn.getresponse()
    assert resp.status in (200, 400, 404), resp.read()
    resp.read()
    assert srv.post("/generate", {"text": "still here"})[0] == 200


def test_an_engine_without_capabilities_refuses_clearly(server_factory):
    srv = server_factory("--engine", os.path.join(ROOT, "examples", "custom_engine.py") + ":BigramEngine")
    status, _, resp = srv.request("POST", "/flush_cache", b"")
    assert status == 400 and "flush_cache" in resp["error"]["message"], resp
    for body, param in (({"return_logprob": True}, "return_logprob"),
                        ({"sampling_params": {"max_new_tokens": 0}}, "max_new_tokens"),
                        ({"sampling_params": {"n": 2}}, "n")):
        status, resp = srv.post("/generate", dict(body, text="the cat"))
        assert status == 400 and resp["error"]["param"] == param, resp
        assert "BigramEngine" in resp["error"]["message"]
    assert srv.post("/generate", {"text": "the cat", "sampling_params": {"max_new_tokens": 2}})[0] == 200


def test_client_rids_on_openai_routes(srv):
    status, resp = srv.post("/v1/completions", {"prompt": "x", "max_tokens": 1, "rid": "my-cmpl-1"})
    assert status == 200 and resp["id"] == "my-cmpl-1"
    status, resp = srv.post("/v1/chat/completions", {"messages": [{"role": "user", "content": "x"}], "max_tokens": 1,
                                                     "rid": "my-chat-1"})
    assert status == 200 and resp["id"] == "chatcmpl-my-chat-1"
