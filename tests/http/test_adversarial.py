"""Findings of an adversarial probe (issue 16), each reproduced over real
processes and sockets: stalled workers, guessable ids, duplicate ids across
workers, stop-string floods, huge batches, hang-ups behind pipelined bytes,
shutdown, a second server on a reuseport port, the API key's visibility, and
log floods."""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import threading
import time

import pytest

from support import Server, free_port, wait_for

def num_running(srv) -> int:
    return srv.info()["scheduler"]["num_running"]


def num_running_via(conn) -> int:
    """The same count asked over one kept-alive connection: with a worker stopped,
    a fresh connection may land on it (the shared socket picks) and hang."""
    conn.request("GET", "/get_server_info")
    r = conn.getresponse()
    return json.loads(r.read())["scheduler"]["num_running"]

# -- 2: a stalled worker is slow, not dead ----------------------------------------------
def conns_by_worker(srv, per_worker: int = 1, workers: int = 2, deadline: float = 30.0):
    """``per_worker`` kept-alive connections to each worker, by pid (a shared
    socket decides who accepts, so connect until each worker holds enough)."""
    found = {}
    end = time.monotonic() + deadline
    while len(found) < workers or any(len(v) < per_worker for v in found.values()):
        assert time.monotonic() < end, f"could not reach {workers} workers"
        c = srv.conn(timeout=120)
        c.request("GET", "/health")
        r = c.getresponse()
        r.read()
        mine = found.setdefault(int(r.getheader("X-Mtok-Worker")), [])
        if len(mine) < per_worker:
            mine.append(c)
        else:
            c.close()
    return found


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_a_stopped_worker_gets_every_result_after_it_resumes():
    # The stall may outlast the default --worker-timeout on a slow machine; this
    # test is about a worker the supervisor still counts alive, so give it longer
    # (otherwise the supervisor rightly kills the stopped worker and replaces it).
    srv = Server("--tokenizer-worker-num", "2", "--worker-timeout", "600")
    try:
        conns = conns_by_worker(srv, per_worker=11)
        victim, bystander = list(conns)
        probe = conns[bystander].pop()  # asks the worker that keeps running
        conns[victim].pop().close()
        prompt = "tok " * 50
        body = json.dumps({"text": prompt, "sampling_params": {"max_new_tokens": 12000, "ignore_eos": True}})
        results = {}

        def one(pid, i, c):
            c.request("POST", "/generate", body=body)
            r = c.getresponse()
            results[(pid, i)] = (r.status, json.loads(r.read()))

        threads = [threading.Thread(target=one, args=(pid, i, c)) for pid, cs in conns.items() for i, c in enumerate(cs)]
        for t in threads:
            t.start()
        wait_for(lambda: num_running_via(probe) == 20, timeout=30, what="20 requests running")
        os.kill(victim, signal.SIGSTOP)
        try:
            # The scheduler finishes them all while the worker sleeps: 12000
            # steps, more messages than the old 10000-message queue allowed.
            wait_for(lambda: num_running_via(probe) == 0, timeout=200, interval=0.2, what="the batch to finish")
        finally:
            os.kill(victim, signal.SIGCONT)
        for t in threads:
            t.join(60)
        assert len(results) == 20
        for (pid, i), (status, out) in results.items():
            assert status == 200, out
            assert out["meta_info"]["completion_tokens"] == 12000
            assert out["text"] == (prompt * 300)[: len(out["text"])] and len(out["text"]) > 20000
        # New requests on the worker that stalled are served too.
        for pid, cs in conns_by_worker(srv).items():
            cs[0].request("POST", "/generate", body=json.dumps({"text": "after", "sampling_params": {"max_new_tokens": 1}}))
            r = cs[0].getresponse()
            assert r.status == 200, r.read()
            r.read()
        assert "is gone" not in srv.stderr()
    finally:
        srv.stop()


@pytest.mark.fast
def test_a_request_that_outlives_the_deadline_gets_an_error():
    srv = Server("--engine-step-delay", "0.2", "--request-timeout", "1")
    try:
        t0 = time.monotonic()
        status, body = srv.post("/generate", {"text": "slow", "sampling_params": {"max_new_tokens": 100,
                                                                                  "ignore_eos": True}})
        assert status == 504 and "1 s" in body["error"]["message"], body
        assert time.monotonic() - t0 < 10
        wait_for(lambda: num_running(srv) == 0, what="the request to be aborted")
        events = srv.stream("/generate", {"text": "slow", "stream": True,
                                          "sampling_params": {"max_new_tokens": 100, "ignore_eos": True}})
        assert events[-1] == "[DONE]" and events[-2]["error"]["code"] == 504, events[-2:]
    finally:
        srv.stop()


