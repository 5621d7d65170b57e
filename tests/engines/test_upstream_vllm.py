"""``--engine vllm:URL`` against a stand-in answering as vLLM 0.33's token-in/
token-out ``/inference/v1/generate`` does (tests/upstream_standin.py)."""

from __future__ import annotations

import json
import os

import pytest

from support import ROOT, parse_sse, wait_for
from test_upstream_sglang import serving, tokenize
from upstream_standin import VLLMStandIn, lp, prompt_lp

pytestmark = pytest.mark.timeout(180)

ECHO_LAST = os.path.join(ROOT, "examples", "chat_template_echo_last.jinja")


@pytest.fixture(scope="module")
def standin():
    s = VLLMStandIn()
    yield s
    s.stop()


@pytest.fixture(scope="module")
def front(standin):
    with serving("--engine", f"vllm:{standin.url}?max_connections=4&timeout=3", "--tokenizer-worker-num", "2") as s:
        yield s


@pytest.fixture(autouse=True)
def reset(standin):
    standin.behaviour.clear()
    standin.seen.clear()


@pytest.mark.fast
def test_generate_and_fields(front, standin):
    ids = tokenize(front, "Hello there")
    sp = {"max_new_tokens": 5, "temperature": 0.5, "top_k": 3, "seed": 7, "stop_token_ids": [1], "stop": ["zzz"],
          "regex": "[a-z]+"}
    status, body = front.post("/generate", {"text": "Hello there", "sampling_params": sp})
    assert status == 200, body
    assert body["output_ids"] == [ids[p % len(ids)] for p in range(5)]
    sent = standin.seen[-1]
    assert sent["token_ids"] == ids and sent["stream"] is True and sent["output_mode"] == "tokens"
    got = sent["sampling_params"]
    assert (got["max_tokens"], got["temperature"], got["top_k"], got["seed"], got["stop_token_ids"]) == (5, 0.5, 3, 7, [1])
    assert got["structured_outputs"] == {"regex": "[a-z]+"} and "stop" not in got
    events = front.stream("/v1/completions", {"prompt": "Hello there", "max_tokens": 5, "stream": True})
    text = "".join(e["choices"][0]["text"] for e in events[:-1] if e["choices"])
    assert text == body["text"]


@pytest.mark.fast
def test_stop_token_logprobs_and_refusals(front, standin):
    status, body = front.post("/generate", {"input_ids": [5, 6, 7], "sampling_params": {"max_new_tokens": 9,
                                                                                        "stop_token_ids": [7]}})
    assert status == 200 and body["output_ids"] == [5, 6, 7], body
    assert body["meta_info"]["finish_reason"] == {"type": "stop", "matched": 7}
    status, body = front.post("/generate", {"input_ids": [5, 6], "sampling_params": {"max_new_tokens": 3},
                                            "return_logprob": True, "top_logprobs_num": 2})
    assert status == 200, body
    meta = body["meta_info"]
    assert [r[:2] for r in meta["output_token_logprobs"]] == [[lp(0), 5], [lp(1), 6], [lp(2), 5]]
    assert [[t[:2] for t in row] for row in meta["output_top_logprobs"]][1] == [[lp(1), 6], [lp(1) - 1, 7]]
    assert standin.seen[-1]["sampling_params"]["logprobs"] == 2
    status, body = front.post("/generate", {"input_ids": [5, 6], "return_logprob": True, "token_ids_logprob": [3]})
    assert status == 400 and body["error"]["param"] == "token_ids_logprob", body


@pytest.mark.fast
def test_errors_and_cancel(front, standin):
    standin.behaviour.update(status=500, message="engine dead")
    status, body = front.post("/generate", {"input_ids": [5], "sampling_params": {"max_new_tokens": 2}})
    assert status == 502 and "engine dead" in body["error"]["message"]
    standin.behaviour.update(status=403, message="Scale-out endpoints are disabled")
    status, body = front.post("/generate", {"input_ids": [5], "sampling_params": {"max_new_tokens": 2}})
    assert status == 502 and "--enable-scale-out" not in body["error"]["message"]
    assert "Scale-out endpoints are disabled" in body["error"]["message"]
    standin.behaviour.clear()
    standin.behaviour["delay"] = 0.05
    before = standin.cancelled
    status, body = front.post("/generate", {"text": "ab cd ef", "sampling_params": {"max_new_tokens": 200,
                                                                                   "stop": ["cd"]}})
    assert status == 200 and body["text"] == "ab ", body
    wait_for(lambda: standin.cancelled > before, 10, what="the upstream stream to be cut")


@pytest.mark.fast
def test_n_samples_are_seeded_seed_plus_index(front, standin):
    """vLLM seeds parallel sample i with seed + i (v1/engine/parallel_sampling.py); mtok expands n
    itself, so it sends each sample its own seed: n seeded choices differ, each reproducible."""
    status, body = front.post("/v1/completions", {"prompt": "Hello there", "max_tokens": 2, "n": 3, "seed": 7,
                                                  "temperature": 1.0})
    assert status == 200 and len(body["choices"]) == 3, body
    assert sorted(b["sampling_params"]["seed"] for b in standin.seen) == [7, 8, 9]
    standin.seen.clear()
    status, body = front.post("/v1/completions", {"prompt": "Hello there", "max_tokens": 2, "n": 2})
    assert status == 200 and all("seed" not in b["sampling_params"] for b in standin.seen), standin.seen


