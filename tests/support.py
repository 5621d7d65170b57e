"""Test helpers: a real server in a subprocess, and a small HTTP client."""

from __future__ import annotations

import contextlib
import http.client
import importlib
import json
import os
import re
import signal
import socket
import sys
import threading
import time
import weakref
from typing import Any, Dict, Iterator, List, Optional, Tuple

import pytest

from mtok.bench.servers import ReadyProcess

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SHARED_TOKENIZERS = os.path.join(ROOT, "..", "shared", "tokenizers")
READY = re.compile(r"mtok ready on http://\[?([^\]\s]+?)\]?:(\d+)")


def poll_until(predicate, timeout: float = 10.0, interval: float = 0.02) -> Any:
    """Poll ``predicate`` until it returns something truthy, and return that;
    at the deadline, its last (falsy) value."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value or time.monotonic() > deadline:
            return value
        time.sleep(interval)


def wait_for(predicate, timeout: float = 10.0, interval: float = 0.02, what: str = "condition") -> Any:
    """Poll ``predicate`` until it returns something truthy, or fail at the deadline."""
    value = poll_until(predicate, timeout, interval)
    if not value:
        raise AssertionError(f"timed out after {timeout:g} s waiting for {what}")
    return value


def vm_kib(pid: int, field: str) -> int:
    """A field of /proc/PID/status in KiB (VmRSS, VmHWM): a process's memory, read without asking it."""
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    raise AssertionError(f"no {field} in /proc/{pid}/status")


