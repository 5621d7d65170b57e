"""Every endpoint over real HTTP, against a real server, for N = 1 and N = 2 workers."""

from __future__ import annotations

import pytest

from prompts import prompts

pytestmark = pytest.mark.fast


@pytest.fixture(scope="module", params=[1, 2], ids=["N1", "N2"])
def srv(request, server_factory):
    return server_factory("--tokenizer-worker-num", str(request.param))


def tokens(srv, text):
    status, body = srv.post("/tokenize", {"prompt": text})
    assert status == 200, body
    return body["tokens"]


def test_generate_text(srv):
    ids = tokens(srv, "Hello, world! A test.")
    status, body = srv.post("/generate", {"text": "Hello, world! A test.", "sampling_params": {"max_new_tokens": len(ids)}})
    assert status == 200, body
    assert body["text"] == "Hello, world! A test."
    assert body["output_ids"] == ids
    meta = body["meta_info"]
    assert meta["finish_reason"] == {"type": "length", "length": len(ids)}
    assert meta["prompt_tokens"] == len(ids) and meta["completion_tokens"] == len(ids)
    assert len(meta["id"]) >= 16


def test_generate_cycles_through_the_prompt(srv):
    ids = tokens(srv, "ab cd")
    status, body = srv.post("/generate", {"input_ids": ids, "sampling_params": {"max_new_tokens": 2 * len(ids) + 1}})
    assert status == 200
    assert body["output_ids"] == ids + ids + ids[:1]


def test_generate_batch_keeps_order(srv):
    texts = ["first prompt", "second one here", "3rd"]
    lens = [len(tokens(srv, t)) for t in texts]
    sp = [{"max_new_tokens": n} for n in lens]
    status, body = srv.post("/generate", {"text": texts, "sampling_params": sp})
    assert status == 200, body
    assert [b["text"] for b in body] == texts
    assert len({b["meta_info"]["id"] for b in body}) == 3


def test_generate_user_rid(srv):
    status, body = srv.post("/generate", {"text": "rid test", "rid": "my-rid-1", "sampling_params": {"max_new_tokens": 1}})
    assert status == 200 and body["meta_info"]["id"] == "my-rid-1"


def test_generate_stream_is_cumulative(srv):
    text = "Streaming works, token by token."
    n = len(tokens(srv, text))
    events = srv.stream("/generate", {"text": text, "stream": True, "sampling_params": {"max_new_tokens": n}})
    assert events[-1] == "[DONE]"
    chunks = events[:-1]
    assert chunks, "no events before [DONE]"
    for a, b in zip(chunks, chunks[1:]):
        assert b["text"].startswith(a["text"])
        assert a["meta_info"]["finish_reason"] is None
    assert chunks[-1]["text"] == text
    assert chunks[-1]["meta_info"]["finish_reason"]["type"] == "length"


def test_generate_batch_stream_has_indices(srv):
    texts = ["one two", "three four five"]
    events = srv.stream("/generate", {"text": texts, "stream": True, "sampling_params": {"max_new_tokens": 4}})
    final = {}
    for ev in events[:-1]:
        final[ev["index"]] = ev
    assert set(final) == {0, 1}
    assert all(ev["meta_info"]["finish_reason"]["type"] == "length" for ev in final.values())


def test_completions_prompt_shapes(srv):
    ids = tokens(srv, "shape test")
    for prompt, expected in (
        ("shape test", ["shape test"]),
        (["shape test", "shape test"], ["shape test"] * 2),
        (ids, ["shape test"]),
        ([ids, ids], ["shape test"] * 2),
    ):
        status, body = srv.post("/v1/completions", {"prompt": prompt, "max_tokens": len(ids)})
        assert status == 200, body
        assert body["object"] == "text_completion"
        assert [c["text"] for c in body["choices"]] == expected
        assert [c["index"] for c in body["choices"]] == list(range(len(expected)))
        assert body["choices"][0]["finish_reason"] == "length"
        n = len(expected)
        assert body["usage"] == {"prompt_tokens": n * len(ids), "completion_tokens": n * len(ids),
                                 "total_tokens": 2 * n * len(ids)}


def test_completions_stream_with_usage(srv):
    text = "usage please"
    n = len(tokens(srv, text))
    events = srv.stream("/v1/completions", {"prompt": text, "max_tokens": n, "stream": True,
                                            "stream_options": {"include_usage": True}})
    assert events[-1] == "[DONE]"
    *chunks, usage = events[:-1]
    assert "".join(c["choices"][0]["text"] for c in chunks) == text
    assert chunks[-1]["choices"][0]["finish_reason"] == "length"
    assert all(c["usage"] is None for c in chunks)
    assert usage["choices"] == [] and usage["usage"]["completion_tokens"] == n


def test_models(srv):
    status, body = srv.get("/v1/models")
    assert status == 200
    assert body["object"] == "list" and body["data"][0]["id"] == "mtok-default"
    assert body["data"][0]["object"] == "model"


