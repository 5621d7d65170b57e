"""Watching client connections from outside their handler threads.

A handler blocked waiting for its request's results cannot see its socket, and
one blocked reading a trickling request cannot see the clock.  These two
watchers, one thread each per server, see for them: :class:`DisconnectWatcher`
notices hang-ups, :class:`ReadDeadlines` cuts off requests that arrive too slowly.
"""

from __future__ import annotations

import selectors
import socket
import threading
import time
from typing import Any, Callable, Dict


class DisconnectWatcher:
    """One thread that notices when waiting clients hang up.

    A handler blocked on its request's results cannot see its socket; the
    watcher polls all of them at once and calls back on end-of-file.
    """

    def __init__(self) -> None:
        self._sel = selectors.DefaultSelector()
        self._lock = threading.Lock()
        self._wake_r, self._wake_w = socket.socketpair()
        self._wake_r.setblocking(False)
        self._sel.register(self._wake_r, selectors.EVENT_READ, None)
        self._needs_wake = not isinstance(self._sel, getattr(selectors, "EpollSelector", ()))
        threading.Thread(target=self._run, name="disconnect-watch", daemon=True).start()

    def add(self, sock: socket.socket, callback: Callable[[], None]) -> None:
        with self._lock:
            try:
                self._sel.register(sock, selectors.EVENT_READ, callback)
            except (KeyError, ValueError, OSError):
                return
        if self._needs_wake:
            self._wake_w.send(b"\0")

    def remove(self, sock: socket.socket) -> None:
        with self._lock:
            try:
                self._sel.unregister(sock)
            except (KeyError, ValueError, OSError):
                pass

    def _run(self) -> None:
        while True:
            for key, _ in self._sel.select():
                if key.data is None:
                    try:
                        self._wake_r.recv(4096)
                    except OSError:
                        pass
                    continue
                sock = key.fileobj
                try:
                    gone = sock.recv(1, socket.MSG_PEEK | socket.MSG_DONTWAIT) == b""  # type: ignore[union-attr]
                except BlockingIOError:
                    continue
                except OSError:
                    gone = True
                self.remove(sock)  # type: ignore[arg-type]
                if gone:  # else: a pipelined request; it will be read later
                    key.data()


class ConnectionWatch:
    """The handle a request passes to the TokenizerManager to learn of a hang-up."""

    def __init__(self, watcher: DisconnectWatcher, sock: socket.socket):
        self._watcher, self._sock = watcher, sock

    def start(self, callback: Callable[[], None]) -> None:
        self._watcher.add(self._sock, callback)

    def stop(self) -> None:
        self._watcher.remove(self._sock)


class ReadDeadlines:
    """Ends requests that take longer than ``timeout`` to arrive (slow-loris),
    however slowly each byte trickles in: the handler is marked expired and its
    socket's read side shut, so the blocked read returns and the handler answers
    408 instead of holding its thread."""

    def __init__(self, timeout: float):
        self.timeout = timeout
        self._armed: Dict[Any, float] = {}
        self._lock = threading.Lock()
        threading.Thread(target=self._run, name="read-deadlines", daemon=True).start()

    def arm(self, handler: Any) -> None:
        handler.expired = False
        with self._lock:
            self._armed[handler] = time.monotonic() + self.timeout

    def disarm(self, handler: Any) -> None:
        with self._lock:
            self._armed.pop(handler, None)

    def _run(self) -> None:
        tick = min(0.5, self.timeout / 4)
        while True:
            time.sleep(tick)  # a coarse clock, not synchronisation
            now = time.monotonic()
            with self._lock:
                late = [h for h, t in self._armed.items() if t <= now]
                for h in late:
                    del self._armed[h]
            for h in late:
                h.expired = True
                try:
                    h.connection.shutdown(socket.SHUT_RD)
                except OSError:
                    pass
