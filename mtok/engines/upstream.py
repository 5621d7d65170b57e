"""What every upstream engine shares: a bounded connection pool, one stream per
request, cancellation by closing it, health probing, and error mapping.

An upstream server (SGLang, vLLM, another mtok) batches on its own and streams
token ids when it has them, so an upstream engine is *asynchronous* in the
sense of :mod:`mtok.engines`: ``add_request`` queues the request for one of
``max_connections`` sender threads, each of which holds one pooled
``http.client`` connection for one request's stream at a time and buffers
what arrives; ``step`` hands out what is buffered (zero or more ids per
request) after waiting a few milliseconds for news.  Nothing here grows
without bound: the requests in flight are the scheduler's running batch
(``--max-running-requests``), those beyond it wait in the scheduler's queue
(``--max-queued-requests``, then 503), and connections are capped by the pool.

Cancelling a request -- a stop string mtok matched, a client that went away,
``/abort_request`` -- reaches :meth:`UpstreamEngine.finish_request`, which
shuts the request's socket down; the upstream sees its client disconnect and
aborts (SGLang: ``http_server.py``, the stream generator's disconnect check
around its line 962; vLLM does the same for a dropped stream).  Such a
connection is never reused.

Errors become abort finishes with the upstream's own message: a refusal (4xx)
stays a 400, an upstream failure (5xx, a stream that breaks, or 401/403/404:
an upstream set up wrong, say vLLM without ``--enable-scale-out``) is a 502, an
unreachable or overloaded upstream is a 503, and a timeout a 504.  A probe
thread asks the upstream's ``/health`` every second; while it fails,
:meth:`UpstreamEngine.health` says why and mtok's own ``/health`` is 503.

Options come in the URL's query: ``sglang:http://host:30000?max_connections=64&timeout=600``.
Subclasses say how a request is written (:meth:`request_body`) and how an
event is read (:meth:`parse_event`).
"""

from __future__ import annotations

import http.client
import json
import logging
import queue
import socket
import threading
import time
import urllib.parse
from typing import Any, Dict, Iterator, List, Optional, Sequence, Tuple

from . import Engine, EngineContext, EngineOutput
from ..wire.finish import FinishAbort, FinishReason

logger = logging.getLogger(__name__)

DEFAULT_MAX_CONNECTIONS = 64
DEFAULT_TIMEOUT = 300.0  # seconds without a byte from the upstream before a request is a 504
PROBE_INTERVAL = 1.0
STEP_WAIT = 0.005  # how long a step waits for news before returning empty-handed


def upstream_abort(status: int, message: str) -> FinishAbort:
    return FinishAbort(f"upstream: {message}", status)


def error_event_abort(error: Any) -> FinishAbort:
    """The finish for an ``{"error": ...}`` event in an upstream's stream (SGLang's
    and vLLM's share the shape): its 4xx code if it gives one, else 502."""
    err = error if isinstance(error, dict) else {"message": error}
    code = err.get("code")
    status = code if isinstance(code, int) and 400 <= code < 500 else 502
    return upstream_abort(status, str(err.get("message")))


def status_for(upstream_status: int) -> int:
    """The status mtok answers for an upstream's HTTP error status."""
    if upstream_status in (408, 504):
        return 504
    if upstream_status in (429, 503):
        return 503
    if upstream_status in (401, 403, 404, 405):  # the upstream is set up wrong, not the client's fault
        return 502
    return 400 if 400 <= upstream_status < 500 else 502


def error_message(raw: bytes) -> str:
    """The upstream's own words from an error body (SGLang/OpenAI/FastAPI shapes)."""
    try:
        body = json.loads(raw)
    except ValueError:
        return raw.decode("utf-8", "replace").strip()[:500] or "(empty body)"
    if isinstance(body, dict):
        err = body.get("error", body)
        if isinstance(err, dict):
            return str(err.get("message") or err.get("detail") or body.get("detail") or body)[:500]
        return str(err)[:500]
    return str(body)[:500]