# -- 3: request ids ------------------------------------------------------------------
@pytest.mark.fast
def test_generated_ids_are_unguessable_and_reserved():
    srv = Server("--engine-step-delay", "0.05")
    try:
        ids = [srv.post("/generate", {"text": "a", "sampling_params": {"max_new_tokens": 1}})[1]["meta_info"]["id"]
               for _ in range(3)]
        random_parts = [re.fullmatch(r"mtok-([0-9a-f]{32})", i) for i in ids]
        assert all(random_parts), ids
        values = [int(m.group(1), 16) for m in random_parts]
        assert all(abs(a - b) > 1 << 64 for a, b in zip(values, values[1:])), ids
        status, body = srv.post("/generate", {"text": "a", "rid": "mtok-" + "0" * 32})
        assert status == 400 and body["error"]["param"] == "rid", body
        status, body = srv.post("/generate", {"text": ["a", "b"], "rid": ["mine", "mtok-x"]})
        assert status == 400 and body["error"]["param"] == "rid", body

        # Nobody can list another client's ids without the API key.
        done = threading.Event()
        t = threading.Thread(target=lambda: (srv.post("/generate", {"text": "x", "sampling_params": {
            "max_new_tokens": 120, "ignore_eos": True}}), done.set()))
        t.start()
        wait_for(lambda: num_running(srv) == 1, what="a running request")
        sched = srv.info()["scheduler"]
        assert "running_rids" not in sched and "waiting_rids" not in sched, sched
        t.join(30)
    finally:
        srv.stop()


@pytest.mark.fast
def test_the_api_key_holder_sees_request_ids():
    srv = Server("--api-key", "k", "--engine-step-delay", "0.05")
    try:
        auth = {"Authorization": "Bearer k"}
        t = threading.Thread(target=lambda: srv.post("/generate", {"text": "x", "rid": "visible", "sampling_params": {
            "max_new_tokens": 120, "ignore_eos": True}}, headers=auth))
        t.start()
        wait_for(lambda: srv.get("/get_server_info", headers=auth)[1]["scheduler"]["num_running"] == 1,
                 what="a running request")
        assert srv.get("/get_server_info", headers=auth)[1]["scheduler"]["running_rids"] == ["visible"]
        t.join(30)
    finally:
        srv.stop()


# -- 5: one rid on two workers ---------------------------------------------------------
@pytest.mark.fast
def test_a_duplicate_rid_on_another_worker_leaves_the_first_intact():
    srv = Server("--tokenizer-worker-num", "2", "--engine-step-delay", "0.03")
    try:
        (ca,), (cb,) = conns_by_worker(srv).values()
        prompt = "a😀b😀c😀d😀e😀f😀g😀h😀i😀j😀k😀l STOP m😀n"
        ca.request("POST", "/generate", body=json.dumps({
            "text": prompt, "rid": "shared-id", "stream": True,
            "sampling_params": {"max_new_tokens": 200, "stop": "STOP", "ignore_eos": True}}))
        ra = ca.getresponse()
        assert ra.status == 200
        lines = iter(ra)
        first = next(l for l in lines if l.startswith(b"data: "))  # it is running
        assert json.loads(first[6:])["meta_info"]["id"] == "shared-id"
        cb.request("POST", "/generate", body=json.dumps({"text": "other", "rid": "shared-id"}))
        rb = cb.getresponse()
        assert rb.status == 400 and "already in use" in json.loads(rb.read())["error"]["message"]
        events = [json.loads(l[6:]) for l in lines if l.startswith(b"data: {")]
        assert events[-1]["text"] == prompt[: prompt.index(" STOP")] + " ", events[-1]
    finally:
        srv.stop()


