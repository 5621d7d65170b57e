"""The event loop in front of the handler threads: one thread waits on every
connection at once and serves the common request whole.

Why.  With a thread per connection (:mod:`mtok.api.server`) every request
wakes its thread twice, once for its bytes and once for its result, and each
wake-up costs a context switch and a GIL hand-off: about a third of a worker's
CPU per request at two workers on two cores (docs/benchmarks.md).  One thread
that waits on all the sockets (epoll) and on the results is woken once for
many requests.

What the loop serves itself: a request whose head and ``Content-Length`` body
(at most :data:`~mtok.api.inline.INLINE_MAX_BODY`) have arrived, for a route marked ``inline``
(:func:`mtok.api.routes.route`), that does not ask for a stream.  The routes
of the requests one turn read run at its end, together, in the loop's thread
(so that their prompts can be tokenized together: ``prepare_turn``), but for
those marked ``offload``, which run on a few threads of their own
(:mod:`mtok.api.offload`) while the loop keeps their connection; a
:class:`~mtok.api.routes.Pending` answer is written when its handle's
mailbox (made by :class:`LoopWatch`) says the results are in.

What it hands over: everything else (streams, chunked bodies, ``Expect``,
CORS, a failed API key, routes that wait on the scheduler, bodies too large
to tokenize without stalling the loop, framing it would refuse, a server
draining).  :meth:`HTTPServer.serve_connection
<mtok.api.server.HTTPServer.serve_connection>` gets the connection with the
bytes already read, and a handler thread serves it from that request on, as
if it had accepted it.  So every refusal is written by one code path, and the
loop needs no parser of its own: it calls the same functions of
:mod:`mtok.api.framing`.

Lifecycle (``socketserver``'s steps): construct (nothing runs), then
:meth:`EventLoop.serve_forever` in a thread; :meth:`EventLoop.stop_accepting`
from another thread stops new connections, while those open are served on.
Linux only: a waiting request is watched for its client's hang-up with
EPOLLRDHUP, which pipelined bytes do not mask.
"""

from __future__ import annotations

import collections
import contextlib
import logging
import select
import threading
import time
from typing import Any, Callable, Deque, Dict, List, Optional, Tuple

from . import inline
from .connections import WATCH_AFTER
from .loop_accept import PAUSED_POLL, Acceptor
from .loop_conn import READING, WAITING, WRITING, Conn, LoopWatch, Waker
from .offload import Offload, drop
from .respond import body_fields, encode_outcome, internal_error, response_head
from .routes import EventStream, Pending, Request, offloads
from ..validate import APIError

logger = logging.getLogger(__name__)

AVAILABLE = hasattr(select, "epoll") and hasattr(select, "EPOLLRDHUP")
RECV_SIZE = 256 << 10


def enabled(args: Any) -> bool:
    """Does a worker with these settings serve through the loop?"""
    return AVAILABLE and not args.http_threads_only


