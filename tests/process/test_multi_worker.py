"""Multi-worker mode under load: every response is its own prompt's echo, every
worker serves, and a worker killed mid-load is replaced without harm to others."""

from __future__ import annotations

import os
import signal
import threading
import time

import pytest

from support import Server, wait_for

from mtok.procutil import pid_alive
from load import run_load


@pytest.mark.parametrize("workers", [1, 2, 4])
def test_mixed_load_is_routed_back_exactly(workers):
    srv = Server("--tokenizer-worker-num", str(workers))
    try:
        result = run_load(srv.host, srv.port, total=2000, concurrency=64)
        assert len(result.outcomes) == 2000
        assert result.errors == [], result.errors[:5]
        pids = {w["pid"] for w in srv.info()["workers"]}
        assert result.workers == pids, "every worker should have served"
        info = srv.info()
        assert sum(w["served"] for w in info["workers"]) >= 2000 or wait_for(
            lambda: sum(w["served"] for w in srv.info()["workers"]) >= 2000, what="served counters")
        assert info["scheduler"]["num_running"] == 0 and info["scheduler"]["num_waiting"] == 0
    finally:
        assert srv.stop() == 0


def test_reuseport_mode_serves_from_every_worker():
    srv = Server("--tokenizer-worker-num", "2", "--listen-mode", "reuseport")
    try:
        result = run_load(srv.host, srv.port, total=400, concurrency=16)
        assert result.errors == [], result.errors[:5]
        assert result.workers == {w["pid"] for w in srv.info()["workers"]}
    finally:
        assert srv.stop() == 0


def test_killed_worker_is_replaced_and_others_are_unharmed():
    srv = Server("--tokenizer-worker-num", "3", "--engine-step-delay", "0.003")
    try:
        before = srv.info()["workers"]
        victim = before[1]
        stop = threading.Event()
        seen_victim = threading.Event()

        def note(outcome):
            if outcome.worker == victim["pid"]:
                seen_victim.set()

        box = {}
        t = threading.Thread(target=lambda: box.setdefault("r", run_load(
            srv.host, srv.port, total=100000, concurrency=24, max_new_tokens=40, stop=stop, on_outcome=note)))
        t.start()
        seen_victim.wait(30)
        wait_for(lambda: victim["ipc_name"] in srv.info()["scheduler"]["requests_by_worker"],
                 what="the victim to have requests in flight")
        killed_at = time.monotonic()
        os.kill(victim["pid"], signal.SIGKILL)

        def replaced():
            ws = srv.info()["workers"]
            return len(ws) == 3 and victim["pid"] not in {w["pid"] for w in ws} and all(
                w["state"] == "ready" for w in ws)

        wait_for(replaced, timeout=5, interval=0.05, what="the replacement worker")
        assert time.monotonic() - killed_at < 2.5
        info = srv.info()
        assert info["worker_restarts"] == 1
        # the scheduler keeps nothing of the dead worker
        wait_for(lambda: victim["ipc_name"] not in srv.info()["scheduler"]["requests_by_worker"],
                 timeout=2, what="the dead worker's requests to be aborted")
        time.sleep(0.5)  # let the load run on the replacement for a moment (not synchronisation)
        stop.set()
        t.join(60)
        result = box["r"]
        # requests on the victim's connections may fail; no other may
        others_failed = [o for o in result.errors if o.conn_worker != victim["pid"]]
        assert others_failed == [], others_failed[:5]
        assert len(result.outcomes) > 100
        new_pid = ({w["pid"] for w in srv.info()["workers"]} - {w["pid"] for w in before}).pop()
        served_by = set()
        for _ in range(200):  # fresh connections spread over the workers, the new one included
            served_by.add(int(srv.request("GET", "/health")[1]["x-mtok-worker"]))
            if new_pid in served_by:
                break
        assert new_pid in served_by, "the replacement should serve new connections"
        assert not pid_alive(victim["pid"])
        wait_for(lambda: srv.info()["scheduler"]["num_running"] == 0, what="an idle scheduler")
    finally:
        assert srv.stop() == 0
