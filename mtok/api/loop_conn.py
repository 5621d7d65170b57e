"""A client connection the event loop holds (:mod:`mtok.api.loop`), the
watch its requests carry, and the wake-up through which their results reach
the loop.

A handler thread waits on a request's mailbox; the loop cannot wait on
anything but its epoll, so a request it serves gets a :class:`LoopMailbox`,
which tells the loop when a state is put in it, from whichever thread; the
loop's pool (:mod:`mtok.api.offload`) wakes it the same way (:class:`Waker`).
"""

from __future__ import annotations

import queue
import socket
from typing import Any, Optional, Protocol

from .connections import ConnectionWatch
from .intake import Progress
from .routes import Pending
from .sse import SSEWriter

READING, WAITING, STREAMING, WRITING = "reading", "waiting", "streaming", "writing"


class Conn:
    """One client connection the loop holds, and the request it is serving."""

    __slots__ = ("sock", "fd", "addr", "buf", "progress", "state", "since", "out", "pending", "sse", "close",
                 "started", "endpoint", "status", "watched", "task", "offloaded", "head_only", "version",
                 "request_headers")

    def __init__(self, sock: socket.socket, addr: Any, now: float):
        self.sock, self.fd, self.addr = sock, sock.fileno(), addr
        self.buf = bytearray()
        self.progress = Progress()  # what is known of the request being read
        self.state, self.since = READING, now  # since: when the state began (its deadline runs from there)
        self.out: Any = None  # the unsent rest of a response
        self.pending: Optional[Pending] = None
        self.sse: Optional[SSEWriter] = None  # the stream being written (STREAMING, or WRITING a piece of it)
        self.close = False  # close once the response is out
        self.started: Optional[float] = None  # a request is in flight since then
        self.endpoint, self.status = "other", 0
        self.watched = True  # while waiting: is a hang-up reported?
        self.task: Optional[object] = None  # while waiting: the token of the work on the pool, if there
        self.offloaded = False  # the request's route (and its answer's render) runs on the pool
        self.head_only = False  # a HEAD request: the answer's body is not sent
        self.version = "HTTP/1.1"  # the request's (an HTTP/1.0 stream is not chunked)
        self.request_headers: Any = None  # the request's, for the CORS headers of its answer


class EventLoop(Protocol):
    """What a mailbox and a watch need of the loop that holds their connection
    (:class:`mtok.api.loop.EventLoop`, which imports this module, not the reverse)."""

    httpd: Any  # the HTTPServer, whose DisconnectWatcher a watch shares

    def wake(self, conn: "Conn") -> None: ...


class Waker:
    """A byte on a socket pair the loop's epoll watches, sent from other threads
    only while no wake-up is pending (``signalled``)."""

    def __init__(self) -> None:
        self._r, self._w = socket.socketpair()
        self._r.setblocking(False)
        self._w.setblocking(False)
        self.signalled = False

    def fileno(self) -> int:
        return self._r.fileno()

    def nudge(self) -> None:
        """Wake the loop (any thread), unless a wake-up is pending already."""
        if not self.signalled:
            self.signal()

    def signal(self) -> None:
        self.signalled = True
        try:
            self._w.send(b"\0")
        except OSError:  # full: a wake-up is pending anyway
            pass

    def clear(self) -> None:
        """The loop took the wake-up.  The flag drops after the read: whoever saw
        it set had queued its news before, and whoever comes later signals again."""
        try:
            self._r.recv(4096)
        except OSError:
            pass
        self.signalled = False


class LoopMailbox(queue.SimpleQueue):
    """A request's mailbox that wakes the loop when a state is put in it: from
    the loop's own thread, reading the inbox, which only notes it; or from
    another (a failed write in a handler thread), which signals the loop."""

    def __init__(self, loop: "EventLoop", conn: Conn):
        self._loop, self._conn = loop, conn

    def put(self, item: Any, block: bool = True, timeout: Optional[float] = None) -> None:
        super().put(item)
        self._loop.wake(self._conn)


class LoopWatch(ConnectionWatch):
    """The watch of a request the loop serves: its mailbox wakes the loop, and
    the loop sees the client's hang-up itself (the epoll it waits on reports it),
    so ``start`` and ``stop`` have nothing to do; ``gone`` is inherited.  It does
    not block: a request handle that holds it hands out ``NOT_YET`` rather than
    wait (see :class:`~mtok.api.routes.EventStream`)."""

    blocking = False

    def __init__(self, loop: "EventLoop", conn: Conn):
        super().__init__(loop.httpd.watcher, conn.sock)
        self._loop, self._conn = loop, conn

    def new_mailbox(self) -> LoopMailbox:
        return LoopMailbox(self._loop, self._conn)

    def start(self, callback: Any) -> None:
        pass

    def stop(self) -> None:
        pass
