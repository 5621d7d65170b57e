"""``--detokenizer inline`` against ``--detokenizer process``: the same
requests give the same answers whichever process turns ids into text.

Inline, the scheduler's process decodes each step and sends it to the workers
itself (one hop less); in a process of its own, the detokenizer does.  Both run
the same core (``DetokenizerManager``) behind the same sinks, so everything a
client can see must agree: streamed and whole text, stop strings held back and
trimmed, incomplete UTF-8 held until whole, logprobs with their token texts,
``n`` > 1, and several workers, each getting only its own requests' pieces.
"""

from __future__ import annotations

import threading

import pytest

from support import Server

pytestmark = [pytest.mark.timeout(120)]

TEXT = "Hello, world! 你好 🙂 — the quick brown fox"
REQUESTS = [
    ("/generate", {"text": TEXT, "sampling_params": {"max_new_tokens": 24}}),
    ("/generate", {"text": TEXT, "stream": True, "sampling_params": {"max_new_tokens": 24, "stop": ["brown"]}}),
    ("/generate", {"text": TEXT, "stream": True, "sampling_params": {"max_new_tokens": 24, "stop": ["brown"],
                                                                     "no_stop_trim": True}}),
    ("/generate", {"text": ["first", TEXT], "sampling_params": {"max_new_tokens": 8, "n": 2}}),
    ("/v1/completions", {"model": "default", "prompt": TEXT, "max_tokens": 16, "logprobs": 2, "echo": True}),
    ("/v1/completions", {"model": "default", "prompt": TEXT, "max_tokens": 16, "stream": True, "logprobs": 1,
                         "stream_options": {"include_usage": True}}),
    ("/v1/chat/completions", {"model": "default", "messages": [{"role": "user", "content": TEXT}],
                              "max_tokens": 20, "stream": True, "logprobs": True, "top_logprobs": 2}),
]
VARYING = {"id", "created", "rid", "e2e_latency", "system_fingerprint", "response_sent_to_client_ts",
           "request_received_ts", "ttft"}


def strip(value):
    """An answer without what differs between any two runs (ids, clocks)."""
    if isinstance(value, dict):
        return {k: strip(v) for k, v in value.items() if k not in VARYING and not k.endswith("_time")}
    if isinstance(value, list):
        return [strip(v) for v in value]
    return value


def folded(events):
    """A stream as what it adds up to: how its steps were cut into events
    depends on timing (a busy worker takes several steps at once), not on
    the placement.  Native streams are cumulative: their last event; OpenAI's
    are deltas: each choice's text and logprobs joined, its finish, the usage."""
    assert events[-1] == "[DONE]", events[-3:]
    events = [strip(e) for e in events[:-1]]
    if "choices" not in events[-1]:
        return events[-1]
    choices = {}
    for e in events:
        for c in e["choices"]:
            acc = choices.setdefault(c["index"], {"text": "", "logprobs": [], "finish": None})
            acc["text"] += c.get("text") or (c.get("delta") or {}).get("content") or ""
            acc["logprobs"].append(c.get("logprobs"))
            acc["finish"] = c.get("finish_reason") or acc["finish"]
    for acc in choices.values():
        acc["logprobs"] = join_logprobs([lp for lp in acc["logprobs"] if lp])
    return {"choices": choices, "usage": events[-1].get("usage")}


def join_logprobs(parts):
    joined = {}
    for part in parts:
        for k, v in part.items():
            joined[k] = joined.get(k, []) + v if isinstance(v, list) else v
    return joined


def answers(srv: Server):
    out = []
    for path, body in REQUESTS:
        if body.get("stream"):
            out.append(folded(srv.stream(path, body)))
        else:
            status, got = srv.post(path, body)
            assert status == 200, got
            out.append(strip(got))
    return out


@pytest.mark.parametrize("workers", [1, 2])
def test_inline_and_process_answer_alike(workers):
    chat = ("--chat-template", "examples/chat_template_echo_last.jinja")
    inline = Server("--tokenizer-worker-num", str(workers), "--detokenizer", "inline", *chat)
    process = Server("--tokenizer-worker-num", str(workers), "--detokenizer", "process", *chat)
    try:
        assert inline.info()["processes"]["detokenizer"] == inline.info()["processes"]["scheduler"]
        assert process.info()["processes"]["detokenizer"] != process.info()["processes"]["scheduler"]
        theirs = answers(process)
        assert any("brown" in str(a) for a in theirs) and "🙂" in str(theirs)
        # several clients at once, so that with two workers each gets only its own pieces
        results = {}
        threads = [threading.Thread(target=lambda i=i: results.__setitem__(i, answers(inline))) for i in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
        assert sorted(results) == [0, 1, 2, 3]
        for got in results.values():
            assert got == theirs
    finally:
        assert inline.stop() == 0
        assert process.stop() == 0
