"""Blocking work never runs on the event loop's thread (issue 23: findings 2
and 4): a route marked ``offload`` (a chat template's render, a parser) runs
on the loop's pool while the loop answers everything else, and its outcome is
settled in the loop's thread, whatever happens meanwhile (the client leaves,
the mailbox fills first, the route raises, the deadline passes)."""

from __future__ import annotations

import http.client
import json
import queue
import socket
import threading
from typing import Any, Callable, List

import pytest

from mtok.api.native import Api
from mtok.api.routes import Pending, Request, offloads, route
from support import serving_in_process, wait_for

# 200k turns of a loop, well within the 1,000,000 steps a render may take: about a
# second of CPU, all in the template, none of it in what the user says.
SLOW_TEMPLATE = """{%- set ns = namespace(s="") -%}
{%- for i in range(500) -%}{%- for j in range(400) -%}{%- set ns.s = (ns.s ~ j)[-40:] -%}{%- endfor -%}{%- endfor -%}
{%- for message in messages -%}{{ message["content"] }}{%- endfor -%}"""


class _Handle:
    """A request handle whose results are in once its mailbox holds something."""

    def __init__(self, mailbox: Any = None):
        self.mailbox, self.states, self.closed = mailbox, [], threading.Event()

    def drain(self) -> bool:
        while True:
            try:
                self.states.append(self.mailbox.get_nowait())
            except queue.Empty:
                return bool(self.states)

    def close(self) -> None:
        self.closed.set()


class _App:
    def __init__(self):
        self.release = threading.Event()
        self.started = threading.Event()
        self.handles: List[_Handle] = []

    @route("GET", "/ok", inline=True)
    def ok(self, req: Request):
        return {"ok": True}

    @route("GET", "/blocks", inline=True, offload=True)
    def blocks(self, req: Request):
        """Holds its pool thread until released, then answers with a Pending whose results are in."""
        self.started.set()
        assert self.release.wait(30)
        handle = _Handle(req.watch.new_mailbox())
        self.handles.append(handle)
        handle.mailbox.put("done")
        return Pending(handle, lambda states: {"states": states, "thread": threading.current_thread().name})

    @route("GET", "/early", inline=True, offload=True)
    def early(self, req: Request):
        """The mailbox fills (and wakes the loop) before the Pending is returned."""
        handle = _Handle(req.watch.new_mailbox())
        handle.mailbox.put("in before the Pending")
        return Pending(handle, lambda states: {"states": states})

    @route("GET", "/raises", inline=True, offload=True)
    def raises(self, req: Request):
        raise ValueError("a bug on the pool")


def get(port: int, path: str, timeout: float = 20):
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    try:
        c.request("GET", path)
        r = c.getresponse()
        return r.status, json.loads(r.read())
    finally:
        c.close()


def in_thread(fn: Callable[[], Any]) -> "queue.SimpleQueue[Any]":
    """Where what ``fn()`` returns, or the exception it raised, will be put."""
    out: "queue.SimpleQueue[Any]" = queue.SimpleQueue()

    def run() -> None:
        try:
            out.put(fn())
        except Exception as e:  # noqa: BLE001 (the test sees it)
            out.put(e)

    threading.Thread(target=run, daemon=True).start()
    return out


@pytest.mark.unit
@pytest.mark.timeout(60)
def test_an_offloaded_route_waits_on_the_pool_while_the_loop_serves_on():
    app = _App()
    with serving_in_process(app, "loop") as port:
        blocked = in_thread(lambda: get(port, "/blocks"))
        assert app.started.wait(20)
        for _ in range(5):  # answered while /blocks holds its thread
            assert get(port, "/ok") == (200, {"ok": True})
        assert blocked.empty()
        app.release.set()
        status, body = blocked.get(timeout=20)
        # the render ran on the pool too; the handle was closed
        assert status == 200 and body["states"] == ["done"] and body["thread"].startswith("mtok-offload")
        assert app.handles[0].closed.wait(5)


@pytest.mark.unit
@pytest.mark.timeout(60)
def test_a_mailbox_that_wakes_the_loop_before_its_pending_returns_loses_nothing():
    with serving_in_process(_App(), "loop") as port:
        for _ in range(20):
            assert get(port, "/early") == (200, {"states": ["in before the Pending"]})


@pytest.mark.unit
@pytest.mark.timeout(60)
def test_a_route_that_raises_on_the_pool_is_answered():
    with serving_in_process(_App(), "loop") as port:
        status, body = get(port, "/raises")
        assert status == 500 and body["error"]["code"] == 500
        assert get(port, "/ok")[0] == 200


