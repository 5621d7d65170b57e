"""One request out of the bytes a connection has sent so far: the event loop's
reader (:mod:`mtok.api.loop`).

:func:`take` is called each time bytes arrive and answers with one of three
things: wait for more (:data:`WAIT`), tell the client to go on
(:data:`CONTINUE`: it sent ``Expect: 100-continue`` and its request passed the
gate), or a :class:`Plan`: the route and the :class:`~mtok.api.routes.Request`
to run, or the error to answer, with the request's bytes taken out of the
buffer.  The head is parsed once, when its end has arrived, and kept in the
connection's :class:`Progress` while the body arrives; bodies come framed by
``Content-Length`` or chunked, and every refusal is the one the handler
threads give, because both use :mod:`mtok.api.framing` and
:mod:`mtok.api.admission`.  Nothing here does I/O.
"""

from __future__ import annotations

from dataclasses import dataclass, field as dataclass_field
from typing import Any, Callable, Optional, Union

from .admission import admit, closes_after_refusal
from .framing import (CHUNKED, MAX_HEAD, MAX_LINE, NO_BODY, FramingError, head_framing, head_lines,
                      parse_request_line, read_chunk)
from .routes import Request
from ..validate import APIError, parse_json

INLINE_MAX_BODY = 64 << 10  # larger bodies are parsed, and their routes run, on the loop's pool
WAIT, CONTINUE = "wait", "continue"
CONTINUE_RESPONSE = b"HTTP/1.1 100 Continue\r\n\r\n"  # what a transport sends on CONTINUE
RECV_SIZE = 256 << 10  # the bytes a transport reads from a connection at a time


@dataclass
class Plan:
    """A request read whole: run ``handler(request)``, or answer ``error``
    (then ``handler`` and ``request`` may be None); close the connection after
    answering if ``close``."""

    handler: Optional[Callable[[Request], Any]]
    request: Optional[Request]  # its watch is set by the loop
    close: bool
    error: Optional[APIError] = None
    command: str = "GET"
    version: str = "HTTP/1.1"
    headers: Any = None  # the request's, once its head was read


@dataclass
class Progress:
    """What the reader knows of a connection's current request between reads."""

    head: Optional[tuple] = None  # (command, target, version, headers, framing, length, close, handler)
    continued: bool = False  # 100 Continue was sent
    scan: int = 0  # how far the buffer was looked at for the head's lines
    body: bytearray = dataclass_field(default_factory=bytearray)  # a chunked body's chunks so far
    wire: int = 0  # and their bytes on the wire

    def reset(self) -> None:
        self.head, self.continued, self.scan, self.body, self.wire = None, False, 0, bytearray(), 0


def take(httpd: Any, buf: bytearray, progress: Progress, eof: bool = False) -> Union[str, Plan]:
    """WAIT, CONTINUE, or the Plan of the request at the start of ``buf``.
    ``eof``: the client will send nothing more (a request cut short is refused)."""
    if progress.head is None:
        got = _take_head(httpd, buf, progress, eof)
        if not isinstance(got, tuple):
            return got
        progress.head = got
    try:
        return _take_body(httpd, buf, progress, eof)
    except FramingError as e:
        return _refusal(e, progress, True)


def _take_head(httpd: Any, buf: bytearray, progress: Progress, eof: bool) -> Union[str, Plan, tuple]:
    end = buf.find(b"\r\n\r\n")
    try:
        if end < 0:
            last_line = buf.rfind(b"\n")
            if eof or last_line >= progress.scan or len(buf) > MAX_LINE + 2:  # a line more to check
                progress.scan = last_line + 1
                _refuse_partial_head(buf, eof)
            return WAIT
        if end + 4 > MAX_HEAD:
            raise FramingError(f"the request head is longer than {MAX_HEAD >> 10} KiB", 431)
        line_end = buf.find(b"\r\n") + 2
        command, target, version = parse_request_line(bytes(buf[:line_end]))
        headers = head_lines(bytes(buf[line_end:end]))
        framing, length, close = head_framing(headers, version, httpd.max_body)
    except FramingError as e:
        return Plan(None, None, True, e)
    del buf[:end + 4]
    progress.scan = 0
    try:
        handler = admit(httpd, command, target.partition("?")[0], headers, framing)
    except APIError as e:
        return Plan(None, None, close or closes_after_refusal(httpd, framing), e, command, version, headers)
    return command, target, version, headers, framing, length, close, handler


