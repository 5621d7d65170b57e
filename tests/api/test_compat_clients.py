"""Unmodified SGLang clients against mtok: ``bench_serving`` with every backend a
user would point at an SGLang server (with logprobs and cache flushes), N = 1
and 2, and the frontend language's ``gen`` and ``select``.

sglang is installed with ``pip install --no-deps sglang`` plus the packages its
client imports (.ci/requirements-real.txt); it needs no GPU.  Without it these
tests skip (``skip_real``).
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
import textwrap

import pytest

from support import ROOT, skip_real
from mtok.tokenizer import DEFAULT_TOKENIZER_DIR

pytestmark = [pytest.mark.slow, pytest.mark.real, pytest.mark.timeout(300)]

PROMPTS, INPUT_LEN, OUTPUT_LEN = 8, 32, 16
OFFLINE = dict(os.environ, HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", PYTHONWARNINGS="ignore")
RUNS = {
    "sglang": ["--backend", "sglang"],
    "sglang-logprob-flush": ["--backend", "sglang", "--return-logprob", "--top-logprobs-num", "2", "--flush-cache"],
    "sglang-oai": ["--backend", "sglang-oai"],
    "sglang-oai-logprob": ["--backend", "sglang-oai", "--return-logprob", "--top-logprobs-num", "2"],
    "sglang-oai-chat": ["--backend", "sglang-oai-chat"],
    "vllm": ["--backend", "vllm"],
}


@pytest.fixture(scope="module", params=[1, 2], ids=["N1", "N2"])
def srv(request, server_factory):
    if importlib.util.find_spec("sglang") is None:  # run in a subprocess: not imported here
        skip_real("sglang is not installed (its clients are what is under test)")
    return server_factory("--tokenizer-worker-num", str(request.param),
                          "--chat-template", os.path.join(ROOT, "examples", "chat_template_echo_last.jinja"))


def flushes(srv):
    text = srv.request("GET", "/metrics")[2].decode()
    return sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
               if line.startswith('mtok_requests_total{endpoint="/flush_cache",status="200"}'))


@pytest.mark.parametrize("run", list(RUNS))
def test_bench_serving(srv, tmp_path, run):
    out = tmp_path / "result.jsonl"
    cmd = [sys.executable, "-m", "sglang.bench_serving", *RUNS[run], "--base-url", f"http://{srv.host}:{srv.port}",
           "--dataset-name", "random-ids", "--random-input-len", str(INPUT_LEN), "--random-output-len",
           str(OUTPUT_LEN), "--random-range-ratio", "1", "--num-prompts", str(PROMPTS),
           "--tokenizer", DEFAULT_TOKENIZER_DIR, "--disable-tqdm", "--output-file", str(out)]
    before = flushes(srv)
    proc = subprocess.run(cmd, cwd=str(tmp_path), env=OFFLINE, capture_output=True, text=True, timeout=150)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    result = json.loads(out.read_text().splitlines()[-1])
    assert result["completed"] == PROMPTS, result
    assert result["total_output_tokens"] == PROMPTS * OUTPUT_LEN
    assert flushes(srv) == before + ("--flush-cache" in RUNS[run])


FRONTEND = textwrap.dedent("""
    import json, sys
    import sglang as sgl

    sgl.set_default_backend(sgl.RuntimeEndpoint(sys.argv[1]))

    @sgl.function
    def answer(s):
        s += "Is the sky blue? Answer: yes. "
        s += sgl.gen("echoed", max_tokens=20, stop=["?"])
        s += sgl.select("choice", choices=["yes", "no", "maybe"])

    state = answer.run()
    meta = state.get_meta_info("choice")
    print(json.dumps({"echoed": state["echoed"], "choice": state["choice"], "scores": meta["normalized_prompt_logprobs"]}))
""")


def test_frontend_language_gen_and_select(srv, tmp_path):
    script = tmp_path / "frontend.py"
    script.write_text(FRONTEND)
    proc = subprocess.run([sys.executable, str(script), f"http://{srv.host}:{srv.port}"], env=OFFLINE,
                          capture_output=True, text=True, timeout=150, cwd=str(tmp_path))
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    got = json.loads(proc.stdout.strip().splitlines()[-1])
    # The echo engine repeats the prompt until the stop string; select scores each choice by
    # its tokens' logprobs (-ln 2 each with the echo engine) and picks the best.
    assert got["echoed"] == "Is the sky blue"
    assert got["choice"] in ("yes", "no", "maybe") and len(got["scores"]) == 3


def test_bench_serving_lora_name_is_a_clear_refusal(srv, tmp_path):
    """The echo engine has no adapters: --lora-name fails at warm-up with a 400 naming lora_path."""
    cmd = [sys.executable, "-m", "sglang.bench_serving", "--backend", "sglang", "--lora-name", "my-adapter",
           "--base-url", f"http://{srv.host}:{srv.port}", "--dataset-name", "random-ids", "--random-input-len", "8",
           "--random-output-len", "4", "--num-prompts", "2", "--tokenizer", DEFAULT_TOKENIZER_DIR, "--disable-tqdm"]
    proc = subprocess.run(cmd, cwd=str(tmp_path), env=OFFLINE, capture_output=True, text=True, timeout=150)
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0 and "lora_path" in out and "capability" in out, out[-3000:]
