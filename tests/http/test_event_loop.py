"""The HTTP event loop (mtok/api/loop.py) and its seams: how it reads a request
out of the bytes a connection sent (mtok/api/intake.py), how workers on one
socket share connections, and the same behaviour with --http-threads-only."""

from __future__ import annotations

import http.client
import json
import os
import socket
from collections import Counter

import pytest

from mtok.api import intake
from mtok.api.routes import Pending, Request, Response, collect_routes, route
from mtok.wire.status import FIRST_WORKER_SLOT, SlotState, StatusBoard
from support import Server, vm_kib, wait_for

MODES = ["loop", "threads"]


def start(mode: str, *args: str) -> Server:
    return Server(*args, *(["--http-threads-only"] if mode == "threads" else []))


@pytest.fixture(scope="module", params=MODES)
def srv(request):
    s = start(request.param)
    yield s
    s.stop()


class _Unclosable:
    """A response reader http.client may close without closing the stream under it."""

    def __init__(self, f):
        self._f = f

    def __getattr__(self, name):
        return getattr(self._f, name)

    def close(self):
        pass

    def makefile(self, *args, **kwargs):
        return self


def read_responses(sock: socket.socket, n: int):
    """``n`` HTTP responses, in order, from one connection: (status, headers, body)."""
    stream = _Unclosable(sock.makefile("rb"))
    out = []
    for _ in range(n):
        r = http.client.HTTPResponse(stream)  # type: ignore[arg-type]
        r.begin()
        out.append((r.status, {k.lower(): v for k, v in r.getheaders()}, r.read()))
    return out


def post(path: str, body, close: bool = False) -> bytes:
    data = json.dumps(body).encode()
    extra = b"Connection: close\r\n" if close else b""
    return (b"POST %s HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: %d\r\n%s\r\n%s"
            % (path.encode(), len(data), extra, data))


def generate(text: str, n: int = 3, stream: bool = False):
    return {"text": text, "stream": stream, "sampling_params": {"max_new_tokens": n}}


@pytest.mark.timeout(60)
def test_pipelined_requests_are_answered_in_order_streams_among_them(srv):
    """Plain requests, a stream and plain requests again, all sent at once on one
    connection: the stream's answer waits its turn, and the next ones wait for it."""
    reqs = [post("/tokenize", {"prompt": "one two"}), post("/generate", generate("alpha beta")),
            post("/generate", generate("gamma delta", 4, stream=True)), post("/tokenize", {"prompt": "x"}),
            post("/generate", generate("last one"), close=True)]
    with socket.create_connection((srv.host, srv.port), timeout=30) as s:
        s.sendall(b"".join(reqs))
        got = read_responses(s, len(reqs))
    assert [status for status, _, _ in got] == [200] * 5, got
    assert json.loads(got[0][2])["count"] == len(json.loads(got[3][2])["tokens"]) + 1
    assert json.loads(got[1][2])["text"] == "alpha bet"[:len(json.loads(got[1][2])["text"])]
    events = [line[6:] for line in got[2][2].decode().splitlines() if line.startswith("data: ")]
    assert events[-1] == "[DONE]" and json.loads(events[-2])["meta_info"]["finish_reason"]["type"] == "length"
    assert got[2][1]["transfer-encoding"] == "chunked"
    assert got[4][1]["connection"] == "close" and json.loads(got[4][2])["meta_info"]["completion_tokens"] == 3


@pytest.mark.timeout(60)
def test_a_request_in_pieces_and_its_errors_are_answered_as_a_thread_would(srv):
    head, body = post("/generate", generate("piece by piece")).split(b"\r\n\r\n", 1)
    with socket.create_connection((srv.host, srv.port), timeout=30) as s:
        s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        for piece in (head[:7], head[7:] + b"\r\n", b"\r\n" + body[:5], body[5:]):
            s.sendall(piece)
        s.sendall(post("/generate", {"text": "x", "nonsense_field": {"sampling_params": 1}, "sampling_params": 7}))
        s.sendall(b"POST /generate HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 3"
                  b"\r\n\r\n{x}")
        s.sendall(post("/no/such/route", {}))
        got = read_responses(s, 4)
    assert got[0][0] == 200 and json.loads(got[0][2])["meta_info"]["completion_tokens"] == 3
    for (status, headers, raw), want in zip(got[1:], (400, 400, 404)):
        assert status == want and headers["content-type"] == "application/json"
        assert json.loads(raw)["error"]["code"] == want
    assert srv.get("/health")[0] == 200


