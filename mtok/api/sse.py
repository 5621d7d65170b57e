"""A route's :class:`~mtok.api.routes.EventStream` as the bytes of server-sent
events, for both transports: no I/O here, the writer sends what
:meth:`SSEWriter.pull` gives.

Over HTTP/1.1 the events go in chunked encoding, the stream's end as the last
chunk; over HTTP/1.0 they go bare and the connection's close ends them.  A
pull stops at :data:`~mtok.api.routes.NOT_YET` (the event loop's handle has no
news: the loop pulls again when its mailbox fills) or once ``limit`` bytes are
made (the loop's backpressure: it pulls again when the client has taken them).
"""

from __future__ import annotations

from typing import Tuple

from .respond import JSON, json_text_bytes
from .routes import NOT_YET, EventStream

FIELDS = "Content-Type: text/event-stream\r\nCache-Control: no-cache\r\n"
LAST_CHUNK = b"0\r\n\r\n"


class SSEWriter:
    """The bytes of one stream, pulled a piece at a time."""

    def __init__(self, stream: EventStream, version: str):
        self.stream = stream
        self.chunked = version != "HTTP/1.0"
        self.ended = False

    def head_fields(self) -> str:
        """The header lines of the response that carries the stream."""
        return FIELDS + ("Transfer-Encoding: chunked\r\n" if self.chunked else "")

    def pull(self, limit: int) -> Tuple[bytes, bool]:
        """(the bytes of the events ready now, up to about ``limit``; whether the
        stream has ended, its end included in those bytes)."""
        out = bytearray()
        events = self.stream.events
        while len(out) < limit:
            ev = next(events, StopIteration)
            if ev is NOT_YET:
                return bytes(out), False
            if ev is StopIteration:
                self.ended = True
                if self.chunked:
                    out += LAST_CHUNK
                return bytes(out), True
            out += self.encode(ev)
        return bytes(out), False

    def encode(self, ev: object) -> bytes:
        payload = b"data: " + json_text_bytes(ev if isinstance(ev, str) else JSON.encode(ev)) + b"\n\n"
        return b"%x\r\n%s\r\n" % (len(payload), payload) if self.chunked else payload
