"""SGLang's own load generator, ``bench_serving --backend sglang-oai-chat``, against
/v1/chat/completions: every request succeeds and every token it asked for is counted,
streamed (SSE chunks parsed by SGLang's client) and not."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys

import pytest

from support import ROOT, skip_real
from mtok.tokenizer import DEFAULT_TOKENIZER_DIR

pytestmark = pytest.mark.real

PROMPTS, INPUT_LEN, OUTPUT_LEN = 16, 64, 32


@pytest.fixture(scope="module")
def srv(server_factory):
    if importlib.util.find_spec("sglang") is None:  # run in a subprocess: not imported here
        skip_real("sglang is not installed (its bench_serving is the client under test)")
    return server_factory("--tokenizer-worker-num", "2",
                          "--chat-template", os.path.join(ROOT, "examples", "chat_template_echo_last.jinja"))


@pytest.mark.parametrize("stream", [True, False], ids=["stream", "no-stream"])
def test_bench_serving_chat(srv, tmp_path, stream):
    out = tmp_path / "result.jsonl"
    cmd = [sys.executable, "-m", "sglang.bench_serving", "--backend", "sglang-oai-chat",
           "--base-url", f"http://{srv.host}:{srv.port}", "--dataset-name", "random-ids",
           "--random-input-len", str(INPUT_LEN), "--random-output-len", str(OUTPUT_LEN), "--random-range-ratio", "1",
           "--num-prompts", str(PROMPTS), "--tokenizer", DEFAULT_TOKENIZER_DIR, "--disable-tqdm",
           "--output-file", str(out)] + ([] if stream else ["--disable-stream"])
    env = dict(os.environ, HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1")
    run = subprocess.run(cmd, cwd=str(tmp_path), env=env, capture_output=True, text=True, timeout=100)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    result = json.loads(out.read_text().splitlines()[-1])
    assert result["completed"] == PROMPTS
    assert result["total_output_tokens"] == PROMPTS * OUTPUT_LEN  # from the usage the server reports
    # From the text the client got: retokenizing a cut of a tokenization may merge differently at the cut.
    assert abs(result["total_output_tokens_retokenized"] - PROMPTS * OUTPUT_LEN) <= PROMPTS
