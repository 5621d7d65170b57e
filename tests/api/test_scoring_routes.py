"""/v1/score and /v1/rerank in SGLang's shapes, over a real server with the echo engine.

The echo engine's scores are predictable (mtok.engines.echo): after a prompt P the
next token is P[0], and label t has probability 2^-(1 + (t - P[0]) mod V); its
reranking is the cosine of the two texts' embeddings.
"""

from __future__ import annotations

import math

import pytest

from mtok.engines.echo import echo_embedding

pytestmark = pytest.mark.fast


@pytest.fixture(scope="module", params=[["--tokenizer-worker-num", "1"], ["--tokenizer-worker-num", "2"],
                                        ["--http-threads-only"]], ids=["N1", "N2", "threads"])
def srv(request, server_factory):
    return server_factory(*request.param, "--max-prompts-per-request", "8")


def echo_p(first, t, v=8192):
    return 2.0 ** -(1 + (t - first) % v)


def test_token_ids_score_as_the_echo_engine_predicts(srv):
    status, body = srv.post("/v1/score", {"query": [5, 6], "items": [[7], [8, 9]], "label_token_ids": [5, 7, 8],
                                          "return_token_logprobs": True})
    assert status == 200, body
    assert body["object"] == "scoring" and body["model"] == "mtok-default"
    for row in body["scores"]:
        assert row == pytest.approx([echo_p(5, 5), echo_p(5, 7), echo_p(5, 8)])
    assert body["token_logprobs"][0] == pytest.approx([math.log(echo_p(5, t)) for t in (5, 7, 8)])
    assert body["usage"] == {"prompt_tokens": 3 + 4, "completion_tokens": 0, "total_tokens": 7}


def test_item_first_softmax_and_per_item_labels(srv):
    status, body = srv.post("/v1/score", {"query": [5], "items": [[7, 1], [9]], "item_first": True,
                                          "label_token_ids": [[7, 8], [9, 10, 11]], "apply_softmax": True})
    assert status == 200, body
    first, second = body["scores"]
    assert first == pytest.approx([2 / 3, 1 / 3]) and second == pytest.approx([4 / 7, 2 / 7, 1 / 7])
    _, hot = srv.post("/v1/score", {"query": [5], "items": [[7]], "label_token_ids": [7, 8], "apply_softmax": True,
                                    "temperature": 0.5})
    assert hot["scores"][0] == pytest.approx([0.8, 0.2])  # logprobs halved by T: weights 4 : 1


def test_text_score_sums_to_one_with_softmax(srv):
    status, body = srv.post("/v1/score", {"query": "The capital of France is", "items": ["Paris", "London", "Berlin"],
                                          "label_token_ids": [10, 20, 30], "apply_softmax": True})
    assert status == 200, body
    assert len(body["scores"]) == 3 and all(abs(sum(r) - 1) < 1e-9 for r in body["scores"])


@pytest.mark.parametrize("extra, message", [
    ({"label_token_ids": [999999]}, "Token ID 999999 is out of vocabulary (vocab size: "),
    ({"label_token_ids": None}, "label_token_ids is required"),
    ({"label_token_ids": [1, 1]}, "label_token_ids must not contain duplicate tokens"),
    ({"label_token_ids": [[1], [2]]}, "label_token_ids must have one list per item"),
    ({"label_token_ids": [1], "temperature": 2.0}, "temperature requires apply_softmax=True"),
    ({"label_token_ids": [1], "items": None}, "items must be provided"),
    ({"label_token_ids": [1], "query": [1, 2]}, "Invalid combination of query/items types"),
    ({"label_token_ids": [1], "items": ["x"] * 9}, "at most 8 are allowed (--max-prompts-per-request)"),
])
def test_score_errors_in_sglangs_words_and_shape(srv, extra, message):
    body = dict({"query": "The capital of France is", "items": ["Paris", "London", "Berlin"]}, **extra)
    status, err = srv.post("/v1/score", {k: v for k, v in body.items() if v is not None})
    assert status == 400, err
    assert err["object"] == "error" and err["type"] == "BadRequestError" and err["code"] == 400
    assert message in err["message"] and err["error"]["message"] == err["message"]
    assert srv.post("/v1/score", {"query": [5], "items": [[6]], "label_token_ids": [5]})[0] == 200  # still serving


def test_empty_items_score_nothing(srv):
    assert srv.post("/v1/score", {"query": "q", "items": [], "label_token_ids": [1]})[1]["scores"] == []