class EventLoop:
    """Serve ``httpd``'s listening socket from one thread (see the module's docstring).

    ``httpd`` is the :class:`~mtok.api.server.HTTPServer` whose routes, limits,
    counters and handler threads the loop shares.  ``corked``, if given, makes
    the context each turn runs in: the TokenizerManager's sender holds the
    messages the turn's requests send and writes them together at its end
    (:meth:`SharedSender.corked <mtok.wire.ipc.SharedSender.corked>`).

    ``prepare_turn``, if given, takes the plans (:class:`~mtok.api.inline.Plan`)
    of the requests a turn read and gives the context their routes run in (the
    worker tokenizes their prompts together: :mod:`mtok.managers.ahead`); it
    must not raise.

    ``fewest``, if given, is told this worker's open connections and says
    whether it holds the fewest of the workers sharing the listening socket:
    only then does the loop accept (:mod:`mtok.api.loop_accept` says why).

    ``request_timeout`` (``--request-timeout``) bounds a request's time on the pool.
    """

    def __init__(self, httpd: Any, corked: Optional[Callable[[], Any]] = None,
                 fewest: Optional[Callable[[int], bool]] = None,
                 prepare_turn: Optional[Callable[[List[inline.Plan]], Any]] = None,
                 request_timeout: float = float("inf")):
        self.httpd, self.request_timeout = httpd, request_timeout
        self.corked = corked or contextlib.nullcontext
        self.acceptor = Acceptor(httpd, fewest)
        self.prepare_turn = prepare_turn or (lambda plans: contextlib.nullcontext())
        self.planned: List[Tuple[Conn, inline.Plan]] = []  # requests read this turn, run at its end
        self.conns: Dict[int, Conn] = {}
        self.woken: Deque[Conn] = collections.deque()  # conns whose mailbox was filled
        self.again: Deque[Conn] = collections.deque()  # conns with a next request already buffered
        self.waker = Waker()
        self.offload = Offload(self.waker.nudge)
        self._accept_stopped = threading.Event()
        self._readers: Dict[int, Callable[[], None]] = {}
        self._thread: Optional[int] = None  # the loop thread's ident, once it runs
        self.epoll: Any = None

    def add_reader(self, fd: int, callback: Callable[[], None]) -> None:
        """Call ``callback`` in the loop's thread whenever ``fd`` is readable (call
        it before :meth:`serve_forever`, or from a callback).  The TokenizerManager's
        inbox is read so, with no thread of its own: the results are taken in
        where they are written (:meth:`Receiver.attach <mtok.wire.ipc.Receiver.attach>`)."""
        self._readers[fd] = callback
        if self.epoll is not None:
            self.epoll.register(fd, select.EPOLLIN)

    def remove_reader(self, fd: int) -> None:
        if self._readers.pop(fd, None) is not None and self.epoll is not None:
            try:
                self.epoll.unregister(fd)
            except (OSError, ValueError):
                pass

    # -- lifecycle -------------------------------------------------------------------
    def serve_forever(self, poll_interval: float = 0.25) -> None:
        listener = self.httpd.socket
        listener.setblocking(False)
        ep = self.epoll = self.acceptor.epoll = select.epoll()
        ep.register(listener.fileno(), select.EPOLLIN)
        ep.register(self.waker.fileno(), select.EPOLLIN)
        for fd in self._readers:
            ep.register(fd, select.EPOLLIN)
        self._thread = threading.get_ident()
        next_tick = 0.0
        while True:
            # no wait while something is ready: a pipelined request, news put after the last turn's run
            ready = self.woken or self.again or self.offload.done
            events = ep.poll(0 if ready else PAUSED_POLL if self.acceptor.paused else poll_interval)
            self.acceptor.resume()
            with self.corked():
                for fd, ev in events:
                    self._safely(fd, self._event, fd, ev)
                self._run_ready()
            now = time.monotonic()
            if now >= next_tick:
                next_tick = now + poll_interval
                self.httpd.service_actions()
                self._sweep(now)

    def stop_accepting(self, timeout: float = 5.0) -> None:
        """Take no more connections (any thread); those open are served on."""
        self.acceptor.accepting = False
        if self.epoll is None:
            return
        self.waker.signal()
        self._accept_stopped.wait(timeout)

    def wake(self, conn: Conn) -> None:
        """``conn``'s mailbox has news (any thread)."""
        self.woken.append(conn)
        if threading.get_ident() != self._thread:
            self.waker.nudge()

    # -- events ----------------------------------------------------------------------
    def _event(self, fd: int, ev: int) -> None:
        conn = self.conns.get(fd)
        if conn is None:
            reader = self._readers.get(fd)
            if reader is not None:
                reader()
            elif fd == self.waker.fileno():
                self.waker.clear()  # before the woken are run
            else:
                self._accept()
        elif conn.state == READING:
            self._read(conn)
        elif conn.state == WRITING and not ev & (select.EPOLLHUP | select.EPOLLERR):
            self._flush(conn)
        elif conn.state == WAITING and not ev & (select.EPOLLHUP | select.EPOLLERR) \
                and time.monotonic() - conn.started < WATCH_AFTER:
            # Shut for writing only, early: as a handler thread would, wait WATCH_AFTER
            # before taking that for a hang-up; a quick answer still goes out (see _sweep).
            self.epoll.modify(conn.fd, 0)
            conn.watched = False
        else:  # a hang-up while waiting, or a write the client will not take
            self._close(conn)

    def _run_ready(self) -> None:
        if not self.acceptor.accepting and not self._accept_stopped.is_set():
            self.acceptor.watch(None)
            self._accept_stopped.set()
        for (conn, task, then), outcome in self.offload.settled():
            if self._still(conn, WAITING) and conn.task is task:
                conn.task = None
                self._safely(conn.fd, then, conn, outcome)
            else:  # the client left, or was answered (a timeout) meanwhile
                drop(outcome)
        while self.woken:
            conn = self.woken.popleft()
            if self._still(conn, WAITING) and conn.pending is not None:  # not while on the pool
                self._safely(conn.fd, self._advance, conn)
        for _ in range(len(self.again)):  # one request each per turn: a pipelining client waits its turn
            conn = self.again.popleft()
            if self._still(conn, READING):
                self._safely(conn.fd, self._serve, conn)
        planned, self.planned = self.planned, []
        if planned:
            with self.prepare_turn([plan for _, plan in planned]):
                for conn, plan in planned:
                    if self._still(conn, READING):
                        self._safely(conn.fd, self._dispatch, conn, plan.handler, plan.request, plan.close)

    def _still(self, conn: Conn, state: str) -> bool:
        """Whether ``conn``, noted earlier in the turn, is open and in ``state`` yet."""
        return conn.state == state and self.conns.get(conn.fd) is conn

    def _safely(self, fd: int, fn: Callable[..., None], *args: Any) -> None:
        """A bug costs the request it struck (logged; a 500, then the connection
        closed), never the loop."""
        try:
            fn(*args)
        except Exception as e:  # noqa: BLE001
            logger.exception("the HTTP event loop failed on descriptor %d", fd)
            conn = self.conns.get(fd)
            if conn is not None:
                self._fail(conn, e)

    def _fail(self, conn: Conn, exc: Exception) -> None:
        """Answer ``conn`` with the 500 of a bug unless its answer has begun (then,
        or if that fails too, all it can be told is that the connection closes)."""
        try:
            if conn.status == 0 and conn.state != WRITING:
                if conn.pending is not None:
                    conn.pending.handle.close()
                conn.pending = conn.task = None  # what the pool still does for it is dropped
                if conn.started is None:
                    self._begin(conn, "other", True)
                conn.close = True  # what the loop knew of this connection is not to be trusted
                return self._respond(conn, internal_error(exc))
        except Exception:  # noqa: BLE001
            logger.exception("and could not answer it")
        try:
            self._close(conn)
        except Exception:  # noqa: BLE001
            logger.exception("and could not close it")

    def _accept(self) -> None:
        got = self.acceptor.accept()
        if got is not None:
            conn = self.conns[got[0].fileno()] = Conn(got[0], got[1], time.monotonic())
            self.epoll.register(conn.fd, select.EPOLLIN | select.EPOLLRDHUP)
            self.acceptor.publish()

    def _read(self, conn: Conn) -> None:
        try:
            data = conn.sock.recv(RECV_SIZE)
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            data = b""
        if not data:  # with a request cut short, a thread answers it (400) as it would have
            return self._hand_over(conn) if conn.buf else self._close(conn)
        conn.buf += data
        self._serve(conn)

    def _sweep(self, now: float) -> None:
        """Deadlines, as the handler threads keep them: a request (and the wait
        for it on a kept-alive connection) within --http-timeout, each piece of
        a response taken within it, a request done within --request-timeout."""
        timeout = self.httpd.read_timeout
        for conn in list(self.conns.values()):
            if conn.state == WAITING:
                if not conn.watched:
                    conn.watched = True
                    self.epoll.modify(conn.fd, select.EPOLLRDHUP)  # a half-close still there shows at once
                if conn.task is None:
                    conn.pending.handle.check_deadline()  # late: fails with 504, and wakes us
                elif now - conn.started > self.request_timeout:  # late on the pool: its outcome is dropped
                    conn.task = None
                    self._respond(conn, APIError("the request took longer than --request-timeout", 504))
            elif now - conn.since <= timeout:
                continue
            elif conn.state == READING and conn.buf:
                self._begin(conn, "other", True)
                self._respond(conn, APIError("the request took too long to arrive", 408))
            else:
                if conn.state == WRITING:
                    logger.warning("%s was too slow to read its response; closing", conn.addr[0])
                self._close(conn)

    # -- one request -----------------------------------------------------------------
    def _serve(self, conn: Conn) -> None:
        """Plan the buffered request if it has all arrived (its route runs at the
        turn's end); hand the connection over if it is not one the loop serves
        (see :mod:`mtok.api.inline`)."""
        plan = inline.take(self.httpd, conn.buf)
        if plan is inline.HAND_OVER:
            self._hand_over(conn)
        elif plan is not inline.WAIT:
            plan.request.watch = LoopWatch(self, conn)
            self.planned.append((conn, plan))  # run at the turn's end, with the others (see _run_ready)

    def _begin(self, conn: Conn, endpoint: str, close: bool) -> None:
        self.httpd.count(1)
        conn.started, conn.endpoint, conn.close, conn.status = time.monotonic(), endpoint, close, 0

    def _dispatch(self, conn: Conn, handler: Any, req: Request, close: bool) -> None:
        self._begin(conn, req.path if req.path in self.httpd.routes else "other", close)
        conn.offloaded = offloads(handler, req._json)
        if conn.offloaded:
            return self._offload(conn, self._settle, handler, req)
        try:
            result = handler(req)
        except Exception as e:  # noqa: BLE001 (an APIError, a bug: answered as the threads answer)
            return self._respond(conn, e)
        self._settle(conn, result)

    def _offload(self, conn: Conn, then: Callable[[Conn, Any], None], fn: Callable[..., Any], *args: Any) -> None:
        """Run ``fn(*args)`` on the pool while ``conn`` waits; ``then(conn, outcome)``
        in the loop's thread, once it returned or raised (unless conn is gone or answered)."""
        conn.task, conn.state, conn.watched = object(), WAITING, True
        self.epoll.modify(conn.fd, select.EPOLLRDHUP)  # pipelined bytes wait; a hang-up still shows
        self.offload.submit((conn, conn.task, then), fn, *args)

    def _settle(self, conn: Conn, result: Any) -> None:
        """A route's result: a Pending is waited on, anything else answered."""
        if isinstance(result, Pending):
            conn.pending, conn.state, conn.watched = result, WAITING, True
            self.epoll.modify(conn.fd, select.EPOLLRDHUP)  # pipelined bytes wait; a hang-up still shows
            return self._advance(conn)  # it may have failed or finished already
        if isinstance(result, EventStream):  # an inline route broke its promise: a bug
            result.close()
            result = RuntimeError("an inline route returned a stream it was not asked for")
        self._respond(conn, result)

    def _advance(self, conn: Conn) -> None:
        """Take in the waiting request's news; answer once it has all finished."""
        pending = conn.pending
        try:
            if not pending.handle.drain():
                return
            if conn.offloaded:  # its render too (a chat answer's parsing), which closes the handle
                conn.pending = None
                return self._offload(conn, self._respond, pending.finish)
            result = pending.render(pending.handle.states)
        except Exception as e:  # noqa: BLE001 (a refusal, a hang-up, a bug)
            result = e
        pending.handle.close()
        conn.pending = None
        self._respond(conn, result)

    # -- the response ----------------------------------------------------------------
    def _respond(self, conn: Conn, result: Any) -> None:
        status, data, content_type, headers = encode_outcome(result, conn.endpoint)
        if status is None:  # the client left
            return self._close(conn)
        conn.status = status
        self._send(conn, response_head("HTTP/1.1", status, body_fields(data, content_type), headers, conn.close)
                   + data)

    def _send(self, conn: Conn, data: Any) -> None:
        try:
            sent = conn.sock.send(data)
        except (BlockingIOError, InterruptedError):
            sent = 0
        except OSError:
            return self._close(conn)
        if sent < len(data):
            conn.out, conn.state, conn.since = memoryview(data)[sent:], WRITING, time.monotonic()
            self.epoll.modify(conn.fd, select.EPOLLOUT)
            return
        self._done(conn)

    def _flush(self, conn: Conn) -> None:
        data, conn.out = conn.out, None
        self._send(conn, data)

    def _done(self, conn: Conn) -> None:
        """The response is out: count it, then close or wait for the next request."""
        self._finish_request(conn)
        conn.status = 0  # no answer is on its way: a bug from here on is answered (see _fail)
        if conn.close:
            return self._close(conn)
        was = conn.state
        conn.state, conn.since = READING, time.monotonic()
        if was != READING:
            self.epoll.modify(conn.fd, select.EPOLLIN | select.EPOLLRDHUP)
        if conn.buf:
            self.again.append(conn)

    def _finish_request(self, conn: Conn) -> None:
        if conn.started is not None:
            self.httpd.count(-1)
            self.httpd.metrics.observe_request(conn.endpoint, conn.status, time.monotonic() - conn.started)
            conn.started = None

    def _close(self, conn: Conn) -> None:
        if self.conns.pop(conn.fd, None) is not conn:
            return
        if conn.pending is not None:
            conn.pending.handle.close()  # aborts what has not finished
            conn.pending = None
        self._finish_request(conn)
        try:
            self.epoll.unregister(conn.fd)
        except OSError:
            pass
        conn.sock.close()
        self.httpd.release()

    def _hand_over(self, conn: Conn) -> None:
        """A handler thread serves ``conn`` from its buffered request on."""
        del self.conns[conn.fd]
        self.epoll.unregister(conn.fd)
        conn.sock.setblocking(True)
        self.httpd.serve_connection(conn.sock, conn.addr, bytes(conn.buf))

