"""``--engine sglang:URL`` against a stand-in that answers as SGLang's
``--skip-tokenizer-init`` mode does (tests/upstream_standin.py), and mtok in
front of mtok ``--skip-tokenizer-init`` end to end."""

from __future__ import annotations

import contextlib
import json
import threading

import pytest

from support import Server, wait_for
from upstream_standin import SGLangStandIn, lp

pytestmark = pytest.mark.timeout(180)


@pytest.fixture(scope="module")
def standin():
    s = SGLangStandIn()
    yield s
    s.stop()


@pytest.fixture(scope="module")
def front(standin):
    with serving("--engine", f"sglang:{standin.url}?max_connections=4&timeout=3",
                "--tokenizer-worker-num", "2") as s:
        yield s


@pytest.fixture(autouse=True)
def reset(standin):
    standin.behaviour.clear()
    standin.seen.clear()
    yield
    standin.behaviour.clear()


@contextlib.contextmanager
def serving(*args, **kw):
    s = Server(*args, **kw)
    try:
        yield s
    finally:
        s.stop()


def tokenize(server, text):
    status, body = server.post("/tokenize", {"prompt": text})
    assert status == 200, body
    return body["tokens"]


@pytest.mark.fast
@pytest.mark.parametrize("incremental", [False, True])
def test_generate_streamed_and_not(front, standin, incremental):
    standin.behaviour["incremental"] = incremental
    ids = tokenize(front, "Hello world, hello")
    status, body = front.post("/generate", {"text": "Hello world, hello", "sampling_params": {"max_new_tokens": 6}})
    assert status == 200, body
    want = [ids[p % len(ids)] for p in range(6)]
    assert body["output_ids"] == want
    assert body["meta_info"]["finish_reason"] == {"type": "length", "length": 6}
    assert standin.seen[-1]["input_ids"] == ids and standin.seen[-1]["stream"] is True
    events = front.stream("/generate", {"text": "Hello world, hello", "stream": True,
                                        "sampling_params": {"max_new_tokens": 6}})
    assert events[-1] == "[DONE]" and events[-2]["output_ids"] == want
    assert events[-2]["text"] == body["text"] and body["text"].startswith("Hello world")


@pytest.mark.fast
def test_fields_forwarded_and_stop_strings_kept(front, standin):
    sp = {"max_new_tokens": 5, "temperature": 0.5, "top_p": 0.9, "top_k": 7, "min_p": 0.1, "seed": 42,
          "repetition_penalty": 1.1, "stop_token_ids": [1], "ignore_eos": True, "stop": ["zzz"],
          "regex": "[a-z]+", "min_new_tokens": 1}
    status, body = front.post("/generate", {"input_ids": [5, 6, 7], "sampling_params": sp})
    assert status == 200, body
    got = standin.seen[-1]["sampling_params"]
    for key in ("max_new_tokens", "temperature", "top_p", "top_k", "min_p", "repetition_penalty",
                "stop_token_ids", "ignore_eos", "regex", "min_new_tokens"):
        assert got[key] == sp[key], key
    assert got["sampling_seed"] == 42 and "stop" not in got and "n" not in got


@pytest.mark.fast
def test_upstream_stop_token_ends_request(front, standin):
    status, body = front.post("/generate", {"input_ids": [5, 6, 7, 8], "sampling_params": {"max_new_tokens": 9,
                                                                                           "stop_token_ids": [7]}})
    assert status == 200, body
    assert body["output_ids"] == [5, 6, 7]
    assert body["meta_info"]["finish_reason"] == {"type": "stop", "matched": 7}


@pytest.mark.fast
def test_logprobs_come_from_upstream(front, standin):
    body = {"input_ids": [5, 6, 7], "sampling_params": {"max_new_tokens": 4}, "return_logprob": True,
            "top_logprobs_num": 2, "logprob_start_len": 0}
    status, out = front.post("/generate", body)
    assert status == 200, out
    meta = out["meta_info"]
    assert [r[0] for r in meta["output_token_logprobs"]] == [lp(p) for p in range(4)]
    assert [r[1] for r in meta["output_token_logprobs"]] == [5, 6, 7, 5]
    assert [len(t) for t in meta["output_top_logprobs"]] == [2, 2, 2, 2]
    assert meta["output_top_logprobs"][1][1][:2] == [lp(1) - 1, 7]
    assert [r[0] for r in meta["input_token_logprobs"]] == [None, -0.25, -0.25]
    sent = standin.seen[-1]
    assert sent["return_logprob"] is True and sent["top_logprobs_num"] == 2 and sent["logprob_start_len"] == 0


