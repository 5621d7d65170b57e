"""The second half of a connection's cycle in the event loop
(:mod:`mtok.api.loop`): what a route returned, settled and written to its
connection.

A :class:`~mtok.api.routes.Job` waits for the turn's end, when the turn's
jobs are submitted together (:meth:`~mtok.api.loop.EventLoop.serve_forever`),
and its answer is settled in turn; a :class:`~mtok.api.routes.Pending` waits
for its handle's mailbox; an
:class:`~mtok.api.routes.EventStream` is written as its mailbox fills, its head
once the first update is in (so that a refusal is still an HTTP status), then
a piece of at most :data:`STREAM_PIECE` bytes at a time, and no more is pulled
while the client has not taken the last piece (backpressure: the events wait
in the request's state, which holds only the latest); anything else is
answered at once.  Then the connection waits for its next request, or closes.

:class:`Responder` is the loop's base class; the loop provides the epoll, the
connections, the pools and the reading half.
"""

from __future__ import annotations

import logging
import select
import time
from typing import Any, Callable, Deque, Dict, List, Optional

from .admission import with_cors
from .loop_conn import READING, STREAMING, WAITING, WRITING, Conn
from .respond import body_fields, encode_outcome, response_head
from .routes import EventStream, Job, Pending, settle_blocking
from .sse import SSEWriter

logger = logging.getLogger(__name__)

STREAM_PIECE = 64 << 10  # a stream's bytes pulled at a time; no more until the client took them


class Responder:
    """The response half of :class:`~mtok.api.loop.EventLoop` (which see)."""

    httpd: Any
    epoll: Any
    conns: Dict[int, Conn]
    again: Deque[Conn]
    jobs: List[Conn]  # this turn's, each its Job in its task
    _offload: Callable[..., None]

    def _settle(self, conn: Conn, result: Any) -> None:
        """A route's result: a Job waits for the turn's end (submitted with the
        others), a Pending for its results, a stream for its events; anything else
        is answered."""
        if isinstance(result, Job):
            conn.task, conn.state, conn.watched = result, WAITING, True
            self.epoll.modify(conn.fd, select.EPOLLRDHUP)
            self.jobs.append(conn)
            return
        if isinstance(result, Pending):
            conn.pending, conn.state, conn.watched = result, WAITING, True
            self.epoll.modify(conn.fd, select.EPOLLRDHUP)  # pipelined bytes wait; a hang-up still shows
            return self._advance(conn)  # it may have failed or finished already
        if isinstance(result, EventStream):
            conn.sse, conn.state, conn.watched = SSEWriter(result, conn.version), STREAMING, True
            self.epoll.modify(conn.fd, select.EPOLLRDHUP)
            return self._pump(conn)  # its first update may be in already
        self._respond(conn, result)

    def _pump(self, conn: Conn) -> None:
        """Write what the stream has ready: first, once its first update is in, the
        head (or the error that update carries, as an HTTP status); then its events,
        a piece at a time."""
        sse, head = conn.sse, b""
        if conn.status == 0:
            try:
                if sse.stream.handle is not None and not sse.stream.handle.poll_first():
                    return
            except Exception as e:  # noqa: BLE001 (a refusal: 503 at capacity, say)
                self._drop_work(conn)
                return self._respond(conn, e)
            conn.status, conn.close = 200, conn.close or not sse.chunked
            head = response_head("HTTP/1.1", 200, sse.head_fields(), self._cors(conn, sse.stream.headers),
                                 conn.close)
        data, _ = sse.pull(STREAM_PIECE)
        if head or data:
            self._send(conn, head + data)

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

    def _respond(self, conn: Conn, result: Any) -> None:
        status, data, content_type, headers = encode_outcome(result, conn.endpoint)
        if status is None:  # the client left
            return self._close(conn)
        conn.status = status
        head = response_head("HTTP/1.1", status, body_fields(data, content_type), self._cors(conn, headers),
                             conn.close)
        self._send(conn, head if conn.head_only else head + data)

    def _cors(self, conn: Conn, headers: Optional[Dict[str, str]]) -> Optional[Dict[str, str]]:
        cors = self.httpd.cors
        return with_cors(cors, conn.request_headers, headers) if cors else headers

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
        if conn.sse is not None and not conn.sse.ended:  # a stream goes on: pull again when there is news
            was, conn.state = conn.state, STREAMING
            if was == WRITING:
                self.epoll.modify(conn.fd, select.EPOLLRDHUP)
                self._pump(conn)  # what came while the client was slow, or was left unpulled
            return
        self._done(conn)

    def _flush(self, conn: Conn) -> None:
        data, conn.out = conn.out, None
        self._send(conn, data)

    def _done(self, conn: Conn) -> None:
        """The response is out: count it, then close or wait for the next request."""
        self._drop_work(conn)
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
        if conn.sse is not None and conn.status:  # routine for a stream (a client that had enough): one line
            logger.info("client %s went away during a stream", conn.addr[0])
        self._drop_work(conn)  # aborts what has not finished
        self._finish_request(conn)
        try:
            self.epoll.unregister(conn.fd)
        except OSError:
            pass
        conn.sock.close()
        self.httpd.release()

    @staticmethod
    def _drop_work(conn: Conn) -> None:
        """Close what ``conn``'s request holds (its handle, its stream: aborting what
        has not finished); what the pool still does for it is dropped when it settles."""
        if conn.pending is not None:
            conn.pending.handle.close()
        if conn.sse is not None:
            conn.sse.stream.close()
        conn.pending = conn.sse = conn.task = None


def waited(handler: Callable[[Any], Any], req: Any, submit_all: Callable[[List[Any]], List[Any]]) -> Any:
    """Run a route that may block (on the waiting pool), and wait for its answer too."""
    result = settle_blocking(handler(req), submit_all)
    if isinstance(result, EventStream):  # a stream is written by the loop, from a handle that does not block
        result.close()
        raise RuntimeError("a route not marked inline returned a stream")
    return result
