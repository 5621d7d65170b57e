"""Start, stop and die: nothing is left behind, ever."""

from __future__ import annotations

import glob
import json
import os
import signal
import tempfile
import threading

import pytest

from support import Server, children_of, wait_for

from mtok.procutil import pid_alive

pytestmark = pytest.mark.fast


def leftovers(pid):
    dirs = glob.glob(os.path.join(tempfile.gettempdir(), f"mtok-{pid}-*"))
    shm = glob.glob(f"/dev/shm/mtok_*_{pid}")
    return dirs + shm


@pytest.mark.parametrize("workers", [1, 2])
@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_signal_stops_cleanly(workers, sig):
    srv = Server("--tokenizer-worker-num", str(workers))
    kids = children_of(srv.pid)
    assert len(kids) >= 2 + (workers if workers > 1 else 0)
    assert leftovers(srv.pid), "expected a socket directory and shared memory while running"
    sock_dir = glob.glob(os.path.join(tempfile.gettempdir(), f"mtok-{srv.pid}-*"))[0]
    assert os.stat(sock_dir).st_mode & 0o777 == 0o700
    for seg in glob.glob(f"/dev/shm/mtok_*_{srv.pid}"):
        assert os.stat(seg).st_mode & 0o777 == 0o600
    assert srv.stop(sig) == 0, srv.stderr()
    # multiprocessing's resource tracker leaves on its own once its pipe closes
    wait_for(lambda: not [k for k in kids if pid_alive(k)], timeout=2.0, what="every child to exit")
    assert leftovers(srv.pid) == []
    assert "Traceback" not in srv.stderr(), srv.stderr()


@pytest.mark.parametrize("workers", [1, 2])
def test_sigkill_of_main_takes_children_down(workers):
    srv = Server("--tokenizer-worker-num", str(workers))
    kids = children_of(srv.pid)
    assert kids
    srv.proc.kill()
    srv.proc.wait()
    wait_for(lambda: not [k for k in kids if pid_alive(k)], timeout=2.0, what="children to exit")
    # The next server removes what the killed one could not.
    stale = glob.glob(f"/dev/shm/mtok_*_{srv.pid}")
    nxt = Server()
    try:
        for seg in stale:
            assert not os.path.exists(seg)
        assert leftovers(srv.pid) == []
    finally:
        nxt.stop()


@pytest.mark.parametrize("workers", [1, 2])
def test_sigterm_lets_requests_in_flight_finish(workers):
    srv = Server("--tokenizer-worker-num", str(workers), "--engine-step-delay", "0.01", "--graceful-timeout", "20")
    n = 60  # about 0.6 s of generation
    result = {}
    conn = srv.conn()
    conn.request("POST", "/generate", body=json.dumps({"text": "x", "sampling_params": {"max_new_tokens": n}}))

    def read():
        resp = conn.getresponse()
        result["status"], result["body"] = resp.status, json.loads(resp.read())

    t = threading.Thread(target=read)
    t.start()
    probe = Server.__new__(Server)
    probe.host, probe.port = srv.host, srv.port
    wait_for(lambda: probe.info()["scheduler"]["num_running"] == 1, what="the request to start")
    srv.proc.send_signal(signal.SIGTERM)
    t.join(20)
    assert result.get("status") == 200, result
    assert result["body"]["meta_info"]["completion_tokens"] == n
    assert srv.proc.wait(30) == 0
    assert leftovers(srv.pid) == []


def test_boot_failure_halts_with_a_message():
    srv = Server("--tokenizer-path", "/nonexistent/tokenizer.json", expect_ready=False)
    code = srv.proc.wait(60)
    assert code == 3
    assert "no tokenizer.json" in srv.stderr()
    assert leftovers(srv.pid) == []