@pytest.mark.fast
def test_a_silent_stream_fails_soon_once_the_upstream_fails_its_health(front, standin):
    """A vLLM stopped with SIGTERM refuses new connections (its /health too) at once but may hold its
    streams open and silent while it shuts down: such a stream fails with a 503 error event within
    seconds (``health_grace``), not after ``idle_timeout`` (60 s here; the client waits 30 s at most)."""
    standin.behaviour["hostile"] = "silent"  # one event, then nothing
    conn = front.conn(timeout=30)
    try:
        conn.request("POST", "/v1/completions", body=json.dumps({"prompt": "Hello there", "max_tokens": 50,
                                                                 "stream": True}),
                     headers={"Content-Type": "application/json"})
        resp = conn.getresponse()
        assert resp.status == 200
        events = parse_sse(resp)
        first = next(events)
        assert first["choices"][0]["text"], first
        standin.behaviour["unhealthy"] = True
        rest = list(events)
    finally:
        conn.close()
    assert rest[-1] == "[DONE]" and rest[-2]["error"]["code"] == 503, rest
    assert "fails its health check" in rest[-2]["error"]["message"]
    assert front.get("/health")[0] == 503
    standin.behaviour.clear()
    wait_for(lambda: front.get("/health")[0] == 200, 10, what="/health to recover with the upstream")


@pytest.mark.fast
def test_the_context_limit_is_the_upstreams_when_it_is_smaller():
    """vLLM's (and SGLang's) /v1/models card has ``max_model_len``: mtok learns it and its limit is the
    smaller of that and the tokenizer's, at every worker, so a prompt the upstream would refuse gets
    mtok's own 400 before it is sent, and chat's budget without max_tokens fits the upstream."""
    small = VLLMStandIn(max_model_len=40)
    try:
        with serving("--engine", f"vllm:{small.url}", "--tokenizer-worker-num", "2", "--chat-template", ECHO_LAST) as s:
            each = s.conn_per_worker(2)
            wait_for(lambda: all(s.get("/v1/models", conn=c)[1]["data"][0]["max_model_len"] == 40 for c in each), 20,
                     what="both workers to learn the upstream's max_model_len")
            assert all(s.get("/get_model_info", conn=c)[1]["context_length"] == 40 for c in each)
            for c in each:
                c.close()
            long = " ".join(["word"] * 60)
            status, body = s.post("/v1/completions", {"prompt": long, "max_tokens": 1})
            assert status == 400 and "longer than the model's context length (40 tokens)" in body["error"]["message"]
            status, body = s.post("/v1/completions", {"prompt": "Hello there", "max_tokens": 39})
            assert status == 400 and "maximum context length of 40 tokens" in body["error"]["message"], body
            assert small.seen == []
            status, body = s.post("/v1/chat/completions", {"messages": [{"role": "user", "content": "Hello"}]})
            assert status == 200, body
            prompt = len(small.seen[-1]["token_ids"])
            assert small.seen[-1]["sampling_params"]["max_tokens"] == 40 - prompt
    finally:
        small.stop()


@pytest.mark.fast
def test_prompt_logprobs_are_asked_unstreamed(front, standin):
    """vLLM's token stream has no field for prompt logprobs; the same route answers ``"stream": false``
    whole with ``prompt_logprobs``: echo with logprobs, logprob_start_len and chat's prompt_logprobs
    are served from it (the client's own stream still streams)."""
    ids = tokenize(front, "Hello there, world")
    status, body = front.post("/v1/completions", {"prompt": "Hello there, world", "max_tokens": 2, "echo": True,
                                                  "logprobs": 1})
    assert status == 200, body
    sent = standin.seen[-1]
    assert sent["stream"] is False and sent["sampling_params"]["prompt_logprobs"] == 1, sent
    got = body["choices"][0]["logprobs"]
    n = len(ids)
    assert got["token_logprobs"] == [None] + [prompt_lp(p) for p in range(1, n)] + [lp(0), lp(1)]
    tops = [sorted(d.values(), reverse=True) for d in got["top_logprobs"][1:n]]
    assert tops == [[prompt_lp(p) + 0.5, prompt_lp(p)] for p in range(1, n)]  # the best, then the token itself
    events = front.stream("/v1/completions", {"prompt": "Hello there, world", "max_tokens": 2, "echo": True,
                                              "logprobs": 1, "stream": True})
    streamed = [x for e in events[:-1] if e["choices"] and e["choices"][0]["logprobs"]
                for x in e["choices"][0]["logprobs"]["token_logprobs"]]
    assert streamed == got["token_logprobs"]
    status, body = front.post("/generate", {"input_ids": ids, "return_logprob": True, "logprob_start_len": 2,
                                            "top_logprobs_num": 3, "sampling_params": {"max_new_tokens": 1}})
    assert status == 200, body
    rows = body["meta_info"]["input_token_logprobs"]
    assert [r[:2] for r in rows] == [[prompt_lp(p), ids[p]] for p in range(2, n)]
    assert [[t[1] for t in top] for top in body["meta_info"]["input_top_logprobs"]][0] == [ids[2] + 1, ids[2],
                                                                                            ids[2] + 2]
    status, body = front.post("/generate", {"input_ids": ids, "return_logprob": True})  # no prompt: streamed
    assert status == 200 and standin.seen[-1]["stream"] is True and "prompt_logprobs" not in \
        standin.seen[-1]["sampling_params"]
