"""Faults and limits: hung and dying processes, backpressure, slow clients, keys."""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import threading
import time

import pytest

from support import Server, children_of, parse_sse, wait_for

from mtok.procutil import pid_alive
from mtok.tokenizer import DEFAULT_TOKENIZER_DIR
from test_lifecycle import leftovers

pytestmark = pytest.mark.fast


def worker_pids(srv):
    return [w["pid"] for w in srv.info()["workers"]]


def test_hung_worker_is_killed_and_replaced():
    srv = Server("--tokenizer-worker-num", "2", "--worker-timeout", "1")
    try:
        hung, other = worker_pids(srv)
        os.kill(hung, signal.SIGSTOP)
        stopped_at = time.monotonic()

        def replaced():
            try:
                ws = srv.info()["workers"]
            except OSError:
                return False
            return hung not in [w["pid"] for w in ws] and all(w["state"] == "ready" for w in ws)

        wait_for(replaced, timeout=6, interval=0.1, what="the hung worker to be replaced")
        assert time.monotonic() - stopped_at < 1 + 3
        assert not pid_alive(hung)
        assert other in worker_pids(srv)
        assert srv.info()["worker_restarts"] == 1
        assert srv.stderr().count("missed its heartbeat") == 1  # once per process, not once per pass
    finally:
        assert srv.stop() == 0


def test_a_paused_server_kills_none_of_its_workers():
    """A worker was killed for "missed its heartbeat for 1165.8 s" while serving: the whole server had
    been stopped (a process group stopped, a host paused) and the supervisor, waking first, took
    every heartbeat's age for the workers' silence."""
    srv = Server("--tokenizer-worker-num", "2", "--worker-timeout", "2")
    try:
        before = worker_pids(srv)
        kids = children_of(srv.pid)
        for pid in [srv.pid] + kids:
            os.kill(pid, signal.SIGSTOP)
        time.sleep(4)  # the pause: twice the workers' timeout
        os.kill(srv.pid, signal.SIGCONT)
        time.sleep(0.3)  # the supervisor wakes first, as it may
        for pid in kids:
            os.kill(pid, signal.SIGCONT)
        assert srv.post("/generate", {"text": "after the pause", "sampling_params": {"max_new_tokens": 2}})[0] == 200
        assert worker_pids(srv) == before and srv.info()["worker_restarts"] == 0
        assert "missed its heartbeat" not in srv.stderr()
    finally:
        assert srv.stop() == 0


# Started in every process of a server under test: a tick of the HTTP loop in the process whose pid
# the file named by MTOK_TEST_LOOP_DIES holds raises, as a bug escaping the loop would.
_LOOP_DIES = """
import os
if os.environ.get("MTOK_TEST_LOOP_DIES"):
    from mtok.api import server

    class InjectedLoopDeath(BaseException):
        pass

    tick = server.HTTPServer.service_actions

    def service_actions(self):
        try:
            with open(os.environ["MTOK_TEST_LOOP_DIES"]) as f:
                doomed = f.read().strip()
        except OSError:
            doomed = ""
        if doomed == str(os.getpid()):
            raise InjectedLoopDeath("the test's")
        tick(self)

    server.HTTPServer.service_actions = service_actions
"""


def _loop_dies_env(tmp_path):
    (tmp_path / "sitecustomize.py").write_text(_LOOP_DIES)
    path = os.pathsep.join(filter(None, [str(tmp_path), os.environ.get("PYTHONPATH")]))
    return tmp_path / "doomed", {"PYTHONPATH": path, "MTOK_TEST_LOOP_DIES": str(tmp_path / "doomed")}