@pytest.mark.timeout(60)
def test_a_client_that_will_not_read_a_large_answer_is_closed_and_others_served():
    """A non-streamed answer of several MB to a client that reads nothing: the
    loop cannot finish writing it, gives up after --http-timeout, and serves on.

    The answer's size comes from logprobs (~800 bytes a token), not from tokens:
    600,000 of them (60,000 engine steps) took 22 s of the 30 s on a loaded
    machine; 10,000 in 1,000 steps take about 2."""
    srv = Server("--http-timeout", "1")
    try:
        s = socket.socket()
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        s.settimeout(30)
        s.connect((srv.host, srv.port))
        # ~8 MB of answer: more than the socket buffers on both sides hold
        s.sendall(post("/generate", {"text": "word word", "sampling_params": {"max_new_tokens": 1000, "n": 10,
                                                                                "ignore_eos": True},
                                     "return_logprob": True, "top_logprobs_num": 20,
                                     "return_text_in_logprobs": True}))
        s.recv(1)  # the answer has begun
        wait_for(lambda: "too slow to read its response" in srv.stderr(), timeout=30, interval=0.1,
                 what="the server to give up on the reader")
        assert srv.post("/generate", generate("others are served"))[0] == 200
        s.close()
        assert "Traceback" not in srv.stderr()
    finally:
        srv.stop()


