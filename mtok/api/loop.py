"""The event loop: one thread waits on every connection of a worker at once
and serves each to its end, streams included.

Why.  With a thread per connection (:mod:`mtok.api.server`) every request
wakes its thread twice, once for its bytes and once for its result, and a
stream once per step; each wake-up costs a context switch and a GIL hand-off.
One thread that waits on all the sockets (epoll), on the scheduler's results
and on its pool is woken once for many requests, and a stream's step wakes
no thread but the loop's.

A connection's cycle: the bytes are read (:mod:`mtok.api.intake` parses the
head once, passes it through the gate of :mod:`mtok.api.admission`, then
takes the body, ``Content-Length`` or chunked, with ``100 Continue`` when
asked); the routes of the requests one turn read run at its end, together,
in the loop's thread, and what they prepare (a :class:`~mtok.api.routes.Job`)
is submitted together at its end, through the app's ``submit_all``: their
prompts tokenized at once, their messages sent in one write.  What may block runs on a pool (:mod:`mtok.api.offload`)
while the loop keeps the connection: routes marked ``offload`` (templates,
output parsing) and bodies over :data:`~mtok.api.intake.INLINE_MAX_BODY` on
the compute pool; routes not marked ``inline`` (they wait on the scheduler)
on the waiting pool.  What a route returns is settled in the loop's thread: a
:class:`~mtok.api.routes.Pending` is answered when its handle's mailbox (made
by :class:`LoopWatch`) says the results are in; an
:class:`~mtok.api.routes.EventStream` is written as its mailbox fills, a
piece at a time (:class:`~mtok.api.sse.SSEWriter`), and no more is pulled
while the client has not taken the last piece (backpressure).  So the socket
never changes hands, and the loop's state is touched by the loop alone.

Lifecycle (``socketserver``'s steps): construct (nothing runs), then
:meth:`EventLoop.serve_forever` in a thread; :meth:`EventLoop.stop_accepting`
from another thread stops new connections, while those open are served on.
Linux only (elsewhere, and with ``--http-threads-only``, the handler threads
serve): a waiting request is watched for its client's hang-up with
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

from . import intake
from .connections import WATCH_AFTER, ConnectionWatch
from .loop_accept import PAUSED_POLL, Acceptor
from .loop_conn import READING, STREAMING, WAITING, WRITING, Conn, LoopWatch, Waker
from .offload import Offload, drop
from .loop_respond import Responder, waited
from .respond import internal_error
from .routes import Job, offloads
from ..validate import APIError

logger = logging.getLogger(__name__)

AVAILABLE = hasattr(select, "epoll") and hasattr(select, "EPOLLRDHUP")
WAITING_THREADS = 16  # the waiting pool: routes that block on the scheduler (/health_generate...)


def enabled(args: Any) -> bool:
    """Does a worker with these settings serve through the loop?"""
    return AVAILABLE and not args.http_threads_only


class EventLoop(Responder):
    """Serve ``httpd``'s listening socket from one thread (see the module's docstring).

    ``httpd`` is the :class:`~mtok.api.server.HTTPServer` whose routes, limits,
    counters and handler threads the loop shares.  ``corked``, if given, makes
    the context each turn runs in: the TokenizerManager's sender holds the
    messages the turn's requests send and writes them together at its end
    (:meth:`SharedSender.corked <mtok.wire.ipc.SharedSender.corked>`).

    ``fewest``, if given, is told this worker's open connections and says
    whether it holds the fewest of the workers sharing the listening socket:
    only then does the loop accept (:mod:`mtok.api.loop_accept` says why).

    ``request_timeout`` (``--request-timeout``) bounds a request's time on the pool.
    """

    def __init__(self, httpd: Any, corked: Optional[Callable[[], Any]] = None,
                 fewest: Optional[Callable[[int], bool]] = None,
                 request_timeout: float = float("inf")):
        self.httpd, self.request_timeout = httpd, request_timeout
        self.corked = corked or contextlib.nullcontext
        self.acceptor = Acceptor(httpd, fewest)
        self.planned: List[Tuple[Conn, intake.Plan]] = []  # requests read this turn, run at its end
        self.jobs: List[Conn] = []  # whose routes made a Job this turn: submitted at its end
        self.conns: Dict[int, Conn] = {}
        self.woken: Deque[Conn] = collections.deque()  # conns whose mailbox was filled
        self.again: Deque[Conn] = collections.deque()  # conns with a next request already buffered
        self.waker = Waker()
        self.offload = Offload(self.waker.nudge)  # routes that compute long
        self.waiting = Offload(self.waker.nudge, WAITING_THREADS, "mtok-wait")  # routes that wait
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
            ready = self.woken or self.again or self.offload.done or self.waiting.done
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
        elif conn.state in (WAITING, STREAMING) and not ev & (select.EPOLLHUP | select.EPOLLERR) \
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
        for pool in (self.offload, self.waiting):
            if not pool.done:  # most turns: nothing came back from either pool
                continue
            for (conn, task, then), outcome in pool.settled():
                if self._still(conn, WAITING) and conn.task is task:
                    conn.task = None
                    self._safely(conn.fd, then, conn, outcome)
                else:  # the client left, or was answered (a timeout) meanwhile
                    drop(outcome)
        while self.woken:
            conn = self.woken.popleft()
            if self._still(conn, WAITING) and conn.pending is not None:  # not while on the pool
                self._safely(conn.fd, self._advance, conn)
            elif self._still(conn, STREAMING):
                self._safely(conn.fd, self._pump, conn)
        for _ in range(len(self.again)):  # one request each per turn: a pipelining client waits its turn
            conn = self.again.popleft()
            if self._still(conn, READING):
                self._safely(conn.fd, self._serve, conn)
        planned, self.planned = self.planned, []
        for conn, plan in planned:
            if self._still(conn, READING):
                self._safely(conn.fd, self._dispatch, conn, plan)
        self._submit_jobs()

    def _submit_jobs(self) -> None:
        """The turn's jobs (:class:`~mtok.api.routes.Job`: its routes' and those
        the pool prepared), submitted together: their prompts tokenized at once,
        their messages sent in one write; then each answer settled."""
        conns = [c for c in self.jobs if self._still(c, WAITING) and isinstance(c.task, Job)]
        self.jobs = []
        if not conns:
            return
        try:
            outcomes = self.httpd.submit_all([c.task.request for c in conns])
        except Exception as e:  # noqa: BLE001 (a bug: each job gets its 500, the loop goes on)
            logger.exception("submitting a turn's jobs failed")
            outcomes = [internal_error(e)] * len(conns)
        for conn, outcome in zip(conns, outcomes):
            job, conn.task = conn.task, None
            self._safely(conn.fd, self._answer_job, conn, job, outcome)

    def _answer_job(self, conn: Conn, job: Job, outcome: Any) -> None:
        try:
            result = job.answer(outcome)
        except Exception as e:  # noqa: BLE001 (a refusal, a bug: answered as the threads answer)
            return self._respond(conn, e)
        self._settle(conn, result)

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
                self._drop_work(conn)  # what the pool still does for it is dropped
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
            data = conn.sock.recv(intake.RECV_SIZE)
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            data = b""
        if not data:  # a request cut short is answered (400), as a handler thread answers it
            return self._serve(conn, eof=True) if conn.buf or conn.progress.head else self._close(conn)
        conn.buf += data
        self._serve(conn)

    def _sweep(self, now: float) -> None:
        """Deadlines, as the handler threads keep them: a request (and the wait
        for it on a kept-alive connection) within --http-timeout, each piece of
        a response taken within it, a request done within --request-timeout."""
        timeout = self.httpd.read_timeout
        for conn in list(self.conns.values()):
            if conn.state in (WAITING, STREAMING):
                if not conn.watched:
                    conn.watched = True
                    self.epoll.modify(conn.fd, select.EPOLLRDHUP)  # a half-close still there shows at once
                if conn.task is None:
                    (conn.pending or conn.sse.stream).handle.check_deadline()  # late: fails with 504, wakes us
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
    def _serve(self, conn: Conn, eof: bool = False) -> None:
        """Plan the buffered request if it has all arrived (its route runs at the
        turn's end); answer it at once if it is refused (:mod:`mtok.api.intake`)."""
        plan = intake.take(self.httpd, conn.buf, conn.progress, eof)
        if plan is intake.WAIT:
            return self._close(conn) if eof else None
        if plan is intake.CONTINUE:
            return self._send_continue(conn)
        if plan.error is not None:
            self._begin(conn, "other", plan.close or eof)
            conn.head_only, conn.request_headers = plan.command == "HEAD", plan.headers
            return self._respond(conn, plan.error)
        plan.request.watch = LoopWatch(self, conn)
        plan.close = plan.close or eof
        self.planned.append((conn, plan))  # run at the turn's end, with the others (see _run_ready)

    def _send_continue(self, conn: Conn) -> None:
        try:
            conn.sock.send(intake.CONTINUE_RESPONSE)  # 25 bytes to an idle socket: its buffer takes them
        except OSError:
            self._close(conn)

    def _begin(self, conn: Conn, endpoint: str, close: bool) -> None:
        self.httpd.count(1)
        conn.started, conn.endpoint, conn.close, conn.status = time.monotonic(), endpoint, close, 0

    def _dispatch(self, conn: Conn, plan: intake.Plan) -> None:
        handler, req = plan.handler, plan.request
        self._begin(conn, req.path if req.path in self.httpd.routes else "other", plan.close)
        conn.head_only, conn.version, conn.request_headers = plan.command == "HEAD", plan.version, plan.headers
        if not getattr(handler, "inline", False):  # it waits: a thread of the waiting pool, which it may block
            req.watch = ConnectionWatch(self.httpd.watcher, conn.sock)
            return self._offload(conn, self._settle, waited, handler, req, self.httpd.submit_all,
                                 pool=self.waiting)
        conn.offloaded = offloads(handler, req._json) or len(req.raw) > intake.INLINE_MAX_BODY
        if conn.offloaded:
            return self._offload(conn, self._settle, handler, req)
        try:
            result = handler(req)
        except Exception as e:  # noqa: BLE001 (an APIError, a bug: answered as the threads answer)
            return self._respond(conn, e)
        self._settle(conn, result)

    def _offload(self, conn: Conn, then: Callable[[Conn, Any], None], fn: Callable[..., Any], *args: Any,
                 pool: Optional[Offload] = None) -> None:
        """Run ``fn(*args)`` on a pool (the compute pool unless told) while ``conn`` waits;
        ``then(conn, outcome)`` in the loop's thread, once it returned or raised (unless
        conn is gone or answered)."""
        conn.task, conn.state, conn.watched = object(), WAITING, True
        self.epoll.modify(conn.fd, select.EPOLLRDHUP)  # pipelined bytes wait; a hang-up still shows
        (pool or self.offload).submit((conn, conn.task, then), fn, *args)