@pytest.mark.fast
def test_stop_string_cancels_upstream(front, standin):
    standin.behaviour["delay"] = 0.05
    before = standin.cancelled
    status, body = front.post("/generate", {"text": "ab cd ef", "sampling_params": {"max_new_tokens": 200,
                                                                                   "stop": ["cd"]}})
    assert status == 200, body
    assert body["text"] == "ab " and body["meta_info"]["finish_reason"] == {"type": "stop", "matched": "cd"}
    wait_for(lambda: standin.cancelled > before, 10, what="the upstream stream to be cut")


@pytest.mark.fast
def test_client_disconnect_and_abort_request_cancel_upstream(front, standin):
    standin.behaviour["delay"] = 0.05
    before = standin.cancelled
    c = front.conn()
    c.request("POST", "/generate", body=json.dumps({"input_ids": [5, 6], "stream": True,
                                                    "sampling_params": {"max_new_tokens": 500}}),
              headers={"Content-Type": "application/json"})
    resp = c.getresponse()
    assert resp.status == 200
    resp.readline()
    c.close()
    wait_for(lambda: standin.cancelled > before, 15, what="the disconnect to reach the upstream")
    result = {}

    def long():
        result["r"] = front.post("/generate", {"input_ids": [5, 6], "rid": "long-one",
                                               "sampling_params": {"max_new_tokens": 500}})
    t = threading.Thread(target=long)
    t.start()
    wait_for(lambda: standin.active > 0, 10, what="the request to reach the upstream")
    status, _ = front.post("/abort_request", {"rid": "long-one"})
    assert status == 200
    t.join(20)
    assert result["r"][0] == 200 and result["r"][1]["meta_info"]["finish_reason"]["type"] == "abort"
    wait_for(lambda: standin.cancelled > before + 1, 15, what="/abort_request to reach the upstream")


@pytest.mark.fast
@pytest.mark.parametrize("upstream,mine", [(400, 400), (500, 502), (503, 503), (504, 504)])
def test_upstream_errors(front, standin, upstream, mine):
    standin.behaviour.update(status=upstream, message=f"computer says {upstream}")
    status, body = front.post("/generate", {"input_ids": [5], "sampling_params": {"max_new_tokens": 2}})
    assert status == mine, body
    assert f"computer says {upstream}" in body["error"]["message"]
    assert front.post("/v1/completions", {"prompt": "hi", "max_tokens": 2})[0] == mine


@pytest.mark.fast
def test_broken_slow_and_erring_streams(front, standin):
    standin.behaviour["die_after"] = 2
    status, body = front.post("/generate", {"input_ids": [5, 6], "sampling_params": {"max_new_tokens": 9}})
    assert status == 502 and "broke" in body["error"]["message"], body
    standin.behaviour.clear()
    standin.behaviour["error_after"] = 1
    status, body = front.post("/generate", {"input_ids": [5, 6], "sampling_params": {"max_new_tokens": 9}})
    assert status == 502 and "out of memory" in body["error"]["message"], body
    standin.behaviour.clear()
    standin.behaviour["delay"] = 5  # past the adapter's timeout=3
    status, body = front.post("/generate", {"input_ids": [5, 6], "sampling_params": {"max_new_tokens": 2}})
    assert status == 504, body
    standin.behaviour.clear()
    assert front.post("/generate", {"input_ids": [5], "sampling_params": {"max_new_tokens": 1}})[0] == 200