class Pool:
    """At most ``size`` connections to one upstream; idle ones are kept for reuse (keep-alive)."""

    def __init__(self, url: str, size: int, timeout: float):
        parts = urllib.parse.urlsplit(url)
        self.https = parts.scheme == "https"
        self.host, self.port = parts.hostname or "127.0.0.1", parts.port or (443 if self.https else 80)
        self.prefix = parts.path.rstrip("/")
        self.timeout = timeout
        self.slots = threading.BoundedSemaphore(size)
        self.idle: List[http.client.HTTPConnection] = []
        self.lock = threading.Lock()

    def new(self, timeout: Optional[float] = None) -> http.client.HTTPConnection:
        cls = http.client.HTTPSConnection if self.https else http.client.HTTPConnection
        return cls(self.host, self.port, timeout=timeout or self.timeout)

    def get(self) -> http.client.HTTPConnection:
        self.slots.acquire()
        with self.lock:
            return self.idle.pop() if self.idle else self.new()

    def put(self, conn: http.client.HTTPConnection, reusable: bool) -> None:
        if reusable:
            with self.lock:
                self.idle.append(conn)
        else:
            conn.close()
        self.slots.release()


class Flight:
    """One request's stream: what arrived and was not yet handed to the scheduler."""

    __slots__ = ("req", "ids", "rows", "input_rows", "finish", "conn", "cancelled", "seen")

    def __init__(self, req: Any):
        self.req = req
        self.ids: List[int] = []
        self.rows: List[Any] = []
        self.input_rows: Optional[List[Any]] = None
        self.finish: Optional[FinishReason] = None
        self.conn: Optional[http.client.HTTPConnection] = None
        self.cancelled = False
        self.seen = 0  # output ids received so far

    def has_news(self) -> bool:
        return bool(self.ids) or self.finish is not None or self.input_rows is not None

    def take(self) -> EngineOutput:
        out = EngineOutput(self.ids, self.finish, self.rows if self.req.logprobs is not None else None,
                           self.input_rows)
        self.ids, self.rows, self.input_rows = [], [], None
        return out


