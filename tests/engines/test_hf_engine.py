"""examples/hf_engine.py: a tiny randomly initialised GPT-2-shaped model served
through mtok with N = 2 must generate exactly what ``model.generate`` does
greedily, with logprobs equal to the model's own ``log_softmax``, under
concurrent requests of different lengths."""

from __future__ import annotations

import threading

import pytest

from support import import_real
from test_upstream_sglang import serving

torch = import_real("torch", reason="examples/hf_engine.py needs torch (pip install torch)")
transformers = import_real("transformers", reason="examples/hf_engine.py needs transformers")

pytestmark = [pytest.mark.timeout(300), pytest.mark.slow]

VOCAB = 8192  # mtok's built-in tokenizer
PROMPTS = ["Hi", "The quick brown fox jumps", "one two three four five six seven eight nine ten eleven", "a b"]
NEW = 12


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    torch.manual_seed(0)
    config = transformers.GPT2Config(vocab_size=VOCAB, n_positions=256, n_embd=32, n_layer=2, n_head=2)
    model = transformers.GPT2LMHeadModel(config).eval()
    path = tmp_path_factory.mktemp("tiny-gpt2")
    model.save_pretrained(path)
    return path, model


@pytest.fixture(scope="module")
def server(model_dir):
    with serving("--engine", "examples/hf_engine.py:HFEngine", "--tokenizer-worker-num", "2",
                 env={"MTOK_HF_MODEL": str(model_dir[0])}) as s:
        yield s


def reference(model, ids):
    out = model.generate(torch.tensor([ids]), do_sample=False, max_new_tokens=NEW, min_new_tokens=NEW,
                         eos_token_id=None, pad_token_id=0, attention_mask=torch.ones(1, len(ids), dtype=torch.long))
    new = out[0, len(ids):].tolist()
    with torch.no_grad():
        logits = model(out).logits[0]
    logprobs = torch.log_softmax(logits.float(), -1)
    return new, [float(logprobs[len(ids) + i - 1, t]) for i, t in enumerate(new)], logprobs


def test_greedy_equals_generate_and_logprobs_equal_log_softmax(server, model_dir):
    model = model_dir[1]
    results = {}

    def ask(i, text):
        results[i] = server.post("/generate", {
            "text": text, "sampling_params": {"max_new_tokens": NEW, "temperature": 0, "ignore_eos": True},
            "return_logprob": True, "top_logprobs_num": 3, "logprob_start_len": 1})
    threads = [threading.Thread(target=ask, args=(i, t)) for i, t in enumerate(PROMPTS * 2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    for i, text in enumerate(PROMPTS * 2):
        status, body = results[i]
        assert status == 200, body
        ids = server.post("/tokenize", {"prompt": text})[1]["tokens"]
        want, want_lp, table = reference(model, ids)
        assert body["output_ids"] == want, text
        got = body["meta_info"]["output_token_logprobs"]
        assert [r[1] for r in got] == want
        assert all(abs(r[0] - w) < 1e-4 for r, w in zip(got, want_lp)), (got, want_lp)
        top = body["meta_info"]["output_top_logprobs"][0]
        best = torch.topk(table[len(ids) - 1], 3)
        assert [t[1] for t in top] == best.indices.tolist()
        assert all(abs(t[0] - float(v)) < 1e-4 for t, v in zip(top, best.values))
        prompt_lp = body["meta_info"]["input_token_logprobs"]
        assert all(abs(r[0] - float(table[p, ids[p + 1]])) < 1e-4 for p, r in enumerate(prompt_lp))


def test_seeded_sampling_repeats_and_n(server):
    body = {"text": "sample me", "sampling_params": {"max_new_tokens": 8, "temperature": 1.0, "seed": 3,
                                                      "ignore_eos": True}}
    a, b = server.post("/generate", body), server.post("/generate", body)
    assert a[0] == b[0] == 200 and a[1]["output_ids"] == b[1]["output_ids"]
    status, out = server.post("/v1/completions", {"prompt": "sample me", "max_tokens": 6, "n": 2, "temperature": 0,
                                                  "ignore_eos": True})
    assert status == 200 and len(out["choices"]) == 2 and out["choices"][0]["text"] == out["choices"][1]["text"]
    greedy = {"input_ids": [5, 6, 7], "sampling_params": {"max_new_tokens": 8, "temperature": 0, "ignore_eos": True}}
    full = server.post("/generate", greedy)[1]["output_ids"]
    greedy["sampling_params"]["stop_token_ids"] = [full[3]]
    status, out = server.post("/generate", greedy)
    cut = full.index(full[3]) + 1
    assert status == 200 and out["output_ids"] == full[:cut], (full, out)
    assert out["meta_info"]["finish_reason"] == {"type": "stop", "matched": full[3]}
