"""``logit_bias`` over a real server (vLLM's test_chat_logit_bias_validation, issue 25).

Ids outside the vocabulary are refused before any engine is asked, naming the
id and the vocabulary's size (as ``stop_token_ids`` are), on every surface;
keys that are not ids and values that are not numbers are 400s too.  The echo
engine honours a bias on its own deterministic logits (``-(1 + d) ln 2`` for
the token ``d`` places after the one it echoes): a bias above ``d ln 2`` makes
it say the biased token instead, one below does not.
"""

from __future__ import annotations

import os

import pytest

from support import ROOT

pytestmark = pytest.mark.fast

PROMPT = [100, 101, 102]
ECHO_LAST = os.path.join(ROOT, "examples", "chat_template_echo_last.jinja")


@pytest.fixture(scope="module")
def srv(server_factory):
    return server_factory("--chat-template", ECHO_LAST)


def vocab(srv) -> int:
    return srv.get("/get_model_info")[1]["vocab_size"]


def said(srv, bias, new: int = 3):
    """The ids the echo engine generates after PROMPT under ``bias``."""
    status, resp = srv.post("/generate", {"input_ids": PROMPT, "return_logprob": True, "sampling_params": {
        "max_new_tokens": new, "ignore_eos": True, "logit_bias": bias}})
    assert status == 200, resp
    return [row[1] for row in resp["meta_info"]["output_token_logprobs"]]


def refused(status, resp, *words) -> bool:
    err = (resp or {}).get("error") or {}
    return status == 400 and err.get("param") == "logit_bias" and all(w in err.get("message", "") for w in words)


def test_ids_outside_the_vocabulary_are_refused_naming_the_id_and_the_size(srv):
    v = vocab(srv)
    chat = {"messages": [{"role": "user", "content": "Testing invalid logit bias"}], "max_tokens": 5}
    for bad_id in (v, v + 1, -1):
        status, resp = srv.post("/v1/chat/completions", dict(chat, logit_bias={str(bad_id): 1.0}))
        assert refused(status, resp, str(bad_id), str(v)), resp
    status, resp = srv.post("/v1/completions", {"prompt": "a", "max_tokens": 2, "logit_bias": {str(v + 1): 1}})
    assert refused(status, resp, str(v + 1), str(v)), resp
    status, resp = srv.post("/generate", {"text": "a", "sampling_params": {"logit_bias": {str(v + 1): 1}}})
    assert refused(status, resp, str(v + 1), str(v)), resp


def test_keys_that_are_not_ids_and_values_that_are_not_numbers_are_refused(srv):
    chat = {"messages": [{"role": "user", "content": "x"}], "max_tokens": 2}
    status, resp = srv.post("/v1/chat/completions", dict(chat, logit_bias={"abc": 1.0}))
    assert refused(status, resp, "abc"), resp
    for value in ("high", True, None, [1]):
        status, resp = srv.post("/v1/chat/completions", dict(chat, logit_bias={"5": value}))
        assert refused(status, resp, "values are numbers"), resp


def test_the_echo_engine_honours_a_bias_on_its_own_logits(srv):
    v = vocab(srv)
    assert said(srv, {}) == PROMPT
    # 105 is 5, 4, 3 places after 100, 101, 102: a bias of 100 beats each; 3 ln 2 < 2.5 < 4 ln 2
    assert said(srv, {"105": 100}) == [105, 105, 105]
    assert said(srv, {"105": 2.5}) == [100, 101, 105]
    assert said(srv, {"101": -100}) == [100, 102, 102]  # the echoed 101 pushed down: the next one
    assert said(srv, {"105": 1e9}) == [105, 105, 105]  # clamped to 100, still served
    chat = {"messages": [{"role": "user", "content": "Testing valid logit bias"}], "max_tokens": 5,
            "logit_bias": {str(v - 1): 1.0}}
    status, resp = srv.post("/v1/chat/completions", chat)
    assert status == 200 and resp["choices"][0]["message"]["content"] is not None, resp
    assert srv.get("/health")[0] == 200
