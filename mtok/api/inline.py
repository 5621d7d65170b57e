"""Which requests the event loop serves itself, decided from the bytes a
connection has sent so far (see :mod:`mtok.api.loop`).

:func:`take` answers with one of three things: wait for more bytes, hand the
connection to a handler thread, or a :class:`Plan`: the route and the
:class:`~mtok.api.routes.Request` of a request the loop serves, whose bytes
it has taken out of the buffer.  It parses with the functions the handler
threads use (:mod:`mtok.api.framing`), and refuses nothing itself: whatever a
thread would answer with an error, or by waiting, goes to a thread, which
reads the same bytes again and answers as it always does.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Optional, Union

from .framing import (LENGTH, MAX_HEAD, NO_BODY, FramingError, head_framing, head_lines, is_json_type,
                      parse_request_line)
from .routes import OPEN_PATHS, Request, find_route
from .server import has_api_key
from ..validate import APIError, parse_json

INLINE_MAX_BODY = 64 << 10  # larger bodies go to a thread, to tokenize there without stalling the loop
WAIT, HAND_OVER = "wait", "hand over"


@dataclass
class Plan:
    handler: Callable[[Request], Any]
    request: Request  # its watch is set by the loop
    close: bool  # close the connection after answering


def take(httpd: Any, buf: bytearray) -> Union[str, Plan]:
    """WAIT, HAND_OVER, or the Plan of the request at the start of ``buf``
    (whose bytes are then removed from it).  ``httpd`` is the
    :class:`~mtok.api.server.HTTPServer` whose routes and limits apply."""
    end = buf.find(b"\r\n\r\n")
    if end < 0:  # a thread reads line by line: a bare LF, it refuses at once; too long a head, 431
        return HAND_OVER if len(buf) > MAX_HEAD or buf.count(b"\n") != buf.count(b"\r\n") else WAIT
    if end + 4 > MAX_HEAD:
        return HAND_OVER
    try:
        head = _head(httpd, buf, end)
    except FramingError:
        return HAND_OVER
    if head is None:
        return HAND_OVER
    handler, command, target, headers, length, close = head
    total = end + 4 + length
    if len(buf) < total:
        return WAIT  # the body is on its way
    raw = bytes(buf[end + 4:total])
    body = _json_or_none(raw) if length else None
    if isinstance(body, dict) and body.get("stream"):
        return HAND_OVER  # a stream is written by a thread
    del buf[:total]
    path, _, query = target.partition("?")
    return Plan(handler, Request(command, path, query, headers, raw, None, body), close)  # type: ignore[arg-type]


def _head(httpd: Any, buf: bytearray, end: int) -> Optional[tuple]:
    """The route and framing of the head in ``buf[:end]`` if the loop serves
    it, else None; a FramingError if it is malformed."""
    line_end = buf.find(b"\r\n") + 2
    command, target, version = parse_request_line(bytes(buf[:line_end]))
    headers = head_lines(bytes(buf[line_end:end]))
    framing, length, close = head_framing(headers, version, httpd.max_body)
    path = target.partition("?")[0]
    if httpd.draining or framing not in (NO_BODY, LENGTH) or length > INLINE_MAX_BODY or "expect" in headers \
            or (httpd.cors and "origin" in headers):
        return None
    if command in ("POST", "PUT"):
        if "content-length" not in headers or not is_json_type(headers.get("content-type")):
            return None
    elif command != "GET":
        return None
    methods = find_route(httpd.routes, path)
    handler = methods.get(command) if methods else None
    if handler is None or not getattr(handler, "inline", False):
        return None
    if httpd.api_key is not None and path not in OPEN_PATHS and not has_api_key(headers, httpd.api_key):
        return None
    return handler, command, target, headers, length, close


def _json_or_none(raw: bytes) -> Any:
    try:
        return parse_json(raw) if raw.strip() else None
    except APIError:
        return None  # the route reads it again, and answers the same 400 a thread would

