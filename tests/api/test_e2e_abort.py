"""Aborts: by client disconnect (streamed or not) and by /abort_request, across workers."""

from __future__ import annotations

import json

import pytest

from support import parse_sse, wait_for

pytestmark = pytest.mark.fast

LONG = {"max_new_tokens": 50000, "ignore_eos": True}


@pytest.fixture(scope="module", params=[1, 2], ids=["N1", "N2"])
def srv(request, server_factory):
    return server_factory("--tokenizer-worker-num", str(request.param), "--engine-step-delay", "0.01")


def running(srv):
    return srv.info()["scheduler"]["num_running"]


def test_stream_disconnect_aborts_in_scheduler(srv):
    conn = srv.conn()
    conn.request("POST", "/generate", body=json.dumps({"text": "long stream", "stream": True, "sampling_params": LONG}))
    resp = conn.getresponse()
    assert resp.status == 200
    first = next(parse_sse(resp))
    assert first["meta_info"]["finish_reason"] is None
    wait_for(lambda: running(srv) == 1, what="the request to run")
    conn.close()
    wait_for(lambda: running(srv) == 0, timeout=5, what="the scheduler to drop the request")


def test_nonstream_disconnect_aborts_in_scheduler(srv):
    conn = srv.conn()
    conn.request("POST", "/v1/completions", body=json.dumps({"prompt": "long wait", "max_tokens": 50000,
                                                               "ignore_eos": True}))
    wait_for(lambda: running(srv) == 1, what="the request to run")
    conn.close()
    wait_for(lambda: running(srv) == 0, timeout=5, what="the scheduler to drop the request")


def connection_to_other_worker(srv, pid):
    """A keep-alive connection served by a worker other than ``pid`` (N > 1)."""
    for _ in range(200):
        conn = srv.conn()
        status, headers, _ = srv.request("GET", "/health", conn=conn)
        if int(headers["x-mtok-worker"]) != pid:
            return conn
        conn.close()
    raise AssertionError("every connection landed on the same worker")


def test_abort_request_reaches_the_owner(srv):
    victim = srv.conn()
    victim.request("POST", "/generate", body=json.dumps({"text": "abort me", "rid": "victim-1", "stream": True,
                                                         "sampling_params": LONG}))
    resp = victim.getresponse()
    owner = int(resp.getheader("X-Mtok-Worker"))
    events = parse_sse(resp)
    assert next(events)["meta_info"]["id"] == "victim-1"
    n = srv.info()["tokenizer_worker_num"]
    other = connection_to_other_worker(srv, owner) if n > 1 else srv.conn()
    status, _, body = srv.request("POST", "/abort_request", {"rid": "victim-1"}, conn=other)
    assert status == 200 and body == {"rid": "victim-1", "aborted": True}
    rest = list(events)
    assert rest[-1] == "[DONE]"
    assert rest[-2]["meta_info"]["finish_reason"]["type"] == "abort"
    status, _, body = srv.request("POST", "/abort_request", {"rid": "victim-1"}, conn=other)
    assert body["aborted"] is False
    other.close()
    victim.close()
    wait_for(lambda: running(srv) == 0, what="an empty scheduler")
