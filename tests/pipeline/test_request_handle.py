"""The request handle's lifetime, and a TokenizerManager driven with no sockets.

A TokenizerManager built with an ``outbox`` binds nothing and starts no
thread: the tests submit requests, read what it sent to the "scheduler" from
the outbox, and feed it the detokenizer's messages with ``handle_message``.
The last tests put a real HTTP server (``mtok.http_server``) in front of one
to show that the SSE writer owns a stream's handle.
"""

from __future__ import annotations

import http.client
import os
import shutil
import tempfile
import threading

import pytest

from support import parse_sse, wait_for
from mtok.api.listen import make_listen_socket
from mtok.api.server import EventStream, HTTPServer, route
from mtok.validate import APIError
from mtok.managers.tokenizer_manager import TokenizerManager
from mtok.wire.args import PortArgs, ServerArgs
from mtok.wire.finish import FinishAbort, FinishLength
from mtok.wire.io_struct import AbortReq, BatchStrOutput, GenerateReqInput, SamplingParams, TokenizedGenerateReqInput
from mtok.wire.ipc import Sender, SharedSender

pytestmark = [pytest.mark.fast, pytest.mark.unit]


class Outbox:
    """Stands in for the sender to the scheduler: keeps what was sent."""

    def __init__(self, fail: bool = False):
        self.sent = []
        self.fail = fail
        self.closed = 0

    def send(self, obj):
        if self.fail:
            raise ConnectionError("no scheduler here")
        self.sent.append(obj)

    def close(self):
        self.closed += 1

    def requests(self):
        return [m for m in self.sent if isinstance(m, TokenizedGenerateReqInput)]

    def aborts(self):
        return [m.rid for m in self.sent if isinstance(m, AbortReq)]


def make_tm(outbox=None, **settings) -> TokenizerManager:
    return TokenizerManager(ServerArgs(**settings), PortArgs(sock_dir=""), b"", outbox=outbox or Outbox())


def piece(rid, text, n, finish=None) -> BatchStrOutput:
    """One detokenizer step for one request: ``text`` new, ``n`` tokens so far."""
    return BatchStrOutput(rids=[rid], finished_reasons=[finish], output_strs=[text], output_ids=[[n]],
                          prompt_tokens=[1], completion_tokens=[n])


def prompt(**kw) -> GenerateReqInput:
    return GenerateReqInput(text="hello there", **kw)


def test_submit_sends_at_once_and_the_handle_yields_what_comes_back():
    tm = make_tm()
    with tm.submit(prompt(stream=True)) as handle:
        (req,) = tm.send_to_scheduler.requests()  # sent by submit, before anyone iterates
        assert req.input_ids == tm.tokenizer.encode("hello there")
        tm.handle_message(piece(req.rid, "Hel", 1))
        tm.handle_message(piece(req.rid, "lo", 2, FinishLength(2)))
        states = list(handle)
        assert handle.finished
    assert [s.text for s in states][-1] == "Hello"
    assert states[-1].finished_reason.to_json()["type"] == "length"
    assert tm.send_to_scheduler.aborts() == []  # finished: nothing to abort
    assert tm.num_in_flight == 0


def test_an_exception_inside_the_with_aborts_what_has_not_finished():
    tm = make_tm()
    with pytest.raises(RuntimeError):
        with tm.submit(prompt(sampling_params=SamplingParams(n=2))):
            first, second = tm.send_to_scheduler.requests()
            tm.handle_message(piece(first.rid, "done", 1, FinishLength(1)))
            raise RuntimeError("the route failed")
    assert tm.send_to_scheduler.aborts() == [second.rid]  # the finished sample is not aborted
    assert tm.num_in_flight == 0


def test_a_handle_closed_twice_aborts_once():
    tm = make_tm()
    handle = tm.submit(prompt())
    (req,) = tm.send_to_scheduler.requests()
    handle.close()
    handle.close()
    assert tm.send_to_scheduler.aborts() == [req.rid]
    tm.handle_message(piece(req.rid, "late", 1, FinishLength(1)))  # a late piece is dropped
    assert list(handle) == [] and tm.num_in_flight == 0


def test_a_failed_send_closes_the_handle_and_answers_503():
    tm = make_tm(Outbox(fail=True))
    with pytest.raises(APIError) as err:
        tm.submit(prompt())
    assert err.value.status == 503 and "unreachable" in err.value.message
    assert tm.num_in_flight == 0


def test_a_failed_shared_write_answers_503_for_every_request_it_carried(tmp_path):
    """The real sender: the write fails after submit() returned, so the
    failure reaches the handle as the requests' finish, for non-streamed and
    streamed alike, and an RPC waiting on the same write gets its error."""
    tm = make_tm()
    tm.send_to_scheduler = SharedSender(Sender(str(tmp_path / "no-scheduler.sock"), b"k"), tm.send_failed)
    for stream in (False, True):
        with tm.submit(prompt(stream=stream)) as handle, pytest.raises(APIError) as err:
            handle.wait_first()
        assert err.value.status == 503 and "unreachable" in err.value.message
    assert tm.num_in_flight == 0
    with pytest.raises(APIError) as err:
        tm.rpc("flush_cache", timeout=5.0)
    assert "unreachable" in err.value.message


def test_a_refusal_is_raised_before_a_stream_begins():
    tm = make_tm()
    handle = tm.submit(prompt(stream=True))
    (req,) = tm.send_to_scheduler.requests()
    tm.handle_message(piece(req.rid, "", 0, FinishAbort("the server is at capacity", 503)))
    with handle, pytest.raises(APIError) as err:
        handle.wait_first()
    assert err.value.status == 503 and err.value.headers == {"Retry-After": "1"}


