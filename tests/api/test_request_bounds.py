"""Bounds on the work one request may ask for (issue 23, finding 6), over a real server.

Logprobs are bounded per token (``--max-logprobs``) and per request
(``--max-logprob-entries``: prompts x n x (scored prompt tokens + max new
tokens) x (1 + top-k + ids asked)), on every surface that asks for them: a
request past either bound gets a 400 naming the flag and its own field, one
at the bound is served, and the server serves on.
"""

from __future__ import annotations

import os
import time

import pytest

from support import ROOT, Server

pytestmark = pytest.mark.fast

ENTRIES = 6000  # --max-logprob-entries of the server under test
ECHO_LAST = os.path.join(ROOT, "examples", "chat_template_echo_last.jinja")
CHAT = {"messages": [{"role": "user", "content": "a b c"}], "logprobs": True}


@pytest.fixture(scope="module")
def srv(server_factory):
    return server_factory("--max-logprob-entries", str(ENTRIES), "--chat-template", ECHO_LAST,
                          "--context-length", "131072")


def ids(count: int):
    return list(range(100, 100 + count))


def refused(status, resp, flag: str, param: str) -> bool:
    err = (resp or {}).get("error") or {}
    return status == 400 and err.get("param") == param and flag in err.get("message", "")


def generate(top: int, prompt: int = 10, new: int = 1, n: int = 1, start: int = 0, **extra):
    return {"input_ids": ids(prompt), "return_logprob": True, "logprob_start_len": start, "top_logprobs_num": top,
            "sampling_params": {"max_new_tokens": new, "n": n, "ignore_eos": True}, **extra}


def still_serving(srv) -> None:
    assert srv.get("/health")[0] == 200
    status, resp = srv.post("/generate", {"text": "still here", "sampling_params": {"max_new_tokens": 2}})
    assert status == 200 and resp["meta_info"]["completion_tokens"] == 2, resp


def test_top_logprobs_per_token_are_bounded_on_every_surface(srv):
    """vLLM's --max-logprobs (20 by default, OpenAI's cap): 20 is served, 21 refused, on each surface."""
    status, resp = srv.post("/generate", generate(21))
    assert refused(status, resp, "--max-logprobs", "top_logprobs_num"), resp
    status, resp = srv.post("/generate", generate(20))
    assert status == 200 and len(resp["meta_info"]["output_top_logprobs"][0]) == 20, resp

    status, resp = srv.post("/v1/completions", {"prompt": "a b", "max_tokens": 1, "logprobs": 21})
    assert refused(status, resp, "--max-logprobs", "logprobs"), resp
    status, resp = srv.post("/v1/completions", {"prompt": "a b", "max_tokens": 1, "logprobs": 20})
    assert status == 200 and len(resp["choices"][0]["logprobs"]["top_logprobs"][0]) == 20, resp

    status, resp = srv.post("/v1/chat/completions", dict(CHAT, max_tokens=1, top_logprobs=21))
    assert refused(status, resp, "--max-logprobs", "top_logprobs"), resp
    status, resp = srv.post("/v1/chat/completions", dict(CHAT, max_tokens=1, top_logprobs=20))
    assert status == 200 and len(resp["choices"][0]["logprobs"]["content"][0]["top_logprobs"]) == 20, resp
    still_serving(srv)


def test_the_logprob_values_of_a_whole_request_are_bounded_on_generate(srv):
    # (99 prompt tokens scored from 0 + 1 new) x (1 + 19 top) x n 3 = 6000: at the bound
    status, resp = srv.post("/generate", generate(19, prompt=99, n=3))
    assert status == 200 and len(resp) == 3, resp
    status, resp = srv.post("/generate", generate(19, prompt=99, new=2, n=3))  # 6060
    assert refused(status, resp, "--max-logprob-entries", "top_logprobs_num"), resp
    assert "6060" in resp["error"]["message"] and str(ENTRIES) in resp["error"]["message"]
    # a batch adds up: 2 x (2999 + 1) = 6000 with no top-k; one token more is past it
    batch = {"input_ids": [ids(2999), ids(2999)], "return_logprob": True, "logprob_start_len": 0,
             "sampling_params": {"max_new_tokens": 1, "ignore_eos": True}}
    assert srv.post("/generate", batch)[0] == 200
    batch["input_ids"][1] = ids(3000)
    status, resp = srv.post("/generate", batch)
    assert refused(status, resp, "--max-logprob-entries", "top_logprobs_num"), resp
    # tokens asked for by id count like the top ones; the prompt counts only from logprob_start_len on
    status, resp = srv.post("/generate", generate(0, prompt=10, new=2000, n=3, token_ids_logprob=[5]))
    assert refused(status, resp, "--max-logprob-entries", "top_logprobs_num"), resp
    status, resp = srv.post("/generate", generate(0, prompt=5000, new=1000, n=3, start=4999))
    assert status == 200, resp
    still_serving(srv)