# -- 4: stop strings ------------------------------------------------------------------
@pytest.mark.fast
def test_stop_strings_are_bounded_in_number_and_length():
    srv = Server("--max-stop-strings", "8", "--max-stop-chars", "100")
    try:
        status, body = srv.post("/generate", {"text": "a", "sampling_params": {"stop": [f"s{i}" for i in range(9)]}})
        assert status == 400 and "8" in body["error"]["message"] and body["error"]["param"] == "stop", body
        status, body = srv.post("/v1/completions", {"prompt": "a", "stop": ["x" * 60, "y" * 60]})
        assert status == 400 and "100" in body["error"]["message"], body
        status, body = srv.post("/generate", {"text": "a b c", "sampling_params": {"stop": ["x" * 20, "b"] * 4}})
        assert status == 200 and body["text"] == "a ", body
    finally:
        srv.stop()


@pytest.mark.fast
def test_default_stop_limit_refuses_a_flood():
    srv = Server()
    try:
        status, body = srv.post("/generate", {"text": "a", "sampling_params": {"stop": [f"s{i}" for i in range(5000)]}})
        assert status == 400 and body["error"]["param"] == "stop", body
    finally:
        srv.stop()


# -- 7: huge batches -----------------------------------------------------------------
@pytest.mark.fast
@pytest.mark.timeout(60)
def test_prompts_per_request_are_bounded_and_dedup_is_linear():
    srv = Server("--max-prompts-per-request", "3000", "--max-queued-requests", "10000")
    try:
        status, body = srv.post("/generate", {"text": ["x y"] * 3001})
        assert status == 400 and "3000" in body["error"]["message"] and body["error"]["param"] == "text", body
        rids = [f"r{i}" for i in range(2999)] + ["r0"]
        status, body = srv.post("/generate", {"input_ids": [[1]] * 3000, "rid": rids,
                                              "sampling_params": {"max_new_tokens": 1}})
        assert status == 400 and body["error"]["param"] == "rid", body
        status, body = srv.post("/generate", {"text": ["x y"] * 3000, "sampling_params": {"max_new_tokens": 1}})
        assert status == 200 and len(body) == 3000
    finally:
        srv.stop()