@pytest.mark.parametrize("threads_only", [False, True])
def test_a_worker_whose_loop_dies_is_replaced_at_once(tmp_path, threads_only):
    """With its loop thread dead, a worker served on from its handler threads but beat no more,
    accepted nothing and read no results: half alive until --worker-timeout (30 s) had it killed."""
    doomed_file, env = _loop_dies_env(tmp_path)
    srv = Server("--tokenizer-worker-num", "2", *(["--http-threads-only"] if threads_only else []), env=env)
    try:
        doomed, other = worker_pids(srv)
        doomed_file.write_text(str(doomed))
        wait_for(lambda: not pid_alive(doomed), timeout=5, what="the worker whose loop died to exit")
        wait_for(lambda: srv.info()["worker_restarts"] == 1 and all(w["state"] == "ready" for w in srv.info()["workers"]),
                 timeout=30, what="its replacement")
        assert other in worker_pids(srv) and doomed not in worker_pids(srv)
        assert "the HTTP serving loop stopped" in srv.stderr()
        assert srv.post("/generate", {"text": "served", "sampling_params": {"max_new_tokens": 2}})[0] == 200
    finally:
        assert srv.stop() == 0


def test_a_single_process_server_whose_loop_dies_stops():
    """With N = 1 the loop is the server's only one: it fails (exit status 1) rather than hang."""
    import tempfile
    import pathlib

    with tempfile.TemporaryDirectory() as tmp:
        doomed_file, env = _loop_dies_env(pathlib.Path(tmp))
        srv = Server(env=env)
        doomed_file.write_text(str(srv.pid))
        assert srv.proc.wait(20) == 1
        assert "the HTTP serving loop stopped" in srv.stderr()
        assert leftovers(srv.pid) == []


def test_heartbeats_stay_fresh_while_the_loop_serves():
    srv = Server("--tokenizer-worker-num", "2")
    stop = threading.Event()

    def load(stream):
        c = srv.conn()
        body = {"text": "load " * 40, "stream": stream, "sampling_params": {"max_new_tokens": 16}}
        while not stop.is_set():
            if stream:
                srv.stream("/generate", body, conn=c)
            else:
                assert srv.post("/generate", body, conn=c)[0] == 200

    threads = [threading.Thread(target=load, args=(i % 3 == 0,), daemon=True) for i in range(6)]
    try:
        for t in threads:
            t.start()
        worst, deadline = 0.0, time.monotonic() + 5
        while time.monotonic() < deadline:
            workers = srv.info()["workers"]
            worst = max([worst] + [w["heartbeat_age"] for w in workers])
        assert worst < 2.0, worst  # a tick every 0.25 s while serving
        assert all(w["served"] > 50 for w in srv.info()["workers"])
    finally:
        stop.set()
        for t in threads:
            t.join(10)
        assert srv.stop() == 0


@pytest.mark.parametrize("workers", [1, 2])
def test_boot_failure_halts_instead_of_looping(workers):
    srv = Server("--tokenizer-worker-num", str(workers), "--tokenizer-path", "/nonexistent/dir", expect_ready=False)
    assert srv.proc.wait(60) == 3
    assert "failed to start" in srv.stderr() and "/nonexistent/dir" in srv.stderr()
    assert leftovers(srv.pid) == []


def test_replacement_that_cannot_boot_halts_the_server(tmp_path):
    tok_dir = tmp_path / "tok"
    shutil.copytree(DEFAULT_TOKENIZER_DIR, tok_dir)
    srv = Server("--tokenizer-worker-num", "2", "--tokenizer-path", str(tok_dir))
    kids = children_of(srv.pid)
    shutil.rmtree(tok_dir)
    os.kill(worker_pids(srv)[0], signal.SIGKILL)
    assert srv.proc.wait(30) == 3
    assert "failed to start" in srv.stderr()
    wait_for(lambda: not [k for k in kids if pid_alive(k)], timeout=3, what="children to exit")
    assert leftovers(srv.pid) == []


LONG = {"max_new_tokens": 20000, "ignore_eos": True}


@pytest.mark.parametrize("workers", [1, 2])
@pytest.mark.parametrize("role,placement", [("scheduler", "inline"), ("scheduler", "process"),
                                            ("detokenizer", "process")])
