"""Fixtures for tests against a real vLLM (``scripts/real_vllm.py``), loaded by
``conftest.py`` as a plugin so every test module shares one set of boots.

A vLLM boot costs 30-110 s here, so the engines are session-scoped and booted
side by side: ``vllm`` (the plain server: the reference whose own OpenAI
answers mtok's are compared with, and an upstream) and ``vllm_ids_only``
(``--skip-tokenizer-init``: the deployment mtok is for).  Both run with
``--enable-scale-out`` (the token route mtok's adapter uses).  ``front`` is mtok
in front of them, parametrized: N = 1 workers before the plain server, N = 2
before the ids-only one.  A test that kills an engine restarts it before it
ends (:func:`restarted`), so the session's engines are healthy for the next.

Where ``MTOK_VLLM_VENV`` is unset or holds no vLLM the tests skip with
:func:`support.skip_real` (a failure under ``MTOK_REQUIRE_REAL=1``, as CI sets).
``MTOK_VLLM_MODEL`` names a model directory already built; else it is built
once per session into a temporary directory.
"""

from __future__ import annotations

import contextlib
import http.client
import json
import os
import sys
from typing import Any, Dict, Iterator, List, Optional, Tuple

import pytest

from support import ROOT, Server, parse_sse, skip_real

sys.path.insert(0, os.path.join(ROOT, "scripts"))
import real_vllm  # noqa: E402

MODEL = "tiny-llama"  # the name both serve it under


class Peer:
    """A small HTTP client for a server that is not ours to start (vLLM)."""

    def __init__(self, port: int):
        self.host, self.port = "127.0.0.1", port

    def conn(self, timeout: float = 60.0) -> http.client.HTTPConnection:
        return http.client.HTTPConnection(self.host, self.port, timeout=timeout)

    def post(self, path: str, body: Any) -> Tuple[int, Any]:
        c = self.conn()
        try:
            c.request("POST", path, body=json.dumps(body), headers={"Content-Type": "application/json"})
            r = c.getresponse()
            raw = r.read()
            return r.status, json.loads(raw) if raw else None
        finally:
            c.close()

    def stream(self, path: str, body: Any) -> List[Any]:
        c = self.conn()
        try:
            c.request("POST", path, body=json.dumps(body), headers={"Content-Type": "application/json"})
            r = c.getresponse()
            assert r.status == 200, (r.status, r.read())
            return list(parse_sse(r))
        finally:
            c.close()

    def metric(self, name: str) -> float:
        """The sum of a Prometheus gauge's samples in ``/metrics``."""
        c = self.conn(10)
        try:
            c.request("GET", "/metrics")
            text = c.getresponse().read().decode()
        finally:
            c.close()
        return sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
                   if line.startswith(name + "{") or line.startswith(name + " "))

    def running(self) -> float:
        return self.metric("vllm:num_requests_running")

    def generated(self) -> float:
        """Every token vLLM has generated since it booted (aborted requests' too)."""
        return self.metric("vllm:generation_tokens_total")


@pytest.fixture(scope="session")
def vllm_venv() -> str:
    venv = os.environ.get("MTOK_VLLM_VENV")
    why = real_vllm.why_not_installed(venv)
    if why:
        skip_real(f"no real vLLM: {why}")
    return venv


@pytest.fixture(scope="session")
def vllm_model(vllm_venv, tmp_path_factory) -> str:
    given = os.environ.get("MTOK_VLLM_MODEL")
    out = given or str(tmp_path_factory.mktemp("tiny-llama"))
    try:
        return real_vllm.model_dir(out, vllm_venv)
    except FileNotFoundError as e:
        skip_real(f"the tiny model cannot be built: {e}")


@pytest.fixture(scope="session")
def vllm_engines(vllm_venv, vllm_model, tmp_path_factory) -> Iterator[Dict[str, real_vllm.VLLMServer]]:
    """Both engines, booted at once (each boot is mostly waiting on one core).
    Their logs go to pytest's temporary directories (the last few runs are kept)."""
    logs = tmp_path_factory.mktemp("vllm-logs")
    engines = {"plain": real_vllm.VLLMServer(vllm_venv, vllm_model, log_path=str(logs / "plain.log")),
               "ids_only": real_vllm.VLLMServer(vllm_venv, vllm_model, skip_tokenizer_init=True,
                                                log_path=str(logs / "ids_only.log"))}
    try:
        for e in engines.values():
            e.start()
        for e in engines.values():
            e.wait_healthy()
        yield engines
    finally:
        for e in engines.values():
            e.stop()
        report_engines(engines)


def report_engines(engines: Dict[str, real_vllm.VLLMServer]) -> None:
    for name, e in engines.items():
        rss = [round(r / 1024) for r in e.rss_history]
        print(f"\nreal vLLM {name}: boots {e.boot_history} s, each boot's peak RSS (its processes summed) {rss} MiB "
              f"(log {e.log_path})", file=sys.stderr)


@pytest.fixture(scope="session")
def vllm(vllm_engines) -> real_vllm.VLLMServer:
    """The plain vLLM: its own /v1 answers are the reference."""
    return vllm_engines["plain"]


@pytest.fixture(scope="session")
def vllm_ids_only(vllm_engines) -> real_vllm.VLLMServer:
    """vLLM with ``--skip-tokenizer-init``."""
    return vllm_engines["ids_only"]


@pytest.fixture(scope="session")
def ref(vllm) -> Peer:
    """A client of the plain vLLM."""
    return Peer(vllm.port)


def mtok_before(engine: real_vllm.VLLMServer, model: str, workers: int, *extra: str) -> Server:
    return Server("--engine", f"vllm:{engine.url}", "--tokenizer-path", model, "--served-model-name", MODEL,
                  "--tokenizer-worker-num", str(workers), *extra)


FRONTS = {"n1-plain": ("plain", 1), "n2-ids-only": ("ids_only", 2)}


@pytest.fixture(scope="session", params=sorted(FRONTS))
def front(request, vllm_engines, vllm_model) -> Iterator[Server]:
    """mtok in front of a real vLLM: N = 1 before the plain one, N = 2 before
    the ``--skip-tokenizer-init`` one.  ``front.engine`` is that vLLM."""
    which, workers = FRONTS[request.param]
    srv = mtok_before(vllm_engines[which], vllm_model, workers)
    srv.engine = vllm_engines[which]
    srv.workers = workers
    try:
        yield srv
    finally:
        srv.stop()


@contextlib.contextmanager
def restarted(engine: real_vllm.VLLMServer) -> Iterator[None]:
    """Whatever the body does to ``engine`` (kill it), it is booted again after."""
    try:
        yield
    finally:
        if not engine.healthy():
            engine.restart()


def incomplete_utf8(token: Optional[str]) -> bool:
    """A token string naming an incomplete UTF-8 byte sequence: mtok's U+FFFD, vLLM's ''
    (difference 6 of issue 26, kept on purpose)."""
    return token is not None and (token == "" or "\ufffd" in token)