# -- 9: hang-up behind pipelined bytes -------------------------------------------------
@pytest.mark.fast
def test_hangup_after_pipelined_bytes_aborts_the_request():
    srv = Server("--engine-step-delay", "0.05")
    try:
        body = json.dumps({"text": "long", "sampling_params": {"max_new_tokens": 2000, "ignore_eos": True}}).encode()
        s = socket.create_connection((srv.host, srv.port), timeout=10)
        s.sendall(b"POST /generate HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body))
        wait_for(lambda: num_running(srv) == 1, what="the request to run")
        s.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n")
        s.close()
        wait_for(lambda: num_running(srv) == 0, timeout=10, what="the request to be aborted")
    finally:
        srv.stop()


# -- 10: shutdown --------------------------------------------------------------------
def refused(srv) -> bool:
    try:
        socket.create_connection((srv.host, srv.port), timeout=2).close()
    except ConnectionRefusedError:
        return True
    except ConnectionResetError:  # the socket closed during this handshake: look again
        return False
    return False


@pytest.mark.fast
@pytest.mark.parametrize("workers", [1, 2])
def test_sigterm_refuses_new_connections_at_once_and_sigint_stops_the_drain(workers):
    srv = Server("--tokenizer-worker-num", str(workers), "--engine-step-delay", "0.05", "--graceful-timeout", "60")
    try:
        c = srv.conn(timeout=60)
        c.request("POST", "/generate", body=json.dumps({"text": "drain", "stream": True, "sampling_params": {
            "max_new_tokens": 5000, "ignore_eos": True}}))
        assert c.getresponse().status == 200
        os.kill(srv.pid, signal.SIGTERM)
        wait_for(lambda: refused(srv), timeout=10, what="new connections to be refused")
        assert srv.proc.poll() is None  # still draining
        t0 = time.monotonic()
        os.kill(srv.pid, signal.SIGINT)
        assert srv.proc.wait(15) == 0
        assert time.monotonic() - t0 < 10
        c.close()
    finally:
        srv.stop()


# -- 12: a second server on a reuseport port ---------------------------------------------
@pytest.mark.fast
def test_reuseport_refuses_a_port_already_served():
    port = free_port()
    first = Server("--tokenizer-worker-num", "2", "--listen-mode", "reuseport", "--port", str(port))
    try:
        second = Server("--tokenizer-worker-num", "2", "--listen-mode", "reuseport", "--port", str(port),
                        expect_ready=False)
        try:
            assert second.proc.wait(60) == 3
            assert "cannot listen" in second.stderr()
        finally:
            second.stop()
        assert first.get("/health")[0] == 200
    finally:
        first.stop()


# -- 13: the API key out of argv ---------------------------------------------------------
@pytest.mark.fast
def test_api_key_from_a_file_or_the_environment(tmp_path):
    key_file = tmp_path / "key"
    key_file.write_text("from-file\n")
    key_file.chmod(0o600)
    for kw in ({"args": ("--api-key-file", str(key_file)), "key": "from-file"},
               {"args": (), "env": {"MTOK_API_KEY": "from-env"}, "key": "from-env"}):
        srv = Server(*kw["args"], env=kw.get("env"))
        try:
            assert srv.get("/get_model_info")[0] == 401
            assert srv.get("/get_model_info", headers={"Authorization": f"Bearer {kw['key']}"})[0] == 200
            with open(f"/proc/{srv.pid}/cmdline", "rb") as f:
                assert kw["key"].encode() not in f.read()
        finally:
            srv.stop()


# -- 14: smaller ---------------------------------------------------------------------
@pytest.mark.fast
def test_a_dead_detokenizer_is_logged_once():
    srv = Server("--engine-step-delay", "0", "--detokenizer", "process")
    try:
        c = srv.conn(timeout=30)
        c.request("POST", "/generate", body=json.dumps({"text": "x", "sampling_params": {
            "max_new_tokens": 60000, "ignore_eos": True}}))
        wait_for(lambda: num_running(srv) == 1, what="a running request")
        os.kill(srv.info()["processes"]["detokenizer"], signal.SIGKILL)
        assert srv.proc.wait(30) == 1
        assert srv.stderr().count("cannot reach the detokenizer") <= 1, srv.stderr()[-2000:]
    finally:
        srv.stop()


@pytest.mark.fast
def test_a_slow_reader_is_closed_without_a_traceback_or_a_second_status():
    srv = Server("--http-timeout", "1", "--engine-step-delay", "0.001")
    try:
        s = socket.socket()
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        s.settimeout(30)
        s.connect((srv.host, srv.port))
        # Cumulative text in every event: far more than the socket buffers hold.
        body = json.dumps({"text": "word " * 2000, "stream": True,
                           "sampling_params": {"max_new_tokens": 20000, "ignore_eos": True}}).encode()
        s.sendall(b"POST /generate HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body))
        wait_for(lambda: num_running(srv) == 1, what="the request to run")
        # It would run for 20 s; the server gives up on the reader long before.
        wait_for(lambda: num_running(srv) == 0, timeout=15, interval=0.1, what="the server to give up on the reader")
        raw = b""
        while True:
            try:
                data = s.recv(1 << 20)
            except (ConnectionResetError, socket.timeout):
                break
            if not data:
                break
            raw += data
        s.close()
        assert raw.startswith(b"HTTP/1.1 200") and b"HTTP/1.1 408" not in raw
        assert "Traceback" not in srv.stderr()
        assert srv.get("/health")[0] == 200
    finally:
        srv.stop()


@pytest.mark.fast
def test_a_batch_stops_tokenizing_once_its_client_has_gone():
    """Between slices of a batch the handler looks at its connection
    (ConnectionWatch.gone, over a real socket pair) and gives up."""
    from mtok.api.connections import ConnectionWatch, DisconnectWatcher
    from mtok.tokenizer.load import load_tokenizer
    from mtok.models import ModelEntry
    from mtok.managers.prepare import ENCODE_SLICE, encode_batch
    from mtok.api.connections import ClientDisconnected

    tok = load_tokenizer()
    calls = []
    real = tok.encode_batch
    tok.encode_batch = lambda texts: calls.append(len(texts)) or real(texts)
    model = ModelEntry("m", tok, 4096)
    server_end, client_end = socket.socketpair()
    server_end.settimeout(30)  # as a handler's socket has (--http-timeout)
    watch = ConnectionWatch(DisconnectWatcher(), server_end)
    texts = ["x y"] * (ENCODE_SLICE * 4)
    try:
        assert len(encode_batch(model, texts, watch)) == len(texts)  # the client is there
        assert calls == [ENCODE_SLICE] * 4
        client_end.sendall(b"GET / HTTP/1.1\r\n")  # bytes it sent do not count as gone
        assert not watch.gone()
        server_end.recv(100)
        client_end.close()
        calls.clear()
        with pytest.raises(ClientDisconnected):
            encode_batch(model, texts, watch)
        assert calls == [ENCODE_SLICE]
    finally:
        server_end.close()
