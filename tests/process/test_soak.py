"""A bounded soak: 30 s of mixed load at concurrency 32 on two workers.

Zero errors, zero misrouted responses, and the server's memory and file
descriptors end within 10 % of where they stood after warm-up.  (A longer
soak: ``python -m mtok.bench soak``.)
"""

from __future__ import annotations

import os
import threading
import time

import pytest

from support import Server, children_of
from load import run_load

pytestmark = pytest.mark.slow

WARMUP, DURATION = 8.0, 30.0


def footprint(pid: int):
    """Total RSS (bytes) and open fds of a process and all its descendants."""
    rss = fds = 0
    for p in [pid] + children_of(pid):
        try:
            with open(f"/proc/{p}/status") as f:
                for line in f:
                    if line.startswith("VmRSS:"):
                        rss += int(line.split()[1]) * 1024
            fds += len(os.listdir(f"/proc/{p}/fd"))
        except OSError:
            pass
    return rss, fds


@pytest.mark.timeout(180)
def test_soak_holds_steady():
    srv = Server("--tokenizer-worker-num", "2", "--engine-step-delay", "0.002")
    try:
        stop = threading.Event()
        box = {}
        kinds = ("generate", "generate-stream", "completions", "completions-stream", "generate-batch")
        t = threading.Thread(target=lambda: box.setdefault("r", run_load(
            srv.host, srv.port, total=10 ** 7, concurrency=32, kinds=kinds, max_new_tokens=24, stop=stop)))
        start = time.monotonic()
        t.start()
        stop.wait(WARMUP)  # a fixed warm-up period, not synchronisation
        rss0, fds0 = footprint(srv.pid)
        samples = []
        while time.monotonic() - start < DURATION:
            stop.wait(2.0)
            samples.append(footprint(srv.pid))
        rss1, fds1 = footprint(srv.pid)
        stop.set()
        t.join(60)
        result = box["r"]
        assert len(result.outcomes) > 1000
        assert result.errors == [], result.errors[:5]
        assert rss1 <= rss0 * 1.10, f"RSS grew from {rss0} to {rss1} bytes; samples {samples}"
        assert fds1 <= fds0 * 1.10 + 2, f"fds grew from {fds0} to {fds1}; samples {samples}"
        info = srv.info()
        assert info["worker_restarts"] == 0
    finally:
        assert srv.stop() == 0