def test_wait_first_keeps_the_first_update_for_the_iteration():
    tm = make_tm()
    with tm.submit(prompt(stream=True)) as handle:
        (req,) = tm.send_to_scheduler.requests()
        tm.handle_message(piece(req.rid, "a", 1))
        handle.wait_first()
        first = next(handle)  # handed out again, not waited for
        assert first.text == "a" and not first.finished
        tm.handle_message(piece(req.rid, "b", 2, FinishLength(2)))
        assert next(handle).text == "ab" and list(handle) == []


def test_a_request_id_in_use_is_refused_and_the_first_keeps_running():
    tm = make_tm()
    with tm.submit(prompt(rid="mine")):
        with pytest.raises(APIError) as err:
            tm.submit(prompt(rid="mine"))
        assert err.value.status == 400 and err.value.param == "rid"
        assert tm.num_in_flight == 1 and tm.send_to_scheduler.aborts() == []


def test_the_request_timeout_fails_the_call_with_504_and_aborts():
    tm = make_tm(request_timeout=0.2)
    with tm.submit(prompt()) as handle:
        (req,) = tm.send_to_scheduler.requests()
        with pytest.raises(APIError) as err:
            handle.results()
    assert err.value.status == 504 and "--request-timeout" in err.value.message
    assert tm.send_to_scheduler.aborts() == [req.rid]


def test_a_core_failure_fails_the_calls_in_flight_and_refuses_new_ones():
    tm = make_tm()
    with tm.submit(prompt()) as handle:
        tm.fail_all("the scheduler died")
        with pytest.raises(APIError) as err:
            handle.results()
    assert err.value.status == 503 and err.value.message == "the scheduler died"
    with pytest.raises(APIError) as err:
        tm.submit(prompt())
    assert err.value.status == 503


def test_an_unstarted_manager_without_an_outbox_refuses_with_503():
    tm = TokenizerManager(ServerArgs(), PortArgs(sock_dir=""), b"")
    assert tm.recv_from_detokenizer is None  # the constructor bound nothing
    with pytest.raises(APIError) as err:
        tm.submit(prompt())
    assert err.value.status == 503 and tm.num_in_flight == 0


def test_start_and_close_own_the_inbox_and_the_receiver_thread():
    sock_dir = tempfile.mkdtemp(prefix="mtok-tm-", dir="/tmp")  # short: a socket path has ~100 bytes
    try:
        ports = PortArgs.in_dir(sock_dir)
        outbox = Outbox()
        tm = TokenizerManager(ServerArgs(), ports, b"key", outbox=outbox)
        assert not os.path.exists(ports.reply_inbox)
        tm.start()
        thread = tm._receiver_thread
        assert os.path.exists(ports.reply_inbox) and thread.is_alive()
        detokenizer = Sender(ports.reply_inbox, b"key")
        with tm.submit(prompt()) as handle:
            (req,) = outbox.requests()
            detokenizer.send(piece(req.rid, "over a socket", 3, FinishLength(3)))
            (st,) = handle.results()
        assert st.text == "over a socket"
        detokenizer.close()
        tm.close()
        tm.close()
        assert not thread.is_alive() and not os.path.exists(ports.reply_inbox)
        assert outbox.closed == 1
    finally:
        shutil.rmtree(sock_dir, ignore_errors=True)


# -- the SSE writer owns a stream's handle --------------------------------------------
class StreamApp:
    """One route: a stream of the texts of a request submitted to ``tm``."""

    def __init__(self, tm: TokenizerManager):
        self.tm = tm

    @route("POST", "/stream")
    def stream(self, req):
        handle = self.tm.submit(prompt(stream=True), req.watch)
        return EventStream(({"text": st.text} for st in handle), handle=handle)


@pytest.fixture
def streaming():
    tm = make_tm()
    httpd = HTTPServer(make_listen_socket("127.0.0.1", 0, False), StreamApp(tm), None, 1 << 20, 30.0)
    thread = threading.Thread(target=httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    yield tm, httpd.server_port
    httpd.shutdown()
    httpd.server_close()


def test_a_client_that_leaves_mid_stream_has_its_request_aborted(streaming):
    tm, port = streaming
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    conn.request("POST", "/stream", body=b"{}", headers={"Content-Type": "application/json"})
    req = wait_for(lambda: next(iter(tm.send_to_scheduler.requests()), None), what="the request to be sent")
    tm.handle_message(piece(req.rid, "first", 1))
    resp = conn.getresponse()
    assert resp.status == 200
    assert next(parse_sse(resp)) == {"text": "first"}
    conn.close()
    steps = iter(range(2, 10 ** 6))

    def aborted():  # pieces keep coming until the writer notices the client has gone
        if req.rid in tm.rid_to_state:
            tm.handle_message(piece(req.rid, "more", next(steps)))
        return tm.send_to_scheduler.aborts()

    assert wait_for(aborted, what="the abort") == [req.rid]
    assert tm.num_in_flight == 0


def test_a_stream_that_ends_aborts_nothing(streaming):
    tm, port = streaming
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    conn.request("POST", "/stream", body=b"{}", headers={"Content-Type": "application/json"})
    req = wait_for(lambda: next(iter(tm.send_to_scheduler.requests()), None), what="the request to be sent")
    tm.handle_message(piece(req.rid, "all", 1, FinishLength(1)))
    body = conn.getresponse().read()
    conn.close()
    assert b'data: {"text": "all"}' in body
    assert tm.send_to_scheduler.aborts() == [] and tm.num_in_flight == 0
