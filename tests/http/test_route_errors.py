"""No route error closes a connection without an answer, and a client that
leaves is not a server error (issue 23: findings 5 and 8).

A lone surrogate in what a model says a tool call's JSON holds (``"\\ud800"``)
is written as its JSON escape, on every surface, streamed or not; a bug in a
route, or in writing its answer, is a 500 with a JSON body on both transports;
a streaming client that drops with RST is one INFO line in the log."""

from __future__ import annotations

import http.client
import json
import os
import socket
import struct

import pytest

from mtok.api import intake
from mtok.api.routes import Pending, Request, route
from support import ROOT, serving_in_process, wait_for

ECHO_TEMPLATE = os.path.join(ROOT, "examples", "chat_template_echo_last.jinja")
TOOLS = [{"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}]
SAYS = '<tool_call>{"name": "f", "arguments": {"a": "\\ud800"}}</tool_call>'  # the six characters \ud800


@pytest.fixture(scope="module", params=["loop", "threads"])
def tool_srv(request, server_factory):
    extra = ["--http-threads-only"] if request.param == "threads" else []
    return server_factory("--chat-template", ECHO_TEMPLATE, "--tool-call-parser", "hermes", *extra)


def chat(stream: bool):
    return {"messages": [{"role": "user", "content": SAYS + "END"}], "tools": TOOLS, "stop": ["END"],
            "stream": stream}


@pytest.mark.timeout(60)
def test_a_lone_surrogate_in_a_tool_call_is_written_as_its_json_escape(tool_srv):
    status, body = tool_srv.post("/v1/chat/completions", chat(False))
    assert status == 200, body
    call = body["choices"][0]["message"]["tool_calls"][0]["function"]
    assert call["name"] == "f" and json.loads(call["arguments"]) == {"a": "\ud800"}

    events = tool_srv.stream("/v1/chat/completions", chat(True))
    assert events[-1] == "[DONE]"
    args = "".join(tc["function"].get("arguments") or "" for ev in events[:-1] for ch in ev["choices"]
                   for tc in ch["delta"].get("tool_calls") or ())
    assert json.loads(args) == {"a": "\ud800"}

    status, body = tool_srv.post("/parse_function_call", {"text": SAYS, "tool_call_parser": "hermes", "tools": TOOLS})
    assert status == 200, body
    assert json.loads(body["calls"][0]["parameters"]) == {"a": "\ud800"}
    assert "Traceback" not in tool_srv.stderr()


# -- a route's bug, in process, on both transports ---------------------------------------
class _Handle:
    def __init__(self):
        self.states, self.closed = ["done"], False

    def drain(self):
        return True

    def close(self):
        self.closed = True

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def results(self):
        return self.states


class _BuggyApp:
    @route("GET", "/ok", inline=True)
    def ok(self, req: Request):
        return {"ok": True}

    @route("GET", "/raises", inline=True)
    def raises(self, req: Request):
        raise KeyError("a bug")

    @route("GET", "/unwritable", inline=True)
    def unwritable(self, req: Request):
        return {"x": object()}  # no JSON for it

    @route("GET", "/pending-unwritable", inline=True)
    def pending_unwritable(self, req: Request):
        return Pending(_Handle(), lambda states: {"x": {1, 2}})


@pytest.fixture(params=["loop", "threads"])
def buggy(request):
    with serving_in_process(_BuggyApp(), request.param) as port:
        yield port, request.param


def get(port: int, path: str):
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    try:
        c.request("GET", path)
        r = c.getresponse()
        return r.status, r.getheader("Content-Type"), r.read()
    finally:
        c.close()


@pytest.mark.unit
@pytest.mark.timeout(30)
@pytest.mark.parametrize("path", ["/raises", "/unwritable", "/pending-unwritable"])
def test_a_route_bug_is_a_500_with_a_json_body(buggy, path):
    port, _ = buggy
    status, ctype, raw = get(port, path)
    assert (status, ctype) == (500, "application/json") and json.loads(raw)["error"]["code"] == 500, raw
    assert get(port, "/ok")[0] == 200


@pytest.mark.unit
@pytest.mark.timeout(30)
def test_a_bug_in_the_loop_itself_is_a_500_too(buggy, monkeypatch):
    port, mode = buggy
    if mode != "loop":
        pytest.skip("the handler threads do not call intake.take")

    def broken(httpd, buf, progress, eof=False):
        raise RuntimeError("a bug in reading the request")

    monkeypatch.setattr(intake, "take", broken)
    status, ctype, raw = get(port, "/ok")
    assert (status, ctype) == (500, "application/json") and json.loads(raw)["error"]["code"] == 500, raw
    monkeypatch.undo()
    assert get(port, "/ok")[0] == 200


# -- a stream client that resets -------------------------------------------------------
@pytest.mark.timeout(90)
def test_a_stream_client_that_resets_is_one_info_line_not_a_traceback(server_factory):
    srv = server_factory()
    body = json.dumps({"text": "a b c d e f g", "stream": True,
                       "sampling_params": {"max_new_tokens": 50000, "ignore_eos": True}}).encode()
    drops = 10
    for _ in range(drops):
        s = socket.create_connection((srv.host, srv.port), timeout=30)
        s.sendall(b"POST /generate HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: %d"
                  b"\r\n\r\n%s" % (len(body), body))
        got = b""
        while b"data: " not in got:  # the stream has begun
            got += s.recv(65536)
        s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        s.close()  # RST
    line = "went away during a stream"
    wait_for(lambda: srv.stderr().count(line) >= drops, timeout=30, what=f"{drops} drops logged")
    assert srv.get("/health")[0] == 200
    log = srv.stderr()
    assert log.count(line) == drops and "Traceback" not in log and " ERROR " not in log, log[-3000:]
    assert all(" INFO " in ln for ln in log.splitlines() if line in ln)
