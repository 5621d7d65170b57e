"""How the event loop (:mod:`mtok.api.loop`) takes new connections, when it
shares its listening socket with the loops of other workers.

Why.  Loops on one socket would leave every connection to whichever wakes
first: a loop is waiting on epoll, so "idle", however many connections it
holds (a handler thread per connection spread them by itself).  So a loop
accepts only while its worker holds the fewest connections of those sharing
the socket (``fewest``: the status board's counts); else it stops watching
the socket for a moment (:data:`PAUSED_POLL`) while the others take their turn.
"""

from __future__ import annotations

import select
import socket
from typing import Any, Callable, Optional, Tuple

PAUSED_POLL = 0.001  # seconds a worker that holds more connections than another leaves a new one to it


class Acceptor:
    """The listening socket of ``httpd`` (an :class:`~mtok.api.server.HTTPServer`),
    as one loop's epoll watches it.  ``fewest``, if given, is told this worker's
    open connections and says whether it holds the fewest."""

    def __init__(self, httpd: Any, fewest: Optional[Callable[[int], bool]]):
        self.httpd, self.fewest = httpd, fewest
        self.epoll: Any = None  # the loop's, once it runs
        self.accepting = True  # cleared (from any thread) when no more connections are to be taken
        self.paused = False  # the listening socket is not watched, for now

    def accept(self) -> Optional[Tuple[socket.socket, Any]]:
        """One admitted connection, non-blocking, if this worker holds the fewest; else None."""
        if self.fewest is not None and not self.fewest(self.httpd.connections):
            if self.accepting:
                self.watch(0)
                self.paused = True
            return None
        try:
            sock, addr = self.httpd.socket.accept()
        except OSError:  # none left (another worker took it), or out of descriptors
            return None
        if not self.httpd.admit(sock):
            return None
        sock.setblocking(False)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        return sock, addr

    def publish(self) -> None:
        """Tell the others this worker's count at once (they decide by it)."""
        if self.fewest is not None:
            self.fewest(self.httpd.connections)

    def resume(self) -> None:
        if self.paused and self.accepting:
            self.paused = False
            self.watch(select.EPOLLIN)

    def watch(self, mask: Optional[int]) -> None:
        """Watch the listening socket for ``mask`` (None: not at all), unless it
        is closed already (its owner may close it before the loop stops accepting)."""
        try:
            if mask is None:
                self.epoll.unregister(self.httpd.socket.fileno())
            else:
                self.epoll.modify(self.httpd.socket.fileno(), mask)
        except (OSError, ValueError):
            pass