def _refuse_partial_head(buf: bytearray, eof: bool) -> None:
    """Refuse a head that cannot become valid however it goes on (a handler
    thread reads it line by line and refuses at the first bad line); at ``eof``,
    one cut short."""
    lines = bytes(buf[:buf.rfind(b"\n") + 1])
    if lines:
        first, _, rest = lines.partition(b"\n")
        parse_request_line(first + b"\n")
        if rest:
            head_lines(rest[:-2] if rest.endswith(b"\r\n") else rest)
    if len(buf) > MAX_HEAD:
        raise FramingError(f"the request head is longer than {MAX_HEAD >> 10} KiB", 431)
    if not lines and len(buf) > MAX_LINE + 2:
        raise FramingError(f"the request line is longer than {MAX_LINE >> 10} KiB", 414)
    if eof:
        raise FramingError("the connection closed inside the request head")


def _take_body(httpd: Any, buf: bytearray, progress: Progress, eof: bool) -> Union[str, Plan]:
    command, target, version, headers, framing, length, close, handler = progress.head
    if framing == NO_BODY:
        raw = b""
    elif framing == CHUNKED:
        raw = _chunked_body(httpd, buf, progress, eof)
        if raw is None:
            return _wait_for_body(headers, version, progress)
    else:
        if len(buf) < length:
            if eof:
                raise FramingError(f"request body ended after {len(buf)} of {length} bytes")
            return _wait_for_body(headers, version, progress)
        raw = bytes(buf[:length])
        del buf[:length]
    progress.reset()
    path, _, query = target.partition("?")
    body = _json_or_none(raw) if raw and len(raw) <= INLINE_MAX_BODY else None
    return Plan(handler, Request(command, path, query, headers, raw, None, body), close,  # type: ignore[arg-type]
                None, command, version, headers)


def _wait_for_body(headers: Any, version: str, progress: Progress) -> str:
    """CONTINUE once for a client that waits to be told to send its body."""
    if not progress.continued and version == "HTTP/1.1" and \
            headers.get("expect", "").lower() == "100-continue":
        progress.continued = True
        return CONTINUE
    return WAIT


def _chunked_body(httpd: Any, buf: bytearray, progress: Progress, eof: bool) -> Optional[bytes]:
    """The chunked body once it has arrived whole, else None; a FramingError for a
    malformed or too large one, at its first bad line, as a handler thread
    refuses it.  Each whole chunk is taken out of ``buf`` as it comes."""
    reader = _Buffered(buf)
    try:
        while True:
            data, progress.wire = read_chunk(reader, progress.wire, httpd.max_body, _never)
            del buf[:reader.pos]
            reader.pos = 0
            if data is None:
                return bytes(progress.body)
            progress.body += data
    except _Short:
        if eof:
            raise FramingError("the connection closed inside the chunked request body") from None
        return None


def _never() -> bool:
    return False


def _refusal(e: APIError, progress: Progress, close: bool) -> Plan:
    head = progress.head
    progress.reset()
    return Plan(None, None, close, e, *(head[0], head[2], head[3]) if head else ())


class _Short(Exception):
    """The buffer ends before what the parser asked for: wait for more bytes."""


class _Buffered:
    """The reading side :func:`read_chunked` needs, over a buffer that may not
    hold the whole body yet (then :class:`_Short`)."""

    def __init__(self, buf: bytearray):
        self.buf, self.pos = buf, 0

    def readline(self, limit: int) -> bytes:
        end = self.buf.find(b"\n", self.pos, self.pos + limit)
        if end < 0:
            if len(self.buf) - self.pos < limit:
                raise _Short()
            end = self.pos + limit - 1
        line = bytes(self.buf[self.pos:end + 1])
        self.pos = end + 1
        return line

    def read(self, n: int) -> bytes:
        if len(self.buf) - self.pos < n:
            raise _Short()
        data = bytes(self.buf[self.pos:self.pos + n])
        self.pos += n
        return data


def _json_or_none(raw: bytes) -> Any:
    try:
        return parse_json(raw) if raw.strip() else None
    except APIError:
        return None  # the route reads it again, and answers its 400
