"""A keep-alive HTTP/1.1 client cut down to what load generation needs.

``http.client`` parses every header into an email message and reads a
response through several buffered layers; that costs more CPU per request than
the fastest servers spend answering it, and a load generator must never be the
bottleneck.  :class:`Connection` instead sends pre-built request bytes and runs
a small state machine over whatever ``recv`` returns: the status line, the two
headers that frame the body, then the body (by length or chunked).  For
server-sent events it notes when each event arrives and keeps only the last
few payloads, so a 256-token stream is not parsed 256 times.
"""

from __future__ import annotations

import socket
from dataclasses import dataclass, field
from typing import List, Optional
from urllib.parse import urlsplit

RECV_SIZE = 1 << 18
KEEP_EVENTS = 2  # the last events hold the usage; earlier ones only matter for timing


@dataclass
class Target:
    host: str
    port: int

    @classmethod
    def from_url(cls, url: str) -> "Target":
        parts = urlsplit(url if "://" in url else f"http://{url}")
        if parts.scheme != "http":
            raise ValueError(f"only http:// URLs are supported, not {url!r}")
        return cls(parts.hostname or "127.0.0.1", parts.port or 80)

    @property
    def url(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}"


def build_request(target: Target, path: str, body: bytes, headers: Optional[dict] = None) -> bytes:
    """The exact bytes of one POST; built once per prompt, sent many times."""
    lines = [f"POST {path} HTTP/1.1", f"Host: {target.host}:{target.port}", "Content-Type: application/json",
             f"Content-Length: {len(body)}"]
    lines += [f"{k}: {v}" for k, v in (headers or {}).items()]
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + body


@dataclass
class Response:
    """One finished exchange.  ``events`` are the arrival times of server-sent
    events (not counting ``[DONE]``); ``body`` is the whole body, or for a stream
    the last events' payloads joined by newlines."""

    status: int
    body: bytes
    events: List[float] = field(default_factory=list)
    last_events: List[bytes] = field(default_factory=list)


class ProtocolError(ValueError):
    """The server's answer is not HTTP/1.1 as this client reads it."""


class Connection:
    """One keep-alive connection; the caller selects on ``sock`` and calls :meth:`on_readable`."""

    # parser states
    HEAD, LENGTH, CHUNK_SIZE, CHUNK_DATA, CHUNK_END, TRAILER = range(6)

    def __init__(self, target: Target, timeout: float = 60.0):
        self.sock = socket.create_connection((target.host, target.port), timeout=timeout)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.buf = bytearray()
        self.busy = False
        self.started = 0.0
        self.plan: object = None  # whatever the caller wants back with the response
        self.close_after = False
        self._reset()

    def _reset(self) -> None:
        self.state = self.HEAD
        self.status = 0
        self.remaining = 0
        self.stream = False
        self.body = bytearray()
        self.sse = bytearray()
        self.events: List[float] = []
        self.last: List[bytes] = []

    def fileno(self) -> int:
        return self.sock.fileno()

    def send(self, request: bytes, started: float, plan: object) -> None:
        self._reset()
        self.busy, self.started, self.plan = True, started, plan
        self.sock.sendall(request)

    def on_readable(self, now: float) -> Optional[Response]:
        """Read what is there; a Response once the whole answer is in.
        Raises ConnectionError when the server closed or reset the connection."""
        data = self.sock.recv(RECV_SIZE)
        if not data:
            raise ConnectionError("the server closed the connection")
        self.buf += data
        return self._parse(now)

    def close(self) -> None:
        try:
            self.sock.close()
        except OSError:
            pass

    # -- the state machine ------------------------------------------------------------
    def _parse(self, now: float) -> Optional[Response]:
        buf, pos = self.buf, 0
        try:
            while True:
                if self.state == self.HEAD:
                    end = buf.find(b"\r\n\r\n", pos)
                    if end < 0:
                        return None
                    self._head(bytes(buf[pos:end]))
                    pos = end + 4
                elif self.state == self.LENGTH:
                    take = min(self.remaining, len(buf) - pos)
                    self.body += buf[pos:pos + take]
                    pos += take
                    self.remaining -= take
                    if self.remaining:
                        return None
                    return self._finish()
                elif self.state in (self.CHUNK_SIZE, self.TRAILER):
                    end = buf.find(b"\r\n", pos)
                    if end < 0:
                        return None
                    line = bytes(buf[pos:end])
                    pos = end + 2
                    if self.state == self.TRAILER:
                        if not line:
                            return self._finish()
                        continue
                    self.remaining = int(line.split(b";", 1)[0], 16)
                    self.state = self.CHUNK_DATA if self.remaining else self.TRAILER
                elif self.state == self.CHUNK_DATA:
                    take = min(self.remaining, len(buf) - pos)
                    self._chunk(buf[pos:pos + take], now)
                    pos += take
                    self.remaining -= take
                    if self.remaining:
                        return None
                    self.state = self.CHUNK_END
                else:  # CHUNK_END: the CRLF after a chunk's data
                    if len(buf) - pos < 2:
                        return None
                    pos += 2
                    self.state = self.CHUNK_SIZE
        finally:
            del buf[:pos]

    def _head(self, head: bytes) -> None:
        lines = head.split(b"\r\n")
        parts = lines[0].split(None, 2)
        if len(parts) < 2 or not parts[0].startswith(b"HTTP/"):
            raise ProtocolError(f"bad status line {lines[0][:80]!r}")
        self.status = int(parts[1])
        chunked, length = False, 0
        for line in lines[1:]:
            name, _, value = line.partition(b":")
            name = name.strip().lower()
            if name == b"content-length":
                length = int(value)
            elif name == b"transfer-encoding":
                chunked = b"chunked" in value.lower()
            elif name == b"content-type":
                self.stream = b"event-stream" in value.lower()
            elif name == b"connection":
                self.close_after = b"close" in value.lower()
        if chunked:
            self.state = self.CHUNK_SIZE
        else:
            self.state, self.remaining = self.LENGTH, length

    def _chunk(self, data: bytearray, now: float) -> None:
        if not self.stream:
            self.body += data
            return
        sse = self.sse
        sse += data
        start = 0
        while True:
            end = sse.find(b"\n\n", start)
            if end < 0:
                break
            event = bytes(sse[start:end])
            start = end + 2
            payload = event[6:] if event.startswith(b"data: ") else event
            if payload != b"[DONE]":
                self.events.append(now)
                self.last.append(payload)
                if len(self.last) > KEEP_EVENTS:
                    del self.last[0]
        del sse[:start]

    def _finish(self) -> Response:
        self.busy = False
        if self.stream:
            return Response(self.status, b"\n".join(self.last), self.events, self.last)
        return Response(self.status, bytes(self.body))