def test_tokenize_detokenize(srv):
    for prefix in ("", "/v1"):
        status, body = srv.post(prefix + "/tokenize", {"prompt": "round trip ✓"})
        assert status == 200
        assert body["count"] == len(body["tokens"]) and body["max_model_len"] > 0
        status, back = srv.post(prefix + "/detokenize", {"tokens": body["tokens"]})
        assert status == 200 and back == {"prompt": "round trip ✓", "text": "round trip ✓"}


@pytest.mark.parametrize("key, keys", [("both", ("text", "prompt")), ("text", ("text",)), ("prompt", ("prompt",))])
def test_detokenize_answers_under_the_keys_of_its_flag(server_factory, key, keys):
    """--detokenize-key: both peers' keys (the default), SGLang's exact shape, or vLLM's (issue 25)."""
    srv = server_factory("--detokenize-key", key)
    ids = tokens(srv, "round trip ✓")
    for prefix in ("", "/v1"):
        status, back = srv.post(prefix + "/detokenize", {"tokens": ids})
        assert status == 200 and back == dict.fromkeys(keys, "round trip ✓"), back


def test_health_and_info(srv):
    assert srv.get("/health") == (200, {"status": "ok"})
    assert srv.get("/health_generate") == (200, {"status": "ok"})
    status, info = srv.get("/get_model_info")
    assert status == 200 and info["is_generation"] and info["vocab_size"] > 256
    server = srv.info()
    n = server["tokenizer_worker_num"]
    assert len(server["workers"]) == n
    assert all(w["state"] == "ready" and w["pid"] > 0 for w in server["workers"])
    assert server["scheduler"]["num_running"] == 0


@pytest.mark.parametrize("mode", ["generate", "generate-stream", "completions", "completions-stream"])
def test_echo_returns_every_prompt(srv, mode):
    conn = srv.conn()
    try:
        for text in prompts(200):
            n = len(tokens(srv, text))
            if mode == "generate":
                status, body = srv.post("/generate", {"text": text, "sampling_params": {"max_new_tokens": n}}, conn=conn)
                got = body["text"]
            elif mode == "completions":
                status, body = srv.post("/v1/completions", {"prompt": text, "max_tokens": n}, conn=conn)
                got = body["choices"][0]["text"]
            elif mode == "generate-stream":
                events = srv.stream("/generate", {"text": text, "stream": True, "sampling_params": {"max_new_tokens": n}}, conn=conn)
                got = events[-2]["text"]
            else:
                events = srv.stream("/v1/completions", {"prompt": text, "max_tokens": n, "stream": True}, conn=conn)
                got = "".join(e["choices"][0]["text"] for e in events[:-1])
            assert got == text, (mode, text)
    finally:
        conn.close()


def test_stop_string_is_trimmed_and_ends_generation(srv):
    text = "alpha beta gamma delta epsilon"
    status, body = srv.post("/generate", {"text": text, "sampling_params": {"max_new_tokens": 50, "stop": [" gamma", "zzz"]}})
    assert status == 200
    assert body["text"] == "alpha beta"
    assert body["meta_info"]["finish_reason"] == {"type": "stop", "matched": " gamma"}
    assert body["meta_info"]["completion_tokens"] < len(tokens(srv, text))


def test_stop_string_streaming_never_leaks_a_partial_stop(srv):
    text = "one two three four five six"
    events = srv.stream("/v1/completions", {"prompt": text, "max_tokens": 60, "stop": "four five", "stream": True})
    deltas = [e["choices"][0]["text"] for e in events[:-1]]
    assert "".join(deltas) == "one two three "
    assert events[-2]["choices"][0]["finish_reason"] == "stop"
    assert events[-2]["choices"][0]["stop_reason"] == "four five"


def test_no_stop_trim_keeps_the_stop_string(srv):
    status, body = srv.post("/generate", {"text": "keep the stop here", "sampling_params": {
        "max_new_tokens": 40, "stop": "stop", "no_stop_trim": True}})
    assert status == 200 and body["text"] == "keep the stop"


def test_stop_token_ids(srv):
    ids = tokens(srv, "red green blue yellow")
    stop_id = ids[2]
    status, body = srv.post("/generate", {"input_ids": ids, "sampling_params": {"max_new_tokens": 20, "stop_token_ids": [stop_id]}})
    assert status == 200
    assert body["output_ids"] == ids[:3]
    assert body["meta_info"]["finish_reason"] == {"type": "stop", "matched": stop_id}
    status, back = srv.post("/detokenize", {"tokens": ids[:2]})
    assert body["text"] == back["prompt"]


def test_eos_ends_generation_unless_ignored(srv):
    ids = tokens(srv, "before<|endoftext|>after")
    status, info = srv.get("/get_model_info")
    eos = info["eos_token_ids"][0]
    assert eos in ids
    cut = ids.index(eos)
    status, body = srv.post("/generate", {"input_ids": ids, "sampling_params": {"max_new_tokens": 30}})
    assert body["output_ids"] == ids[: cut + 1] and body["text"] == "before"
    assert body["meta_info"]["finish_reason"] == {"type": "stop", "matched": eos}
    status, body = srv.post("/generate", {"input_ids": ids, "sampling_params": {"max_new_tokens": len(ids), "ignore_eos": True,
                                                                                "skip_special_tokens": False}})
    assert body["text"] == "before<|endoftext|>after"