def test_rerank_ranks_by_embedding_cosine(srv):
    docs = ["goodbye", "hello world", "world hello there"]
    status, body = srv.post("/v1/rerank", {"query": "hello world", "documents": docs})
    assert status == 200, body
    assert [r["index"] for r in body] == [1, 2, 0] and [r["document"] for r in body] == [docs[1], docs[2], docs[0]]
    ids = {t: srv.post("/tokenize", {"prompt": t})[1]["tokens"] for t in ["hello world", *docs]}
    q = echo_embedding(ids["hello world"])
    for r in body:
        d = echo_embedding(ids[docs[r["index"]]])
        assert r["score"] == pytest.approx(sum(x * y for x, y in zip(q, d)))
    status, top = srv.post("/v1/rerank", {"query": "hello world", "documents": docs, "top_n": 1,
                                          "return_documents": False})
    assert status == 200 and len(top) == 1 and top[0]["index"] == 1 and "document" not in top[0]


@pytest.mark.parametrize("body, message", [
    ({"query": "", "documents": ["a"]}, "Query cannot be empty"),
    ({"query": "   ", "documents": ["a"]}, "Query cannot be empty or whitespace only"),
    ({"query": "q", "documents": []}, "Documents cannot be empty"),
    ({"query": "q", "documents": ["a", ""]}, "Each document must be a non-empty string"),
    ({"query": "q", "documents": [" "]}, "Each document cannot be empty or whitespace only"),
    ({"query": "q", "documents": ["a"], "top_n": 0}, "parameter top_n should be larger than 0"),
    ({"query": "q", "documents": ["a"] * 8}, "at most 8 are allowed"),
    ({"query": "q", "documents": ["a"], "instruct": "judge"}, "'instruct' is not supported here"),
])
def test_rerank_errors_in_sglangs_words_and_shape(srv, body, message):
    status, err = srv.post("/v1/rerank", body)
    assert status == 400, err
    assert err["type"] == "BadRequestError" and message in err["message"], err
    assert srv.post("/v1/rerank", {"query": "q", "documents": ["q"]})[0] == 200


def test_an_engine_that_cannot_score_refuses(server_factory, tmp_path):
    engine = tmp_path / "plain.py"
    engine.write_text("from mtok.engines import Engine\n\nclass Plain(Engine):\n"
                      "    def step(self, batch):\n        return [1 for _ in batch]\n")
    srv = server_factory("--engine", f"{engine}:Plain")
    status, err = srv.post("/v1/score", {"query": [5], "items": [[6]], "label_token_ids": [5]})
    assert status == 400 and err["type"] == "BadRequestError", err
    assert err["message"].startswith("scoring needs the label ids' logprobs: ") and "capability" in err["message"]
    status, err = srv.post("/v1/rerank", {"query": "q", "documents": ["d"]})
    assert status == 400 and err["type"] == "BadRequestError", err
    assert err["message"] == "reranking compares embeddings: Plain does not produce embeddings", err
    assert srv.post("/generate", {"text": "still", "sampling_params": {"max_new_tokens": 1}})[0] == 200


def test_an_upstream_sglang_computes_the_scores(server_factory):
    """mtok asks the upstream's /generate what SGLang's own /v1/score asks its scheduler: one token, with
    the labels' logprobs by id; the scores are what the upstream answered."""
    from upstream_standin import SGLangStandIn

    standin = SGLangStandIn()
    try:
        srv = server_factory("--engine", f"sglang:{standin.url}?timeout=10")
        status, body = srv.post("/v1/score", {"query": [5, 6], "items": [[7], [8]], "label_token_ids": [9, 4]})
        assert status == 200, body
        assert body["scores"] == [[pytest.approx(math.exp(-2.0)), pytest.approx(math.exp(-1.0))]] * 2
        sent = standin.seen
        assert sorted(s["input_ids"] for s in sent) == [[5, 6, 7], [5, 6, 8]]
        assert all(s["token_ids_logprob"] == [4, 9] and s["sampling_params"]["max_new_tokens"] == 1 for s in sent)
        status, body = srv.post("/v1/score", {"query": [5], "items": [[6]], "label_token_ids": [9, 4],
                                              "apply_softmax": True})
        assert body["scores"][0] == pytest.approx([1 / (1 + math.e), math.e / (1 + math.e)])
    finally:
        standin.stop()