def children_of(pid: int) -> List[int]:
    """Every live descendant of ``pid``, from /proc."""
    parents: Dict[int, List[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                stat = f.read()
        except OSError:
            continue
        fields = stat[stat.rindex(")") + 2 :].split()
        if fields[0] == "Z":
            continue
        parents.setdefault(int(fields[1]), []).append(int(entry))
    out, todo = [], [pid]
    while todo:
        for child in parents.get(todo.pop(), []):
            out.append(child)
            todo.append(child)
    return out


# Every Server a test process has started and still holds: conftest attaches the
# tail of their logs to a failing test's report.
STARTED: "weakref.WeakSet[Server]" = weakref.WeakSet()


def remove_log_with(proc: ReadyProcess) -> None:
    """Delete ``proc``'s log file once nothing holds ``proc`` (or when the test
    process exits): a test reads it as long as it keeps its server."""
    weakref.finalize(proc, _remove_log, proc.log)


def _remove_log(log: Any) -> None:
    log.close()
    with contextlib.suppress(FileNotFoundError):
        os.unlink(log.name)


class Server(ReadyProcess):
    """``python -m mtok.serve`` on a free port, stopped at the end of its scope."""

    def __init__(self, *args: str, env: Optional[Dict[str, str]] = None, expect_ready: bool = True,
                 timeout: float = 60.0):
        self.args = ["--port", "0", *args]
        full_env = dict(os.environ)
        full_env.update(env or {})
        full_env.setdefault("PYTHONUNBUFFERED", "1")
        super().__init__([sys.executable, "-m", "mtok.serve", *self.args], full_env, "mtok-test-")
        remove_log_with(self)
        STARTED.add(self)
        self.host, self.port = "127.0.0.1", 0
        if expect_ready:
            m = self.wait_ready(READY, timeout)
            if m is None:
                self.stop(signal.SIGKILL)
                raise AssertionError(f"server did not become ready; log:\n{self.stderr()}")
            self.host, self.port = m.group(1), int(m.group(2))

    def conn(self, timeout: float = 30.0) -> http.client.HTTPConnection:
        return http.client.HTTPConnection(self.host, self.port, timeout=timeout)

    def request(self, method: str, path: str, body: Any = None, headers: Optional[Dict[str, str]] = None,
                conn: Optional[http.client.HTTPConnection] = None) -> Tuple[int, Dict[str, str], Any]:
        own = conn is None
        c = conn or self.conn()
        try:
            data = body if isinstance(body, (bytes, str)) or body is None else json.dumps(body)
            hdrs = {"Content-Type": "application/json", **(headers or {})}
            c.request(method, path, body=data, headers=hdrs)
            resp = c.getresponse()
            raw = resp.read()
            try:
                parsed = json.loads(raw) if raw else None
            except ValueError:
                parsed = raw
            return resp.status, {k.lower(): v for k, v in resp.getheaders()}, parsed
        finally:
            if own:
                c.close()

    def post(self, path: str, body: Any, **kw: Any) -> Tuple[int, Any]:
        status, _, parsed = self.request("POST", path, body, **kw)
        return status, parsed

    def get(self, path: str, **kw: Any) -> Tuple[int, Any]:
        status, _, parsed = self.request("GET", path, **kw)
        return status, parsed

    def stream(self, path: str, body: Any, conn: Optional[http.client.HTTPConnection] = None) -> List[Any]:
        """POST and collect server-sent events (parsed JSON, or the raw '[DONE]')."""
        own = conn is None
        c = conn or self.conn()
        try:
            c.request("POST", path, body=json.dumps(body), headers={"Content-Type": "application/json"})
            resp = c.getresponse()
            if resp.status != 200:
                raise AssertionError(f"stream got {resp.status}: {resp.read()!r}")
            return list(parse_sse(resp))
        finally:
            if own:
                c.close()

    def info(self, **kw: Any) -> Dict[str, Any]:
        status, body = self.get("/get_server_info", **kw)
        assert status == 200, body
        return body

    def conn_per_worker(self, n: int) -> List[http.client.HTTPConnection]:
        """``n`` kept-alive connections, each answered by a different one of the ``n`` workers: a
        worker accepts only while it holds the fewest connections (the default listen mode), so
        connections opened while the others stay open spread over the workers.  Which worker
        answered is the pid ``/get_server_info`` names; a connection landing on a worker already
        held (one still counting a connection its client closed) is kept open, and another opened."""
        by_pid: Dict[int, http.client.HTTPConnection] = {}
        extra = []
        for _ in range(4 * n):
            if len(by_pid) == n:
                break
            c = self.conn()
            pid = self.info(conn=c)["this_worker_pid"]
            if pid in by_pid:
                extra.append(c)
            else:
                by_pid[pid] = c
        for c in extra:
            c.close()
        assert len(by_pid) == n, f"{4 * n} connections reached only the workers {sorted(by_pid)}"
        return list(by_pid.values())


def parse_sse(resp: Any) -> Iterator[Any]:
    for raw in resp:
        line = raw.decode().rstrip("\r\n")
        if not line.startswith("data: "):
            continue
        payload = line[len("data: ") :]
        yield payload if payload == "[DONE]" else json.loads(payload)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def shared_tokenizer(name: str) -> str:
    path = os.path.join(SHARED_TOKENIZERS, name)
    if not os.path.isfile(path):
        skip_real(f"{path} is absent (the shared conformance tokenizers are not on this machine)")
    return path


REQUIRE_REAL = os.environ.get("MTOK_REQUIRE_REAL") == "1"


def skip_real(reason: str) -> None:
    """Skip a test of a real component (vLLM, SGLang's code, nginx; the
    references the ``test`` extra installs: tokenizers, transformers, jinja2,
    openai, prometheus_client, hypothesis; ../shared's files) that is not on
    this machine -- or fail it where ``MTOK_REQUIRE_REAL=1`` (``.ci/run`` sets
    it after installing them all), so CI never skips one silently.  Tests of
    what tox's envs never have carry the ``real`` marker (vLLM's ``real_vllm``):
    tox deselects them."""
    if REQUIRE_REAL:
        pytest.fail(f"MTOK_REQUIRE_REAL=1 but {reason}", pytrace=False)
    pytest.skip(reason, allow_module_level=True)


def import_real(name: str, reason: Optional[str] = None) -> Any:
    """``pytest.importorskip`` for a real component's module, through :func:`skip_real`."""
    try:
        return importlib.import_module(name)
    except ImportError as e:
        skip_real(f"{reason or f'{name} is not installed'} ({e})")


def hf_installed() -> bool:
    try:
        import tokenizers  # noqa: F401
    except ImportError:
        return False
    return True


@contextlib.contextmanager
def serving_in_process(app: Any, mode: str, **loop_kw: Any) -> Iterator[int]:
    """An :class:`~mtok.api.server.HTTPServer` of ``app``'s routes in this process,
    through the event loop (``mode`` "loop", its keywords ``loop_kw``) or the
    handler threads ("threads"); yields its port."""
    from mtok.api.loop import AVAILABLE, EventLoop
    from mtok.api.server import HTTPServer

    if mode == "loop" and not AVAILABLE:
        pytest.skip("no epoll here")
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(64)
    httpd = HTTPServer(sock, app, None, 1 << 20, 10.0)
    serve = EventLoop(httpd, **loop_kw).serve_forever if mode == "loop" else httpd.serve_forever
    threading.Thread(target=serve, kwargs={"poll_interval": 0.05}, daemon=True).start()
    try:
        yield sock.getsockname()[1]
    finally:
        if mode == "threads":
            httpd.shutdown()
        sock.close()
