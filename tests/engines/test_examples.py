"""The examples work: a custom engine served end to end, and the client script."""

from __future__ import annotations

import subprocess
import sys

import pytest

from support import ROOT

pytestmark = pytest.mark.fast


@pytest.fixture(scope="module")
def srv(server_factory):
    return server_factory("--engine", "examples/custom_engine.py:BigramEngine")


def test_custom_engine_generates_from_prompt_bigrams(srv):
    ids = srv.post("/tokenize", {"prompt": "the cat sat on the mat"})[1]["tokens"]
    status, body = srv.post("/generate", {"input_ids": ids, "sampling_params": {"max_new_tokens": 12, "seed": 3}})
    assert status == 200, body
    out = body["output_ids"]
    assert len(out) == 12 and out[0] == ids[0]
    successors = {(a, b) for a, b in zip(ids, ids[1:] + ids[:1])}
    assert all((a, b) in successors for a, b in zip(out, out[1:]))
    again = srv.post("/generate", {"input_ids": ids, "sampling_params": {"max_new_tokens": 12, "seed": 3}})[1]
    assert again["output_ids"] == out


def test_client_script_streams(srv):
    for extra in ([], ["--openai"]):
        out = subprocess.run([sys.executable, "examples/client.py", "hello there", "--port", str(srv.port),
                              "--max-tokens", "3", *extra], cwd=ROOT, capture_output=True, text=True, timeout=60)
        assert out.returncode == 0, out.stderr
        assert out.stdout.strip() == "hello there"


BROKEN_ENGINE = '''
from mtok.engines import Engine

class Broken(Engine):
    def step(self, batch):
        return [-1 if b.input_ids[0] == 1 else 10 ** 9 if b.input_ids[0] == 2 else 1.5 for b in batch]
'''


def test_an_engine_returning_bad_ids_fails_its_requests_not_the_server(server_factory, tmp_path):
    path = tmp_path / "broken_engine.py"
    path.write_text(BROKEN_ENGINE)
    srv = server_factory("--engine", f"{path}:Broken")
    for first in (1, 2, 3):
        status, body = srv.post("/generate", {"input_ids": [first, 5], "sampling_params": {"max_new_tokens": 2}})
        assert status == 500 and "engine" in body["error"]["message"], body
    assert srv.get("/health")[0] == 200
