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
thread (:mod:`mtok.engines.upstream_probe`) asks the upstream's ``/health``
every second; while it fails, :meth:`UpstreamEngine.health` says why and
mtok's own ``/health`` is 503.  It also learns the upstream's context limit
(:meth:`UpstreamEngine.context_length`).

What an upstream sends is untrusted and every read of it is bounded
(:mod:`mtok.engines.upstream_limits`): crossing a bound, a redirect, an
answer that is no event stream or a malformed event fails that one request
with a 502, never the scheduler or the other requests.  The time bounds are
kept by :meth:`UpstreamEngine.step`, which the scheduler runs every few
milliseconds anyway: a stream whose next event is overdue is cut there, so
neither a drip of bytes nor a stalled response head can hold a request.  The
same look fails, with a 503, a stream that has been silent for a couple of
seconds (``health_grace``) while the probe finds the upstream unhealthy: a
vLLM stopped with SIGTERM refuses connections at once but may hold its open
streams silent for as long as it takes to shut down.  No thread per stream:
the one probe thread's finding is read there.  The
finishing event is held back until ``[DONE]`` (or the stream's end), so ids
that come after it fail the request rather than vanish.

Options come in the URL's query (:class:`~mtok.engines.upstream_limits.Limits`):
``sglang:http://host:30000?max_connections=64&timeout=600``.
Subclasses say how a request is written (:meth:`request_body`) and how an
event is read (:meth:`parse_event`).  A body with ``"stream": false`` (what
vLLM needs for prompt logprobs, which its stream cannot carry) is answered by
one JSON object, read as one event within ``max_line_bytes`` and ``timeout``.
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
from typing import Any, Dict, List, Optional, Sequence, Tuple

from . import Engine, EngineContext, EngineOutput
from .upstream_limits import SHAPE_ERRORS, Budget, Limits, Malformed, checked, error_message, read_capped, sse_events
from .upstream_probe import CONTROL_TIMEOUT, Probe, call
from ..wire.finish import FinishAbort, FinishReason

logger = logging.getLogger(__name__)

STEP_WAIT = 0.005  # how long a step waits for news before returning empty-handed
DRAIN_BYTES = 64 * 1024  # what may follow [DONE] on a connection that is kept for reuse


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

    __slots__ = ("req", "ids", "rows", "input_rows", "finish", "sock", "cancelled", "seen", "budget", "whole")

    def __init__(self, req: Any):
        self.req = req
        self.ids: List[int] = []
        self.rows: List[Any] = []
        self.input_rows: Optional[List[Any]] = None
        self.finish: Optional[FinishReason] = None
        self.sock: Optional[socket.socket] = None  # its stream's socket, for cutting it
        self.cancelled = False
        self.seen = 0  # output ids received so far (the sender thread's count)
        self.budget: Optional[Budget] = None  # set when its sender begins it
        self.whole = False  # asked for one JSON answer, not a stream

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
        self.url = base
        self.limits = Limits.from_query(query)
        self.vocab_size: Optional[int] = getattr(ctx.tokenizer, "vocab_size", None)
        size = self.limits.max_connections
        self.pool = Pool(base, size, self.limits.timeout)
        self.cond = threading.Condition()
        self.flights: Dict[str, Flight] = {}
        self.todo: "queue.SimpleQueue[Flight]" = queue.SimpleQueue()
        for i in range(size):
            threading.Thread(target=self._sender, name=f"upstream-{i}", daemon=True).start()
        self.probe = Probe(self.pool, self.limits.max_line_bytes, base, self.health_path).start()

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
            if flight is not None and flight.finish is None:
                self._cut(flight)

    def step(self, batch: Sequence[Any]) -> List[EngineOutput]:
        with self.cond:
            flights = [self.flights[r.rid] for r in batch]
            if not any(f.has_news() for f in flights):
                self.cond.wait(STEP_WAIT)
            self._cut_overdue(flights)
            return [f.take() for f in flights]

    def _cut_overdue(self, flights: List[Flight]) -> None:
        """Fail and cut the streams whose next event is late, or that are silent
        while the probe finds the upstream unhealthy (the lock is held)."""
        now = time.monotonic()
        unhealthy = self.health()
        for flight in flights:
            late = flight.budget is not None and flight.finish is None and flight.budget.overdue(now, self.url,
                                                                                                 unhealthy)
            if late:
                self._deliver(flight, [], [], None, upstream_abort(*late))
                logger.warning("upstream request %s: %s", flight.req.rid, late[1])
                self._cut(flight)

    @staticmethod
    def _cut(flight: Flight) -> None:
        """Stop ``flight``'s stream: its sender's read fails at once and the
        connection is not reused (the lock is held)."""
        flight.cancelled = True
        if flight.sock is not None:
            try:
                flight.sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

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
        request = self.request_body(flight.req)
        body = json.dumps(request).encode()
        flight.whole = request.get("stream") is False
        flight.budget = Budget(self.limits, flight.req.sampling_params.max_new_tokens)
        conn = self.pool.get()
        reusable = False
        try:
            if not self._attach(flight, conn):
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
        except Malformed as e:
            self._fail(flight, 502, f"{self.url} sent {e}")
        except socket.timeout:  # the socket's own timeout (``timeout``), should step not have cut it first
            self._fail(flight, *flight.budget.overdue(float("inf"), self.url))
        except (ConnectionRefusedError, socket.gaierror) as e:
            self.probe.problem = f"cannot reach {self.url}: {e}"
            self._fail(flight, 503, self.probe.problem)
        except (OSError, http.client.HTTPException) as e:
            self._fail(flight, 502, f"the connection to {self.url} broke: {type(e).__name__}: {e}")
        finally:
            self.pool.put(conn, reusable and not flight.cancelled)

    def _exchange(self, conn: http.client.HTTPConnection, flight: Flight, body: bytes) -> bool:
        """Send one request and read its stream to the end; whether the connection is reusable."""
        conn.request("POST", self.pool.prefix + self.generate_path, body=body,
                     headers={"Content-Type": "application/json", "Accept": "text/event-stream"})
        if not self._attach(flight, conn):  # cut while connecting
            return False
        resp = conn.getresponse()
        if resp.status != 200:
            return self._refused(flight, resp)
        kind = (resp.getheader("Content-Type") or "").partition(";")[0].strip().lower()
        wanted = "application/json" if flight.whole else "text/event-stream"
        if kind != wanted:
            raise Malformed(f"a {kind or 'untyped'} answer, not {'a JSON object' if flight.whole else 'an event stream'}")
        held = self._read_whole(flight, resp) if flight.whole else self._read_stream(flight, resp)
        if held is None:
            self._fail(flight, 502, "the stream ended without a finish reason")
            return False
        self._deliver(flight, *held)
        return self._drain(conn, resp)

    def _attach(self, flight: Flight, conn: http.client.HTTPConnection) -> bool:
        """Note the socket ``flight`` streams on, so that it can be cut; False if it already was."""
        with self.cond:
            flight.sock = conn.sock
            return not flight.cancelled

    def _refused(self, flight: Flight, resp: http.client.HTTPResponse) -> bool:
        """A status other than 200: the request fails with its mapped status and
        the upstream's words; a redirect is never followed."""
        if 300 <= resp.status < 400:
            raise Malformed(f"a redirect ({resp.status} to {resp.getheader('Location')!r}), which mtok never follows")
        assert flight.budget is not None
        raw = read_capped(resp, self.limits.max_line_bytes, flight.budget.due, None)
        self._fail(flight, status_for(resp.status), f"{resp.status} {error_message(raw)}")
        return not resp.will_close

    def _read_stream(self, flight: Flight, resp: http.client.HTTPResponse) -> Optional[tuple]:
        """Deliver the events as they come, but hold the finishing one back and
        return it (None if none came): ids after a finish are Malformed."""
        assert flight.budget is not None
        held = None
        for event in sse_events(resp, flight.budget):
            if event is None:  # [DONE]
                break
            ids, rows, input_rows, finish = self._parsed(flight, event)
            if held is not None:
                if ids:
                    raise Malformed(f"token ids after its finish reason: {ids[:5]}")
                continue
            flight.seen += len(ids)
            if finish is None:
                self._deliver(flight, ids, rows, input_rows, None)
            else:
                held = (ids, rows, input_rows, finish)
        return held

    def _read_whole(self, flight: Flight, resp: http.client.HTTPResponse) -> Optional[tuple]:
        """A whole answer (``"stream": false``), read as one event: its finish, held
        (None if it has none)."""
        assert flight.budget is not None
        raw = read_capped(resp, flight.budget.line_cap(), flight.budget.due, None)
        try:
            answer = json.loads(raw)
        except (ValueError, RecursionError):
            raise Malformed(f"a malformed answer: {raw[:80]!r}") from None
        ids, rows, input_rows, finish = self._parsed(flight, answer)
        flight.seen += len(ids)
        return None if finish is None else (ids, rows, input_rows, finish)

    def _parsed(self, flight: Flight, event: Any) -> Tuple[List[int], List[Any], Optional[list], Any]:
        """:meth:`parse_event`'s reading of ``event``, checked (:func:`checked`);
        Malformed if the event is not of the shape expected."""
        lp = flight.req.logprobs
        room = len(flight.req.input_ids) - (max(lp.start_len, 0) if lp is not None else 0)
        try:
            if not isinstance(event, dict):
                raise TypeError(f"{type(event).__name__}, not an object")
            return checked(self.parse_event(flight, event), room, self.vocab_size)
        except SHAPE_ERRORS as e:
            raise Malformed(f"a malformed event ({type(e).__name__}: {e})") from None

    def _drain(self, conn: http.client.HTTPConnection, resp: http.client.HTTPResponse) -> bool:
        """Read the little that follows ``[DONE]`` (the chunked body's end), and
        only briefly, so the connection can carry the next request; whether it can."""
        if resp.will_close or conn.sock is None:
            return False
        if resp.isclosed():
            return True
        try:
            conn.sock.settimeout(self.limits.idle_timeout)
            resp.read(DRAIN_BYTES)
            conn.sock.settimeout(self.pool.timeout)
        except (OSError, http.client.HTTPException):
            return False
        return resp.isclosed()

    def _fail(self, flight: Flight, status: int, message: str) -> None:
        if not flight.cancelled:
            if status == 502:
                logger.warning("upstream request %s: %s", flight.req.rid, message)
            self._deliver(flight, [], [], None, upstream_abort(status, message))

    def _deliver(self, flight: Flight, ids: List[int], rows: List[Any], input_rows: Optional[list],
                 finish: Optional[Dict[str, Any]]) -> None:
        with self.cond:
            if flight.cancelled or flight.finish is not None:
                return
            flight.ids += ids
            flight.rows += rows
            if input_rows is not None:
                flight.input_rows = input_rows
            flight.finish = finish
            self.cond.notify_all()

    # -- health and control calls (mtok.engines.upstream_probe) -------------------------
    def health(self) -> Optional[str]:
        return self.probe.health()

    def context_length(self) -> Optional[int]:
        return self.probe.max_model_len

    def post_json(self, path: str, body: Dict[str, Any]) -> Tuple[int, Any]:
        """A short control call (``/flush_cache``) outside the pool."""
        return call(self.pool, self.limits.max_line_bytes, "POST", path, json.dumps(body), CONTROL_TIMEOUT)
