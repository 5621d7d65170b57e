"""Embeddings through the whole pipeline: /v1/embeddings and /encode, N = 1 and 2."""

from __future__ import annotations

import base64
import struct
import threading

import pytest

from mtok.engines.echo import echo_embedding

pytestmark = pytest.mark.fast


@pytest.fixture(scope="module", params=[1, 2], ids=["N1", "N2"])
def srv(request, server_factory):
    return server_factory("--tokenizer-worker-num", str(request.param))


def ids_of(srv, text):
    return srv.post("/tokenize", {"prompt": text})[1]["tokens"]


def close(a, b):
    return len(a) == len(b) and all(abs(x - y) < 1e-6 for x, y in zip(a, b))


def test_openai_shapes(srv):
    texts = ["first text", "second, longer text", "日本語"]
    for inp, expected_ids in (
        (texts[0], [ids_of(srv, texts[0])]),
        (texts, [ids_of(srv, t) for t in texts]),
        (ids_of(srv, texts[1]), [ids_of(srv, texts[1])]),
        ([ids_of(srv, t) for t in texts], [ids_of(srv, t) for t in texts]),
    ):
        status, body = srv.post("/v1/embeddings", {"input": inp, "model": "mtok-default"})
        assert status == 200, body
        assert body["object"] == "list" and body["model"] == "mtok-default"
        assert [d["index"] for d in body["data"]] == list(range(len(expected_ids)))
        for d, ids in zip(body["data"], expected_ids):
            assert d["object"] == "embedding" and close(d["embedding"], echo_embedding(ids))
        n = sum(map(len, expected_ids))
        assert body["usage"] == {"prompt_tokens": n, "total_tokens": n}


def test_base64_is_little_endian_float32(srv):
    status, body = srv.post("/v1/embeddings", {"input": "encode me", "encoding_format": "base64"})
    raw = base64.b64decode(body["data"][0]["embedding"])
    vec = struct.unpack(f"<{len(raw) // 4}f", raw)
    assert close(vec, echo_embedding(ids_of(srv, "encode me")))


def test_native_encode(srv):
    status, body = srv.post("/encode", {"text": "native"})
    assert status == 200 and close(body["embedding"], echo_embedding(ids_of(srv, "native")))
    assert body["meta_info"]["prompt_tokens"] == len(ids_of(srv, "native"))
    status, body = srv.post("/encode", {"input_ids": [[5, 6], [7]]})
    assert [close(b["embedding"], echo_embedding(i)) for b, i in zip(body, [[5, 6], [7]])] == [True, True]


def test_concurrent_embeddings_come_back_to_their_callers(srv):
    errors = []

    def client(k):
        conn = srv.conn()
        try:
            for i in range(25):
                ids = [k * 100 + i, 7, k]
                status, _, body = srv.request("POST", "/v1/embeddings", {"input": ids}, conn=conn)
                if status != 200 or not close(body["data"][0]["embedding"], echo_embedding(ids)):
                    errors.append((k, i, status))
        finally:
            conn.close()

    threads = [threading.Thread(target=client, args=(k,)) for k in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert errors == []


@pytest.mark.parametrize("body,param", [
    ({}, "input"), ({"input": []}, "input"), ({"input": [1, "a"]}, "input"), ({"input": 5}, "input"),
    ({"input": "x", "encoding_format": "hex"}, "encoding_format"), ({"input": "x", "dimensions": 3}, "dimensions"),
    ({"input": [10 ** 9]}, "input"), ({"input": "x", "embed_dtype": "float16"}, "embed_dtype"), ({"input": ""}, "input"),
])
def test_bad_embedding_requests(srv, body, param):
    status, resp = srv.post("/v1/embeddings", body)
    assert status == 400 and resp["error"]["param"] == param, resp