def test_core_process_death_fails_requests_fast_and_stops(role, placement, workers):
    srv = Server("--tokenizer-worker-num", str(workers), "--engine-step-delay", "0.01", "--detokenizer", placement)
    kids = children_of(srv.pid)
    results = {}

    def plain(i):
        c = srv.conn(timeout=20)
        c.request("POST", "/generate", body=json.dumps({"text": f"plain {i}", "sampling_params": LONG}))
        r = c.getresponse()
        results[f"plain{i}"] = (time.monotonic(), r.status, json.loads(r.read()), r.getheader("Retry-After"))

    def streamed():
        c = srv.conn(timeout=20)
        c.request("POST", "/generate", body=json.dumps({"text": "stream", "stream": True, "sampling_params": LONG}))
        r = c.getresponse()
        events = list(parse_sse(r))
        results["stream"] = (time.monotonic(), r.status, events, None)

    threads = [threading.Thread(target=plain, args=(i,)) for i in range(2)] + [threading.Thread(target=streamed)]
    for t in threads:
        t.start()
    wait_for(lambda: srv.info()["scheduler"]["num_running"] == 3, what="three requests in flight")
    victim = srv.info()["processes"][role]
    os.kill(victim, signal.SIGKILL)
    killed_at = time.monotonic()
    wait_for(lambda: _health_status(srv) == 503, timeout=1, interval=0.01, what="/health to say 503")
    for t in threads:
        t.join(10)
    for key in ("plain0", "plain1"):
        at, status, body, retry = results[key]
        assert status == 503 and role in body["error"]["message"], body
        assert at - killed_at < 1.0
    at, status, events, _ = results["stream"]
    assert status == 200 and events[-1] == "[DONE]" and "error" in events[-2]
    assert at - killed_at < 1.0
    assert srv.proc.wait(15) == 1
    assert f"the {role}" in srv.stderr()
    wait_for(lambda: not [k for k in kids if pid_alive(k)], timeout=3, what="children to exit")
    assert leftovers(srv.pid) == []


def _health_status(srv):
    try:
        return srv.get("/health")[0]
    except OSError:
        return None