@pytest.mark.unit
@pytest.mark.timeout(60)
def test_a_client_that_leaves_while_its_work_is_on_the_pool_has_its_request_aborted():
    app = _App()
    with serving_in_process(app, "loop") as port:
        s = socket.create_connection(("127.0.0.1", port), timeout=10)
        s.sendall(b"GET /blocks HTTP/1.1\r\nHost: x\r\n\r\n")
        assert app.started.wait(20)
        s.close()
        wait_for(lambda: get(port, "/ok")[0] == 200, what="the loop to serve on")
        app.release.set()
        wait_for(lambda: app.handles and app.handles[0].closed.is_set(), what="the dropped Pending's handle closed")
        assert get(port, "/ok")[0] == 200


@pytest.mark.unit
@pytest.mark.timeout(60)
def test_work_on_the_pool_past_the_request_timeout_is_a_504_and_its_late_result_dropped():
    app = _App()
    with serving_in_process(app, "loop", request_timeout=0.3) as port:
        c = http.client.HTTPConnection("127.0.0.1", port, timeout=20)
        c.request("GET", "/blocks")
        r = c.getresponse()
        assert r.status == 504 and json.loads(r.read())["error"]["code"] == 504
        app.release.set()
        wait_for(lambda: app.handles and app.handles[0].closed.is_set(), what="the late Pending's handle closed")
        c.request("GET", "/ok")  # the same connection serves on
        r = c.getresponse()
        assert r.status == 200 and json.loads(r.read()) == {"ok": True}
        c.close()


@pytest.mark.unit
def test_the_routes_that_render_or_parse_are_marked_to_run_on_the_pool():
    routes = {"/v1/chat/completions": Api.chat_completions, "/parse_function_call": Api.parse_function_call,
              "/separate_reasoning": Api.separate_reasoning}
    for path, handler in routes.items():
        assert offloads(handler, {}), path
    assert offloads(Api.tokenize, {"messages": []}) and not offloads(Api.tokenize, {"prompt": "x"})
    assert not offloads(Api.generate, {"text": "x"})  # the plain path stays on the loop


# -- over real processes -----------------------------------------------------------------
def race(srv, slow: Callable[[], Any]) -> List[str]:
    """Run ``slow`` in a thread while /health and a plain /generate are asked
    one after another; the order in which they were answered."""
    order: List[str] = []

    def run() -> Any:
        try:
            return slow()
        finally:
            order.append("slow")

    done = in_thread(run)
    while "slow" not in order:
        assert srv.get("/health")[0] == 200
        order.append("health")
        if "generate" not in order:
            status, _ = srv.post("/generate", {"text": "meanwhile", "sampling_params": {"max_new_tokens": 2}})
            assert status == 200
            order.append("generate")
    assert done.get(timeout=60) == 200
    return order


@pytest.fixture(scope="module")
def slow_srv(server_factory, tmp_path_factory):
    path = tmp_path_factory.mktemp("templates") / "slow.jinja"
    path.write_text(SLOW_TEMPLATE)
    return server_factory("--chat-template", str(path))


@pytest.mark.timeout(120)
@pytest.mark.parametrize("path,body", [
    ("/v1/chat/completions", {"messages": [{"role": "user", "content": "slow"}], "max_tokens": 2}),
    ("/tokenize", {"messages": [{"role": "user", "content": "slow"}]}),
])
def test_a_slow_render_leaves_the_worker_answering(slow_srv, path, body):
    order = race(slow_srv, lambda: slow_srv.post(path, body)[0])
    before = order[:order.index("slow")]
    assert "generate" in before and before.count("health") >= 3, order



@pytest.mark.timeout(120)
def test_slow_renders_cost_no_worker_its_heartbeat(server_factory, tmp_path):
    """Two workers that must beat every 0.8 s, each rendering slow templates for
    longer than that: the loops beat on while the pool renders, nobody is killed."""
    path = tmp_path / "slow.jinja"
    path.write_text(SLOW_TEMPLATE)
    srv = server_factory("--tokenizer-worker-num", "2", "--worker-timeout", "0.8", "--chat-template", str(path))
    body = {"messages": [{"role": "user", "content": "slow"}], "max_tokens": 2}
    answers = [in_thread(lambda: srv.post("/v1/chat/completions", body)[0]) for _ in range(4)]
    assert [a.get(timeout=100) for a in answers] == [200] * 4
    assert "missed its heartbeat" not in srv.stderr()