def test_the_logprob_values_of_a_whole_request_are_bounded_on_the_openai_routes(srv):
    # completions, echo: (299 prompt tokens + 1 new) x (1 + 9) x n 2 = 6000
    body = {"prompt": ids(299), "max_tokens": 1, "echo": True, "logprobs": 9, "n": 2}
    status, resp = srv.post("/v1/completions", body)
    assert status == 200 and len(resp["choices"]) == 2, resp
    status, resp = srv.post("/v1/completions", dict(body, prompt=ids(300)))
    assert refused(status, resp, "--max-logprob-entries", "logprobs"), resp
    # chat: no prompt logprobs; 300 new x (1 + 9) x n 2 = 6000
    body = dict(CHAT, max_tokens=300, top_logprobs=9, n=2)
    assert srv.post("/v1/chat/completions", body)[0] == 200
    status, resp = srv.post("/v1/chat/completions", dict(body, max_tokens=301))
    assert refused(status, resp, "--max-logprob-entries", "top_logprobs"), resp
    events = srv.stream("/v1/chat/completions", dict(body, stream=True))
    assert events[-1] == "[DONE]" and not any("error" in e for e in events[:-1]), events[-2:]
    still_serving(srv)


def test_chat_without_max_tokens_is_served_within_the_bound(srv):
    """SGLang's own test_chat_completion: logprobs, top 5, n 2 and no max_tokens on a
    131072-token context was a 400 (the rest of the context counted as asked).  Now the
    budget nobody gave is what the bound allows: 6000 // (1 + 5) // 2 = 500 tokens a
    choice, ended as "length", as at the context's end; streamed the same."""
    body = dict(CHAT, top_logprobs=5, n=2)
    status, resp = srv.post("/v1/chat/completions", body)
    assert status == 200, resp
    assert [c["finish_reason"] for c in resp["choices"]] == ["length", "length"], resp["choices"][0]
    assert [len(c["logprobs"]["content"]) for c in resp["choices"]] == [500, 500]
    assert resp["usage"]["completion_tokens"] == 1000, resp["usage"]
    events = srv.stream("/v1/chat/completions", dict(body, stream=True))
    assert events[-1] == "[DONE]" and not any("error" in e for e in events[:-1]), events[-2:]
    finishes = [c["finish_reason"] for e in events[:-1] for c in e["choices"] if c["finish_reason"]]
    assert finishes == ["length", "length"], finishes
    still_serving(srv)


def test_a_huge_top_k_is_refused_at_once_with_the_default_bounds():
    """The finding: top_logprobs_num 50,000 over a 100-token prompt kept the client waiting past 30 s."""
    srv = Server()
    try:
        started = time.monotonic()
        status, resp = srv.post("/generate", generate(50_000, prompt=100))
        assert refused(status, resp, "--max-logprobs", "top_logprobs_num"), resp
        assert "at most 20" in resp["error"]["message"]
        # 10 samples x (5000 prompt tokens + 1) x (1 + 20): just past the default million, refused as fast
        status, resp = srv.post("/generate", generate(20, prompt=5000, n=10))
        assert refused(status, resp, "--max-logprob-entries", "top_logprobs_num"), resp
        assert time.monotonic() - started < 5
        still_serving(srv)
    finally:
        assert srv.stop() == 0


@pytest.mark.unit
def test_the_default_bound_admits_64_tokens_at_the_operators_top_k():
    """vLLM's own test_chat_echo starts its server with --max-logprobs 151936 (the whole
    vocabulary) and asks for prompt_logprobs -1: a server that raised the top-k opted into
    such requests, so the default per-request bound grows with it; a given bound stays."""
    from mtok.managers.limits import DEFAULT_LOGPROB_ENTRIES, logprob_entry_limit

    assert logprob_entry_limit(None, 20) == DEFAULT_LOGPROB_ENTRIES == 1_000_000
    assert logprob_entry_limit(None, 151936) == 64 * 151937
    assert logprob_entry_limit(6000, 151936) == 6000
