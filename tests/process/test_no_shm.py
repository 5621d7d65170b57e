"""The server without shared memory: arguments over the process-start pipe,
the status board in a file in the private socket directory."""

from __future__ import annotations

import glob
import os
import tempfile

import pytest

from support import Server, children_of, wait_for

from mtok.procutil import pid_alive
from test_lifecycle import leftovers

pytestmark = pytest.mark.fast

NO_SHM = {"MTOK_SHM_DIR": "/nonexistent/mtok-no-shm"}


@pytest.mark.parametrize("workers", [1, 2])
def test_serves_without_shared_memory(workers):
    srv = Server("--tokenizer-worker-num", str(workers), env=NO_SHM)
    try:
        kids = children_of(srv.pid)
        assert glob.glob(f"/dev/shm/mtok_*_{srv.pid}") == []
        sock_dir = glob.glob(os.path.join(tempfile.gettempdir(), f"mtok-{srv.pid}-*"))[0]
        board = os.path.join(sock_dir, "status")
        assert os.stat(board).st_mode & 0o777 == 0o600
        for text in ("Hello, world", "another prompt"):
            n = srv.post("/tokenize", {"prompt": text})[1]["count"]
            status, body = srv.post("/generate", {"text": text, "sampling_params": {"max_new_tokens": n}})
            assert status == 200, body
            assert body["text"] == text
        assert srv.get("/health") == (200, {"status": "ok"})
        info = srv.info()  # read off the board: every worker, its heartbeat, the scheduler's pid
        assert len(info["workers"]) == workers and all(w["state"] == "ready" for w in info["workers"])
        assert info["processes"]["scheduler"] in kids
        # metrics snapshots travel through the board too: a scrape counts the requests above,
        # whichever worker served them (another worker's count arrives with its next tick,
        # within a poll interval)
        def served() -> float:
            status, _, text = srv.request("GET", "/metrics")
            assert status == 200
            text = text.decode() if isinstance(text, bytes) else text
            return sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
                       if line.startswith("mtok_requests_total{") and 'endpoint="/generate"' in line)

        wait_for(lambda: served() == 2, timeout=10, interval=0.1, what="both /generate requests in /metrics")
    finally:
        assert srv.stop() == 0, srv.stderr()
    wait_for(lambda: not [k for k in kids if pid_alive(k)], timeout=5.0, what="every child to exit")
    assert leftovers(srv.pid) == []
    assert "Traceback" not in srv.stderr(), srv.stderr()