def threads_of(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/task"))


@pytest.mark.timeout(90)
def test_streams_are_written_by_the_loop_not_a_thread_each():
    """24 streams at once: the worker's thread count stays where it was (a
    thread per stream was the old way), every stream is whole, and a plain
    request on a connection that streamed before is answered on it."""
    srv = Server("--engine-step-delay", "0.01")
    try:
        pid = srv.get("/get_server_info")[1]["this_worker_pid"]
        assert srv.post("/generate", generate("warm up", 2, stream=True))[0] == 200
        before = threads_of(pid)
        socks = [socket.create_connection((srv.host, srv.port), timeout=30) for _ in range(24)]
        for s in socks:
            s.sendall(post("/generate", generate("a b c d e f g h", 40, stream=True)))
        for s in socks:  # every stream has begun, none has ended (40 steps of 10 ms)
            assert s.recv(65536).startswith(b"HTTP/1.1 200")
        during = threads_of(pid)
        got = [read_stream_rest(s) for s in socks]
        assert all(g.count(b"data: ") >= 2 and b"data: [DONE]\n\n\r\n0\r\n\r\n" in g for g in got), got[0][-300:]
        socks[0].sendall(b"GET /v1/models HTTP/1.1\r\nHost: x\r\n\r\n")
        assert read_responses(socks[0], 1)[0][0] == 200
        for s in socks:
            s.close()
        assert during <= before + 1, (before, during)
    finally:
        srv.stop()


def read_stream_rest(sock: socket.socket) -> bytes:
    """The rest of a chunked stream, up to and with its last chunk."""
    got = b""
    while not got.endswith(b"0\r\n\r\n"):
        data = sock.recv(65536)
        assert data, got[-200:]
        got += data
    return got


@pytest.mark.timeout(90)
def test_a_stream_the_client_does_not_read_is_held_back_then_closed_and_aborted():
    """A long stream to a client that stops reading: the loop stops pulling
    events (the worker's memory does not grow with the stream), gives up after
    --http-timeout, aborts the request, and serves others meanwhile."""
    srv = Server("--http-timeout", "1")
    try:
        pid = srv.get("/get_server_info")[1]["this_worker_pid"]
        s = socket.socket()
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        s.settimeout(30)
        s.connect((srv.host, srv.port))
        s.sendall(post("/generate", {"text": "word word", "stream": True, "sampling_params": {
            "max_new_tokens": 60_000, "ignore_eos": True}}))
        s.recv(1)  # the stream has begun
        assert srv.post("/generate", generate("others are served"))[0] == 200
        wait_for(lambda: "too slow to read its response" in srv.stderr(), timeout=30, interval=0.1,
                 what="the server to give up on the reader")
        wait_for(lambda: srv.get("/get_server_info")[1]["scheduler"]["num_running"] == 0, timeout=10,
                 what="the stream's request aborted")
        assert vm_kib(pid, "VmHWM") < 400 * 1024  # cumulative text of a stream never read is not buffered
        s.close()
        assert "Traceback" not in srv.stderr()
    finally:
        srv.stop()


@pytest.mark.timeout(90)
def test_two_workers_share_connections_opened_at_once():
    """32 connections opened before any is used: each worker takes its share,
    though every loop waits on epoll ("idle") whatever it holds."""
    srv = Server("--tokenizer-worker-num", "2")
    try:
        socks = [socket.create_connection((srv.host, srv.port), timeout=30) for _ in range(32)]
        for s in socks:
            s.sendall(post("/tokenize", {"prompt": "hi"}))
        by_worker = Counter(read_responses(s, 1)[0][1]["x-mtok-worker"] for s in socks)
        for s in socks:
            s.close()
        assert len(by_worker) == 2 and min(by_worker.values()) >= 12, by_worker
    finally:
        srv.stop()


@pytest.mark.timeout(90)
def test_with_a_socket_each_every_worker_takes_what_the_kernel_gives_it():
    """--listen-mode reuseport: a connection can only be taken by the worker
    whose socket it came to, so no worker leaves one to another, whatever they hold."""
    srv = Server("--tokenizer-worker-num", "2", "--listen-mode", "reuseport")
    try:
        socks = [socket.create_connection((srv.host, srv.port), timeout=30) for _ in range(48)]
        for s in socks:
            s.sendall(post("/tokenize", {"prompt": "hi"}))
        statuses = [read_responses(s, 1)[0][0] for s in socks]
        for s in socks:
            s.close()
        assert statuses == [200] * len(socks)
    finally:
        srv.stop()


# -- units -----------------------------------------------------------------------------
class _App:
    @route("POST", "/fast", inline=True)
    def fast(self, req: Request):
        return {"got": req.json()}

    @route("POST", "/slow")
    def slow(self, req: Request):
        return Response({})


class _Httpd:
    def __init__(self, **kw):
        self.routes = collect_routes(_App())
        self.max_body, self.draining, self.cors, self.api_key = 1 << 20, False, frozenset(), None
        self.__dict__.update(kw)


@pytest.mark.unit
@pytest.mark.parametrize("raw, status, close", [
    (b"HEAD /fast HTTP/1.1\r\nHost: x\r\n\r\n", 405, False),
    (b"POST /fast HTTP/1.1\r\nContent-Length: 2\r\n\r\n{}", 400, True),  # no Host
    (b"POST /fast HTTP/1.1\nHost: x\n", 400, True),  # a bare LF, refused before the head ends
    (b"POST /fast HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\nContent-Type: text/plain\r\n\r\n{}", 415, True),
    (b"POST /fast HTTP/1.1\r\nHost: x\r\nContent-Length: 99999999\r\n\r\n", 413, True),
    (b"POST /fast HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n-2\r\n", 400, True),
    (b"POST /fast HTTP/1.1\r\nHost: x\r\n\r\n", 411, False),
    (b"POST /nowhere HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\r\n", 404, True),  # its body is unread
])
def test_what_the_reader_refuses_and_whether_the_connection_closes(raw, status, close):
    plan = intake.take(_Httpd(), bytearray(raw), intake.Progress())
    assert plan.error is not None and plan.error.status == status and plan.close is close


@pytest.mark.unit
def test_every_framing_is_read_by_the_loop():
    chunked = b"POST /fast HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n3\r\n{\"a\r\n5\r\n\": 1}\r\n0\r\n\r\n"
    progress, buf = intake.Progress(), bytearray()
    for i in range(len(chunked) - 1):  # byte by byte: it waits until the last
        buf.append(chunked[i])
        assert intake.take(_Httpd(), buf, progress) is intake.WAIT, i
    buf.append(chunked[-1])
    plan = intake.take(_Httpd(), buf, progress)
    assert plan.handler(plan.request) == {"got": {"a": 1}} and buf == b""
    expect = b"POST /slow HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\nExpect: 100-continue\r\n\r\n"
    buf = bytearray(expect)
    assert intake.take(_Httpd(), buf, progress) is intake.CONTINUE  # once, after the gate
    assert intake.take(_Httpd(), buf, progress) is intake.WAIT
    buf += b"{}"
    plan = intake.take(_Httpd(), buf, progress)
    assert plan.request.raw == b"{}" and plan.handler is not None and not getattr(plan.handler, "inline", False)
    refused = bytearray(expect.replace(b"/slow", b"/nowhere"))
    assert intake.take(_Httpd(), refused, intake.Progress()).error.status == 404  # no 100 for a refusal


@pytest.mark.unit
def test_what_the_loop_serves_and_what_it_waits_for():
    httpd = _Httpd()
    one = b"POST /fast HTTP/1.1\r\nHost: x\r\nContent-Length: 8\r\n\r\n{\"a\": 1}"
    for cut in (5, len(one) - 8, len(one) - 1):
        assert intake.take(httpd, bytearray(one[:cut]), intake.Progress()) is intake.WAIT, cut
    buf = bytearray(one + one[:10])
    plan = intake.take(httpd, buf, intake.Progress())
    assert plan.handler(plan.request) == {"got": {"a": 1}} and not plan.close
    assert buf == one[:10]  # the next request's bytes stay
    draining = intake.take(_Httpd(draining=True), bytearray(one), intake.Progress())
    assert draining.error.status == 503 and draining.close
    assert intake.take(_Httpd(api_key=b"k"), bytearray(one), intake.Progress()).error.status == 401
    keyed = one.replace(b"Host: x\r\n", b"Host: x\r\nAuthorization: Bearer k\r\nConnection: close\r\n")
    plan = intake.take(_Httpd(api_key=b"k"), bytearray(keyed), intake.Progress())
    assert plan.close and plan.request.path == "/fast"
    cut = intake.take(httpd, bytearray(one[:-1]), intake.Progress(), eof=True)
    assert cut.error.status == 400 and cut.close  # a request cut short


@pytest.mark.unit
def test_pending_waits_in_a_thread_and_closes_its_handle():
    class Handle:
        closed = False

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            self.closed = True

        def results(self):
            return ["a", "b"]

    h = Handle()
    assert Pending(h, lambda states: "+".join(states)).wait() == "a+b" and h.closed


@pytest.mark.unit
def test_the_worker_with_the_fewest_connections_accepts():
    board = StatusBoard.create(f"mtok_test_board_{id(object())}", 3)
    try:
        slots = [FIRST_WORKER_SLOT + i for i in range(3)]
        for i, slot in enumerate(slots):
            board.claim(slot, 1000 + i, state=SlotState.READY)
        assert board.fewest_connections(slots[0], 0)
        assert board.fewest_connections(slots[1], 0)  # a tie: both may
        assert not board.fewest_connections(slots[0], 1)  # the others hold 0
        board.fewest_connections(slots[1], 5)
        board.set_state(slots[2], SlotState.DEAD)  # holds 0, but is not counted on
        assert board.fewest_connections(slots[0], 1)
        board.set_state(slots[2], SlotState.READY)
        assert not board.fewest_connections(slots[0], 1)
    finally:
        board.close()
        board.shm.unlink()