class UpstreamEngine(Engine):
    """The shared machinery; subclasses write requests and read events."""

    asynchronous = True
    generate_path = "/generate"
    health_path = "/health"

    def __init__(self, ctx: EngineContext):
        super().__init__(ctx)
        url = (ctx.options or {}).get("url", "")
        base, _, query = url.partition("?")
        opts = {k: v[-1] for k, v in urllib.parse.parse_qs(query).items()}
        self.url = base
        size = int(opts.get("max_connections", DEFAULT_MAX_CONNECTIONS))
        self.pool = Pool(base, size, float(opts.get("timeout", DEFAULT_TIMEOUT)))
        self.cond = threading.Condition()
        self.flights: Dict[str, Flight] = {}
        self.todo: "queue.SimpleQueue[Flight]" = queue.SimpleQueue()
        self.problem: Optional[str] = None
        for i in range(size):
            threading.Thread(target=self._sender, name=f"upstream-{i}", daemon=True).start()
        threading.Thread(target=self._probe, name="upstream-probe", daemon=True).start()

    # -- the protocol ----------------------------------------------------------------
    def add_request(self, req: Any) -> None:
        flight = Flight(req)
        with self.cond:
            self.flights[req.rid] = flight
        self.todo.put(flight)

    def finish_request(self, req: Any) -> None:
        """The scheduler is done with ``req``: if its stream is still open, cut it."""
        with self.cond:
            flight = self.flights.pop(req.rid, None)
            if flight is None or flight.finish is not None:
                return
            flight.cancelled = True
            conn = flight.conn
        if conn is not None and conn.sock is not None:
            try:
                conn.sock.shutdown(socket.SHUT_RDWR)  # the sender thread's read fails at once
            except OSError:
                pass

    def step(self, batch: Sequence[Any]) -> List[EngineOutput]:
        with self.cond:
            flights = [self.flights[r.rid] for r in batch]
            if not any(f.has_news() for f in flights):
                self.cond.wait(STEP_WAIT)
            return [f.take() for f in flights]

    def health(self) -> Optional[str]:
        return self.problem

    # -- for subclasses --------------------------------------------------------------
    def request_body(self, req: Any) -> Dict[str, Any]:
        raise NotImplementedError

    def parse_event(self, flight: Flight, event: Dict[str, Any]) -> Tuple[List[int], List[Any], Optional[list],
                                                                          Optional[Dict[str, Any]]]:
        """(new ids, their logprob rows, prompt rows or None, finish or None) from one event."""
        raise NotImplementedError

    # -- the sender threads ----------------------------------------------------------
    def _sender(self) -> None:
        while True:
            flight = self.todo.get()
            if not flight.cancelled:
                try:
                    self._run(flight)
                except Exception as e:  # never lose a request to a bug: fail it
                    logger.exception("upstream request %s failed", flight.req.rid)
                    self._deliver(flight, [], [], None, upstream_abort(502, f"{type(e).__name__}: {e}"))

    def _run(self, flight: Flight) -> None:
        body = json.dumps(self.request_body(flight.req)).encode()
        conn = self.pool.get()
        reusable = False
        try:
            with self.cond:
                flight.conn = conn
                if flight.cancelled:
                    return
            reused = conn.sock is not None  # a fresh connection connects in its first request
            try:
                reusable = self._exchange(conn, flight, body)
            except (http.client.RemoteDisconnected, BrokenPipeError, ConnectionResetError):
                if not reused or flight.seen or flight.finish is not None or flight.cancelled:
                    raise
                # a kept-alive connection the upstream had closed while idle: once more on a new one
                conn.close()
                reusable = self._exchange(conn, flight, body)
        except socket.timeout:
            self._fail(flight, 504, f"no answer from {self.url} within {self.pool.timeout:g} s")
        except (ConnectionRefusedError, socket.gaierror) as e:
            self.problem = f"cannot reach {self.url}: {e}"
            self._fail(flight, 503, self.problem)
        except (OSError, http.client.HTTPException) as e:
            self._fail(flight, 502, f"the connection to {self.url} broke: {type(e).__name__}: {e}")
        finally:
            self.pool.put(conn, reusable and not flight.cancelled)

    def _exchange(self, conn: http.client.HTTPConnection, flight: Flight, body: bytes) -> bool:
        """Send one request and read its stream to the end; whether the connection is reusable."""
        conn.request("POST", self.pool.prefix + self.generate_path, body=body,
                     headers={"Content-Type": "application/json", "Accept": "text/event-stream"})
        resp = conn.getresponse()
        if resp.status != 200:
            self._fail(flight, status_for(resp.status), f"{resp.status} {error_message(resp.read())}")
            return not resp.will_close
        for event in sse_events(resp):
            if event is None:  # [DONE]
                break
            ids, rows, input_rows, finish = self.parse_event(flight, event)
            self._deliver(flight, ids, rows, input_rows, finish)
        if flight.finish is None:
            self._fail(flight, 502, "the stream ended without a finish reason")
            return False
        resp.read()  # the end of the chunked body, so the connection can carry the next request
        return not resp.will_close

    def _fail(self, flight: Flight, status: int, message: str) -> None:
        if not flight.cancelled:
            self._deliver(flight, [], [], None, upstream_abort(status, message))

    def _deliver(self, flight: Flight, ids: List[int], rows: List[Any], input_rows: Optional[list],
                 finish: Optional[Dict[str, Any]]) -> None:
        with self.cond:
            if flight.cancelled or flight.finish is not None:
                return
            flight.ids += ids
            flight.rows += rows
            flight.seen += len(ids)
            if input_rows is not None:
                flight.input_rows = input_rows
            flight.finish = finish
            self.cond.notify_all()

    # -- health ----------------------------------------------------------------------
    def _probe(self) -> None:
        while True:
            self.problem = self.check_upstream()
            time.sleep(PROBE_INTERVAL)

    def check_upstream(self) -> Optional[str]:
        conn = self.pool.new(timeout=min(5.0, self.pool.timeout))
        try:
            conn.request("GET", self.pool.prefix + self.health_path)
            resp = conn.getresponse()
            raw = resp.read()
            return None if resp.status == 200 else f"{self.url} says {resp.status} {error_message(raw)}"
        except (OSError, http.client.HTTPException) as e:
            return f"cannot reach {self.url}: {type(e).__name__}: {e}"
        finally:
            conn.close()

    def post_json(self, path: str, body: Dict[str, Any]) -> Tuple[int, Any]:
        """A short control call (``/flush_cache``) outside the pool."""
        conn = self.pool.new(timeout=min(30.0, self.pool.timeout))
        try:
            conn.request("POST", self.pool.prefix + path, body=json.dumps(body),
                         headers={"Content-Type": "application/json"})
            resp = conn.getresponse()
            return resp.status, resp.read()
        finally:
            conn.close()


def sse_events(resp: http.client.HTTPResponse) -> Iterator[Optional[Dict[str, Any]]]:
    """Each ``data:`` line's JSON; None for ``[DONE]``."""
    while True:
        line = resp.readline()
        if not line:
            return
        line = line.strip()
        if not line.startswith(b"data:"):
            continue
        data = line[5:].strip()
        if data == b"[DONE]":
            yield None
            return
        try:
            yield json.loads(data)
        except ValueError:
            raise http.client.HTTPException(f"a malformed event: {data[:80]!r}") from None
