"""vLLM's chat extensions over a real server (vLLM's test_chat_echo, issue 25).

``echo: true`` puts the last message's content, when it is the assistant's
(vLLM's test continues it with ``continue_final_message``; this template,
which renders the last user message only, cannot), before each choice's content (in a stream: one content chunk after the role
chunk); ``prompt_logprobs: k`` returns the prompt's tokens, each with its own
logprob and k top ones, as the response's ``prompt_logprobs`` (null first);
-1 in it or in ``top_logprobs`` is the whole vocabulary, held to
``--max-logprobs`` as any k.  The echo engine's logprobs are known exactly:
at every position the token that is there has ``-ln 2`` and the next ids
``-2 ln 2``, ``-3 ln 2``, ...
"""

from __future__ import annotations

import math
import os

import pytest

from support import ROOT

pytestmark = pytest.mark.fast

ECHO_LAST = os.path.join(ROOT, "examples", "chat_template_echo_last.jinja")
SAYING = "Here is a common saying about apple. An apple a day, keeps"
CONTINUED = [{"role": "user", "content": "tell me a common saying"}, {"role": "assistant", "content": SAYING}]
LN2 = math.log(2)


@pytest.fixture(scope="module")
def srv(server_factory):
    return server_factory("--chat-template", ECHO_LAST, "--max-logprobs", "8192")


def chat(srv, **body):
    status, resp = srv.post("/v1/chat/completions", dict({"messages": CONTINUED, "max_tokens": 4}, **body))
    assert status == 200, resp
    return resp


def refused(status, resp, param: str, *words) -> bool:
    err = (resp or {}).get("error") or {}
    return status == 400 and err.get("param") == param and all(w in err.get("message", "") for w in words)


def test_echo_puts_the_last_assistant_message_before_the_reply(srv):
    plain = chat(srv)["choices"][0]["message"]["content"]
    assert plain and SAYING not in plain
    resp = chat(srv, echo=True, n=2)
    assert [c["message"]["content"] for c in resp["choices"]] == [SAYING + plain] * 2
    assert resp["usage"]["completion_tokens"] == 8  # the echoed text is the prompt's, not generated
    # a last message that is the user's is not echoed
    resp = chat(srv, echo=True, messages=CONTINUED[:1])
    assert resp["choices"][0]["message"]["content"] == plain
    # text parts are joined by newlines
    parts = [{"type": "text", "text": "An apple"}, {"type": "text", "text": "a day"}]
    resp = chat(srv, echo=True, messages=[CONTINUED[0], {"role": "assistant", "content": parts}])
    assert resp["choices"][0]["message"]["content"] == "An apple\na day" + plain


def test_echo_streams_the_lead_after_the_role_chunk(srv):
    events = srv.stream("/v1/chat/completions", {"messages": CONTINUED, "max_tokens": 4, "echo": True,
                                                 "stream": True})
    assert events[-1] == "[DONE]"
    deltas = [e["choices"][0]["delta"] for e in events[:-1] if e["choices"]]
    assert deltas[0]["role"] == "assistant" and deltas[1]["content"] == SAYING
    plain = chat(srv)["choices"][0]["message"]["content"]
    assert "".join(d.get("content") or "" for d in deltas) == SAYING + plain


def test_prompt_logprobs_come_back_in_vllms_shape(srv):
    resp = chat(srv, prompt_logprobs=2)
    rows = resp["prompt_logprobs"]
    assert len(rows) == resp["usage"]["prompt_tokens"] and rows[0] is None
    for row in rows[1:]:
        (own, first), (nxt, second) = row.items()
        assert first == {"logprob": -LN2, "rank": 1, "decoded_token": first["decoded_token"]}
        assert int(nxt) == int(own) + 1 and second["rank"] == 2 and second["logprob"] == pytest.approx(-2 * LN2)
    # without 'logprobs' the choices carry none; with it, each side has its own k
    assert resp["choices"][0]["logprobs"] is None
    resp = chat(srv, prompt_logprobs=3, logprobs=True, top_logprobs=1)
    assert {len(row) for row in resp["prompt_logprobs"][1:]} == {3}
    assert {len(t["top_logprobs"]) for t in resp["choices"][0]["logprobs"]["content"]} == {1}
    # 0: the token's own only
    resp = chat(srv, prompt_logprobs=0)
    assert {len(row) for row in resp["prompt_logprobs"][1:]} == {1}
    assert "prompt_logprobs" not in chat(srv)