def test_backpressure_refuses_fast_with_retry_after():
    srv = Server("--max-running-requests", "2", "--max-queued-requests", "2", "--engine-step-delay", "0.01")
    try:
        out = []
        lock = threading.Lock()

        def one(i):
            t0 = time.monotonic()
            status, headers, body = srv.request("POST", "/generate", {"text": f"bp {i}", "sampling_params": {
                "max_new_tokens": 60, "ignore_eos": True}})
            with lock:
                out.append((status, headers.get("retry-after"), time.monotonic() - t0, body))

        threads = [threading.Thread(target=one, args=(i,)) for i in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(30)
        ok = [o for o in out if o[0] == 200]
        refused = [o for o in out if o[0] == 503]
        assert len(ok) == 4 and len(refused) == 4, [(o[0], o[3]) for o in out]
        for status, retry, elapsed, body in refused:
            assert retry == "1" and "capacity" in body["error"]["message"]
            assert elapsed < 0.5  # refused at once, not after waiting
        assert srv.get("/health")[0] == 200
    finally:
        srv.stop()


def test_connection_flood_gets_503_beyond_the_limit():
    srv = Server("--max-connections", "4")
    try:
        held = [socket.create_connection((srv.host, srv.port)) for _ in range(4)]
        for s in held:  # make sure each is accepted and has its thread
            s.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n")
            assert s.recv(4096).startswith(b"HTTP/1.1 200")
        extra = socket.create_connection((srv.host, srv.port), timeout=5)
        data = extra.recv(4096)
        assert data.startswith(b"HTTP/1.1 503") and b"too many connections" in data
        held.pop().close()
        wait_for(lambda: _health_status(srv) == 200, what="a free connection slot")
        for s in held:
            s.close()
    finally:
        srv.stop()


def test_slow_clients_are_cut_off_and_others_served():
    srv = Server("--http-timeout", "1")
    try:
        def trickle(payload):
            s = socket.create_connection((srv.host, srv.port), timeout=10)
            t0 = time.monotonic()
            try:
                for b in payload:
                    s.sendall(bytes([b]))
                    time.sleep(0.1)  # a slow client, on purpose
                    if time.monotonic() - t0 > 5:
                        break
            except OSError:
                pass
            data = s.recv(4096)
            s.close()
            return data, time.monotonic() - t0

        slow_headers = b"GET /health HTTP/1.1\r\nHost: x\r\nX-Pad: " + b"a" * 100 + b"\r\n\r\n"
        body = json.dumps({"text": "slow body"}).encode()
        slow_body = b"POST /generate HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n" % len(body) + body * 10
        box = {}
        threads = [threading.Thread(target=lambda k=k, p=p: box.setdefault(k, trickle(p)))
                   for k, p in (("headers", slow_headers), ("body", slow_body))]
        for t in threads:
            t.start()
        assert srv.post("/generate", {"text": "fast", "sampling_params": {"max_new_tokens": 1}})[0] == 200
        for t in threads:
            t.join(15)
        for key in ("headers", "body"):
            data, elapsed = box[key]
            assert data.startswith(b"HTTP/1.1 408"), (key, data[:200])
            assert b'"code": 408' in data and elapsed < 3.5
    finally:
        srv.stop()


@pytest.mark.parametrize("workers", [1, 2])
def test_api_key_guards_every_endpoint_but_health(workers):
    srv = Server("--tokenizer-worker-num", str(workers), "--api-key", "s3cret")
    try:
        assert srv.get("/health")[0] == 200
        for method, path, body in (("POST", "/generate", {"text": "x"}), ("GET", "/v1/models", None),
                                   ("POST", "/tokenize", {"prompt": "x"}), ("GET", "/get_server_info", None),
                                   ("GET", "/nope", None)):
            for headers in ({}, {"Authorization": "Bearer wrong"}, {"Authorization": "Basic s3cret"}):
                for _ in range(workers * 3):  # reach every worker
                    status, hdrs, resp = srv.request(method, path, body, headers=headers)
                    assert status == 401 and resp["error"]["code"] == 401, (path, headers, resp)
                    assert hdrs["www-authenticate"] == "Bearer"
        status, _, resp = srv.request("POST", "/generate", {"text": "x", "sampling_params": {"max_new_tokens": 1}},
                                      headers={"Authorization": "Bearer s3cret"})
        assert status == 200, resp
    finally:
        srv.stop()


def test_authkey_is_in_no_argv_or_environment():
    srv = Server("--tokenizer-worker-num", "2")
    try:
        with open(f"/proc/{srv.pid}/environ", "rb") as f:
            main_env = set(f.read().split(b"\0"))
        for pid in children_of(srv.pid):
            with open(f"/proc/{pid}/environ", "rb") as f:
                assert set(f.read().split(b"\0")) <= main_env, "a child got an extra environment variable"
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                args = f.read().split(b"\0")
            assert all(len(a) < 200 for a in args), args
            assert not any(b"authkey" in a.lower() for a in args)
    finally:
        srv.stop()


def listening_addresses(port):
    """Local addresses with a TCP socket listening on ``port``, from /proc/net/tcp."""
    out = []
    with open("/proc/net/tcp") as f:
        for line in f.readlines()[1:]:
            local, state = line.split()[1], line.split()[3]
            addr, p = local.split(":")
            if state == "0A" and int(p, 16) == port:
                out.append(socket.inet_ntoa(bytes.fromhex(addr)[::-1]))
    return out


def test_binds_loopback_unless_told():
    srv = Server()
    try:
        assert srv.host == "127.0.0.1"
        assert listening_addresses(srv.port) == ["127.0.0.1"]
    finally:
        srv.stop()
