"""Several models behind one frontend, for N = 1 and N = 2."""

from __future__ import annotations

import json

import pytest

from mtok.tokenizer import DEFAULT_TOKENIZER_DIR

pytestmark = pytest.mark.fast

WORDS = ["[UNK]", "the", "cat", "sat", "on", "mat", "a", "dog", "ran", "away", "."]


@pytest.fixture(scope="module")
def words_tokenizer(tmp_path_factory):
    """A second, different tokenizer: word-level, built by hand."""
    d = tmp_path_factory.mktemp("words")
    spec = {
        "version": "1.0", "truncation": None, "padding": None, "added_tokens": [], "normalizer": None,
        "pre_tokenizer": {"type": "Whitespace"}, "post_processor": None, "decoder": None,
        "model": {"type": "WordLevel", "vocab": {w: i for i, w in enumerate(WORDS)}, "unk_token": "[UNK]"},
    }
    (d / "tokenizer.json").write_text(json.dumps(spec))
    return str(d)


@pytest.fixture(scope="module", params=[1, 2], ids=["N1", "N2"])
def srv(request, server_factory, words_tokenizer):
    return server_factory(
        "--tokenizer-worker-num", str(request.param),
        "--model", f"text={DEFAULT_TOKENIZER_DIR}",
        "--model", f"words={words_tokenizer}",
        "--model", f"bigram={DEFAULT_TOKENIZER_DIR}:examples/custom_engine.py:BigramEngine",
    )


def test_models_are_listed(srv):
    status, body = srv.get("/v1/models")
    assert status == 200
    assert [m["id"] for m in body["data"]] == ["text", "words", "bigram"]


def test_each_model_tokenizes_with_its_own_tokenizer(srv):
    a = srv.post("/tokenize", {"prompt": "the cat sat", "model": "words"})[1]
    assert a["tokens"] == [1, 2, 3]
    b = srv.post("/tokenize", {"prompt": "the cat sat"})[1]
    assert b["tokens"] != [1, 2, 3] and b == srv.post("/tokenize", {"prompt": "the cat sat", "model": "text"})[1]
    assert srv.post("/detokenize", {"tokens": [7, 8, 9], "model": "words"})[1] == {"prompt": "dog ran away", "text": "dog ran away"}
    assert srv.get("/get_model_info?model=words")[1]["vocab_size"] == len(WORDS)
    assert srv.get("/get_model_info")[1]["served_model_name"] == "text"


def test_generation_decodes_with_the_requests_model(srv):
    # The words decoder joins words with spaces, and output is decoded after the
    # prompt's last words (as SGLang and vLLM decode it): the echo begins " the".
    status, body = srv.post("/generate", {"text": "the dog ran", "model": "words", "sampling_params": {"max_new_tokens": 3}})
    assert status == 200 and body["output_ids"] == [1, 7, 8] and body["text"] == " the dog ran"
    status, body = srv.post("/v1/completions", {"prompt": "a cat.", "model": "words", "max_tokens": 3})
    assert body["model"] == "words" and body["choices"][0]["text"] == " a cat ."
    events = srv.stream("/v1/completions", {"prompt": "the mat", "model": "words", "max_tokens": 2, "stream": True})
    assert "".join(e["choices"][0]["text"] for e in events[:-1]) == " the mat"
    n = srv.post("/tokenize", {"prompt": "Hello there"})[1]["count"]
    status, body = srv.post("/generate", {"text": "Hello there", "sampling_params": {"max_new_tokens": n}})
    assert body["text"] == "Hello there"


def test_each_model_has_its_own_engine(srv):
    ids = srv.post("/tokenize", {"prompt": "the cat sat on the mat", "model": "bigram"})[1]["tokens"]
    status, body = srv.post("/generate", {"input_ids": ids, "model": "bigram",
                                          "sampling_params": {"max_new_tokens": 12, "seed": 1}})
    assert status == 200
    pairs = set(zip(ids, ids[1:] + ids[:1]))
    assert all(p in pairs for p in zip(body["output_ids"], body["output_ids"][1:]))
    echo = srv.post("/generate", {"input_ids": ids, "model": "text", "sampling_params": {"max_new_tokens": len(ids)}})[1]
    assert echo["output_ids"] == ids


def test_batches_mixing_models_stay_apart(srv):
    import threading
    results = {}

    def go(i, model, text):
        results[i] = srv.post("/generate", {"text": text, "model": model, "sampling_params": {"max_new_tokens": 2}})

    threads = [threading.Thread(target=go, args=(i, m, t)) for i, (m, t) in
               enumerate([("words", "the cat"), ("text", "the cat"), ("words", "a dog")] * 5)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    for i, (m, t) in enumerate([("words", "the cat"), ("text", "the cat"), ("words", "a dog")] * 5):
        status, body = results[i]
        assert status == 200
        if m == "words":
            assert body["text"] == " " + t  # decoded after the prompt: the words decoder's space


def test_unknown_model_is_an_openai_404(srv):
    for path, body in (("/v1/completions", {"prompt": "x", "model": "nope"}), ("/generate", {"text": "x", "model": "nope"}),
                       ("/tokenize", {"prompt": "x", "model": "nope"}), ("/v1/embeddings", {"input": "x", "model": "nope"})):
        status, resp = srv.post(path, body)
        assert status == 404 and resp["error"]["type"] == "not_found_error" and resp["error"]["param"] == "model"
        assert "nope" in resp["error"]["message"]
    assert srv.get("/get_model_info?model=nope")[0] == 404