def test_minus_one_is_the_whole_vocabulary(srv):
    vocab = srv.get("/get_model_info")[1]["vocab_size"]
    assert vocab == 8192  # the server's --max-logprobs
    resp = chat(srv, prompt_logprobs=-1, max_tokens=1)
    assert {len(row) for row in resp["prompt_logprobs"][1:]} == {vocab}
    resp = chat(srv, logprobs="true", top_logprobs=-1, max_tokens=2)  # vLLM's test sends "true", as pydantic reads it
    assert [len(t["top_logprobs"]) for t in resp["choices"][0]["logprobs"]["content"]] == [vocab, vocab]


def test_what_cannot_be_served_is_refused_clearly(srv, server_factory):
    status, resp = srv.post("/v1/chat/completions", {"messages": CONTINUED, "prompt_logprobs": 1, "stream": True})
    assert refused(status, resp, "prompt_logprobs", "stream"), resp
    for field, value in (("prompt_logprobs", -2), ("top_logprobs", -2)):
        status, resp = srv.post("/v1/chat/completions", {"messages": CONTINUED, "logprobs": True, field: value})
        assert refused(status, resp, field, "-1"), resp
    status, resp = srv.post("/v1/chat/completions", {"messages": CONTINUED, "logprobs": "maybe"})
    assert refused(status, resp, "logprobs", "must be a boolean"), resp
    status, resp = srv.post("/v1/chat/completions", {"messages": CONTINUED, "top_logprobs": -1})
    assert refused(status, resp, "top_logprobs", "needs 'logprobs': true"), resp
    status, resp = srv.post("/v1/completions", {"prompt": "a b", "prompt_logprobs": 1})
    assert refused(status, resp, "prompt_logprobs"), resp
    # with the default --max-logprobs (20), the whole vocabulary is refused, naming the flag
    default = server_factory("--chat-template", ECHO_LAST)
    for body in ({"prompt_logprobs": -1}, {"logprobs": True, "top_logprobs": -1}):
        status, resp = default.post("/v1/chat/completions", dict(body, messages=CONTINUED))
        assert refused(status, resp, next(iter(body)) if "prompt_logprobs" in body else "top_logprobs",
                       "--max-logprobs", "8192"), resp
    assert default.get("/health")[0] == 200 and chat(default)["choices"]


@pytest.mark.timeout(120)
def test_an_sglang_upstream_is_asked_the_larger_k_and_each_side_keeps_its_own():
    """SGLang's /generate takes one top_logprobs_num for prompt and output: mtok asks the
    larger and renders each side with the k it was asked (tests/upstream_standin.py)."""
    from support import Server
    from upstream_standin import SGLangStandIn

    standin = SGLangStandIn()
    front = Server("--engine", f"sglang:{standin.url}", "--chat-template", ECHO_LAST)
    try:
        resp = chat(front, prompt_logprobs=3, logprobs=True, top_logprobs=1, max_tokens=2)
        assert standin.seen[-1]["top_logprobs_num"] == 3 and standin.seen[-1]["logprob_start_len"] == 0
        assert [len(t["top_logprobs"]) for t in resp["choices"][0]["logprobs"]["content"]] == [1, 1]
        rows = resp["prompt_logprobs"]
        assert rows[0] is None and all(row and len(row) <= 4 for row in rows[1:])  # this stand-in sends no prompt tops
    finally:
        front.stop()
        standin.stop()