@pytest.mark.fast
def test_connections_are_bounded(front, standin):
    wait_for(lambda: standin.active == 0, 15, what="earlier tests' streams to end upstream")
    standin.behaviour["delay"] = 0.02
    standin.max_active = 0
    results = []

    def one(i):
        results.append(front.post("/generate", {"input_ids": [5 + i], "sampling_params": {"max_new_tokens": 10}}))
    threads = [threading.Thread(target=one, args=(i,)) for i in range(10)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert sorted(s for s, _ in results) == [200] * 10
    assert all(b["output_ids"] == [b["output_ids"][0]] * 10 for _, b in results)
    assert 1 <= standin.max_active <= 4  # max_connections=4


@pytest.mark.fast
def test_stale_pooled_connections_are_retried(front, standin):
    standin.behaviour["drop_idle"] = True
    for i in range(8):  # every pooled connection is dead by the time it is reused
        status, body = front.post("/generate", {"input_ids": [5 + i], "sampling_params": {"max_new_tokens": 2}})
        assert status == 200 and body["output_ids"] == [5 + i] * 2, body


@pytest.mark.fast
def test_health_follows_the_upstream(standin):
    other = SGLangStandIn()
    port = other.port
    with serving("--engine", f"sglang:{other.url}") as front:
        wait_for(lambda: front.get("/health")[0] == 200, 10, what="healthy")
        other.behaviour["unhealthy"] = True
        status, body = wait_for(lambda: (lambda r: r if r[0] == 503 else None)(front.get("/health")), 10,
                                what="503 while the upstream is unhealthy")
        assert "warming up" in body["message"]
        other.stop()
        status, body = front.post("/generate", {"input_ids": [5], "sampling_params": {"max_new_tokens": 1}})
        assert status == 503 and "cannot reach" in body["error"]["message"], body
        assert front.get("/health")[0] == 503
        other = SGLangStandIn(port)
        wait_for(lambda: front.get("/health")[0] == 200, 10, what="recovery")
        assert front.post("/generate", {"input_ids": [5], "sampling_params": {"max_new_tokens": 1}})[0] == 200
    other.stop()


# -- mtok in front of mtok --------------------------------------------------------------
@pytest.fixture(scope="module")
def engine_host():
    with serving("--skip-tokenizer-init", "--engine-step-delay", "0.002") as s:
        yield s


@pytest.mark.fast
def test_skip_tokenizer_init_is_ids_only(engine_host):
    status, body = engine_host.post("/generate", {"input_ids": [5, 6, 7], "sampling_params": {"max_new_tokens": 4}})
    assert status == 200 and body["output_ids"] == [5, 6, 7, 5] and "text" not in body
    events = engine_host.stream("/generate", {"input_ids": [5, 6], "stream": True,
                                              "sampling_params": {"max_new_tokens": 3}})
    assert all("text" not in e for e in events[:-1]) and events[-2]["output_ids"] == [5, 6, 5]
    status, body = engine_host.post("/generate", {"text": "hi"})
    assert status == 400 and "--skip-tokenizer-init" in body["error"]["message"]
    status, body = engine_host.post("/generate", {"input_ids": [5], "sampling_params": {"stop": "x"}})
    assert status == 400 and body["error"]["param"] == "stop"


@pytest.mark.fast
def test_mtok_in_front_of_mtok(engine_host):
    chat = ("--chat-template", "examples/chat_template_echo_last.jinja")
    with serving("--engine", f"sglang:http://{engine_host.host}:{engine_host.port}", "--tokenizer-worker-num", "2",
                 *chat) as front, serving("--engine-step-delay", "0.002", *chat) as direct:
        bodies = [
            ("/generate", {"text": "The quick brown fox", "sampling_params": {"max_new_tokens": 9}}),
            ("/generate", {"text": "The quick brown fox", "sampling_params": {"max_new_tokens": 30, "stop": "own"}}),
            ("/generate", {"text": "ab", "return_logprob": True, "top_logprobs_num": 2, "logprob_start_len": 0,
                           "sampling_params": {"max_new_tokens": 3}}),
            ("/v1/completions", {"prompt": "Say it twice", "max_tokens": 7, "n": 2}),
            ("/v1/chat/completions", {"messages": [{"role": "user", "content": "hi there"}], "max_tokens": 5}),
        ]
        for path, body in bodies:
            a, b = front.post(path, body), direct.post(path, body)
            assert a[0] == b[0] == 200, (a, b)
            assert strip(a[1]) == strip(b[1]), path
        events = front.stream("/v1/completions", {"prompt": "streamed words", "max_tokens": 12, "stream": True})
        text = "".join(e["choices"][0]["text"] for e in events[:-1] if e["choices"])
        assert text == direct.post("/v1/completions", {"prompt": "streamed words", "max_tokens": 12})[1][
            "choices"][0]["text"]


def strip(body):
    """A response without what differs between two servers (ids, times)."""
    if isinstance(body, dict):
        return {k: strip(v) for k, v in body.items() if k not in ("id", "created", "e2e_latency", "system_fingerprint")}
    if isinstance(body, list):
        return [strip(v) for v in body]
    return body


@pytest.mark.fast
def test_bench_upstream_runs():
    import subprocess
    import sys
    out = subprocess.run([sys.executable, "-m", "mtok.bench", "upstream", "--repeat", "2", "--tokens", "8"],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert "per request" in out.stdout and "per token" in out.stdout


@pytest.mark.fast
def test_upstream_failure_mid_stream_is_an_error_event(front, standin):
    standin.behaviour.update(delay=0.05, error_after=2)
    events = front.stream("/generate", {"input_ids": [5, 6], "stream": True,
                                        "sampling_params": {"max_new_tokens": 9}})
    assert events[-1] == "[DONE]"
    assert events[0]["output_ids"][:1] == [5]
    err = events[-2]["error"]
    assert err["code"] == 502 and "out of memory" in err["message"], events


@pytest.mark.fast
def test_flush_cache_reaches_the_upstream(front, standin):
    standin.flushed = 0
    status, body = front.post("/flush_cache", {})
    assert status == 200, body
    assert standin.flushed == 1
