"""Watching client connections from outside the threads that serve them.

A thread blocked waiting for its request's results cannot see its socket:
:class:`DisconnectWatcher`, one thread per server, notices hang-ups for it
(a thread reading a request keeps its own deadline: :mod:`mtok.api.server`).
A request's :class:`ConnectionWatch` is how whoever waits for its results (the
request handle of :mod:`mtok.managers.request_handle`) learns of a hang-up: it
starts watching after :data:`WATCH_AFTER` and raises :class:`ClientDisconnected`.
The transport declares both, and knows nothing of what is waited for.
"""

from __future__ import annotations

import queue
import select
import selectors
import socket
import threading
from typing import Any, Callable, Dict, Optional

WATCH_AFTER = 0.05  # seconds a request waits before its connection is watched for hang-ups


class ClientDisconnected(Exception):
    """The HTTP client went away while its request was in flight."""


class DisconnectWatcher:
    """One thread that notices when waiting clients hang up.

    A handler blocked on its request's results cannot see its socket; the
    watcher polls all of them at once and calls back on end-of-file.  A client
    may send more bytes (a pipelined request) before it hangs up; those bytes
    hide the end-of-file from a peek, so on Linux the socket is then watched
    for the peer's shutdown alone (EPOLLRDHUP), which data does not mask.
    """

    def __init__(self) -> None:
        self._epoll = getattr(select, "epoll", None)
        self._rdhup = getattr(select, "EPOLLRDHUP", 0)
        self._lock = threading.Lock()
        self._callbacks: Dict[int, Callable[[], None]] = {}
        self._socks: Dict[int, socket.socket] = {}
        if self._epoll is not None and self._rdhup:
            self._poller: Any = self._epoll()
            self._needs_wake = False
        else:
            self._poller = selectors.DefaultSelector()
            self._needs_wake = True
        self._wake_r, self._wake_w = socket.socketpair()
        self._wake_r.setblocking(False)
        self._register(self._wake_r, None)
        threading.Thread(target=self._run, name="disconnect-watch", daemon=True).start()

    @property
    def _uses_epoll(self) -> bool:
        return not self._needs_wake

    def _register(self, sock: socket.socket, callback: Optional[Callable[[], None]]) -> None:
        if self._uses_epoll:
            self._poller.register(sock.fileno(), select.EPOLLIN | self._rdhup)
        else:
            self._poller.register(sock, selectors.EVENT_READ, callback)
        if callback is not None:
            self._callbacks[sock.fileno()] = callback
            self._socks[sock.fileno()] = sock

    def add(self, sock: socket.socket, callback: Callable[[], None]) -> None:
        with self._lock:
            try:
                self._register(sock, callback)
            except (KeyError, ValueError, OSError):
                return
        if self._needs_wake:
            self._wake_w.send(b"\0")

    def remove(self, sock: socket.socket) -> None:
        with self._lock:
            self._unregister_locked(sock.fileno() if sock.fileno() >= 0 else None, sock)

    def _unregister_locked(self, fd: Optional[int], sock: Any) -> bool:
        """Forget a socket; False if it was not (or no longer) watched."""
        if fd is None or self._callbacks.pop(fd, None) is None:
            return False
        self._socks.pop(fd, None)
        try:
            self._poller.unregister(fd if self._uses_epoll else sock)
        except (KeyError, ValueError, OSError):
            pass
        return True

    def _run(self) -> None:
        while True:
            if self._uses_epoll:
                events = self._poller.poll()
                ready = [(fd, ev) for fd, ev in events]
            else:
                ready = [(key.fd, 0) for key, _ in self._poller.select()]
            for fd, ev in ready:
                if fd == self._wake_r.fileno():
                    try:
                        self._wake_r.recv(4096)
                    except OSError:
                        pass
                    continue
                self._check(fd, ev)

    def _check(self, fd: int, ev: int) -> None:
        with self._lock:
            sock = self._socks.get(fd)
            if sock is None:
                return
            hup = bool(ev & (self._rdhup | getattr(select, "EPOLLHUP", 0) | getattr(select, "EPOLLERR", 0)))
            if not hup:
                try:
                    hup = sock.recv(1, socket.MSG_PEEK | socket.MSG_DONTWAIT) == b""
                except BlockingIOError:
                    return
                except OSError:
                    hup = True
            if not hup and self._uses_epoll:
                # Pipelined bytes: from now on only the peer's shutdown wakes us.
                self._poller.modify(fd, self._rdhup)
                return
            callback = self._callbacks.get(fd)
            self._unregister_locked(fd, sock)
        if hup and callback is not None:
            callback()


class ConnectionWatch:
    """The handle a request passes to the TokenizerManager to learn of a hang-up.
    Whoever holds its request's handle waits on the mailbox (``blocking``)."""

    blocking = True

    def __init__(self, watcher: DisconnectWatcher, sock: socket.socket):
        self._watcher, self._sock = watcher, sock

    @staticmethod
    def new_mailbox() -> "queue.SimpleQueue[Any]":
        """Where the request's states are put as they change (see
        :class:`~mtok.managers.request_handle.ReqState`): a plain queue, which a
        handler thread waits on."""
        return queue.SimpleQueue()

    def start(self, callback: Callable[[], None]) -> None:
        self._watcher.add(self._sock, callback)

    def stop(self) -> None:
        self._watcher.remove(self._sock)

    def gone(self) -> bool:
        """Has the client closed its end?  (Bytes it sent since hide that; then False.)
        Polled first: a socket with a timeout would wait that long in recv."""
        try:
            poller = select.poll()
            poller.register(self._sock.fileno(), select.POLLIN)
            if not poller.poll(0):
                return False
            return self._sock.recv(1, socket.MSG_PEEK | socket.MSG_DONTWAIT) == b""
        except BlockingIOError:
            return False
        except (OSError, ValueError):  # ValueError: closed already (the loop closes a hung-up connection)
            return True
