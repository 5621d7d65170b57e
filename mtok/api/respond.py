"""The bytes of a response, shared by both transports: the handler threads of
:mod:`mtok.api.server` and the event loop of :mod:`mtok.api.loop`.

A response goes out as one piece (head and body together, one ``send``), its
head written directly rather than a header at a time through ``http.server``.
"""

from __future__ import annotations

import email.utils
import http.server
import json
import logging
import os
import re
import socket
import time
from typing import Any, Dict, Optional, Tuple

from .connections import ClientDisconnected
from .routes import Response
from ..validate import APIError

logger = logging.getLogger(__name__)

JSON_TYPE = "application/json"
TEXT_TYPE = "text/plain; charset=utf-8"

JSON = json.JSONEncoder(ensure_ascii=False)  # one encoder, not one per response
PHRASES = {code: phrase for code, (phrase, _) in http.server.BaseHTTPRequestHandler.responses.items()}
_PID = [os.getpid()]  # this worker's pid, for the X-Mtok-Worker header

_date_cache: list = [0, ""]


def http_date() -> str:
    """The Date header, formatted once a second rather than once a response."""
    now = int(time.time())
    if _date_cache[0] != now:
        _date_cache[:] = [now, email.utils.formatdate(now, usegmt=True)]
    return _date_cache[1]


def response_head(version: str, status: int, fields: str, headers: Optional[Dict[str, str]], close: bool) -> bytes:
    """The status line and headers in one piece.  ``fields`` are header lines
    already written (``Content-Type``...); ``close`` adds ``Connection: close``."""
    extra = "".join(f"{k}: {v}\r\n" for k, v in headers.items()) if headers else ""
    if close:
        extra += "Connection: close\r\n"
    return (f"{version} {status} {PHRASES.get(status, '')}\r\nServer: mtok\r\n"
            f"Date: {http_date()}\r\n{fields}X-Mtok-Worker: {_PID[0]}\r\n{extra}\r\n").encode("latin-1")


def body_fields(data: bytes, content_type: str) -> str:
    return f"Content-Type: {content_type}\r\nContent-Length: {len(data)}\r\n"


def json_body(value: Any) -> bytes:
    return json_text_bytes(JSON.encode(value))


_SURROGATE = re.compile("[\ud800-\udfff]")


def json_text_bytes(text: str) -> bytes:
    """JSON text as UTF-8.  A lone surrogate (a model's ``"\\ud800"``, read back
    by a parser's ``json.loads``) has no UTF-8; it can only stand inside a
    string literal, so it is written as its JSON escape there, as
    ``json.dumps(ensure_ascii=True)`` (SGLang) writes it and any JSON reader
    reads it back.  Only a text that holds one pays for the search."""
    try:
        return text.encode()
    except UnicodeEncodeError:
        return _SURROGATE.sub(lambda m: "\\u%04x" % ord(m.group()), text).encode()


def encode_outcome(result: Any, endpoint: str) -> Tuple[Optional[int], bytes, str, Optional[Dict[str, str]]]:
    """:func:`encode_result` of a route's result or of the exception it raised,
    as a handler thread answers them (a bug: a logged 500); status None: the
    client left."""
    if isinstance(result, ClientDisconnected):
        return None, b"", "", None
    if isinstance(result, Exception) and not isinstance(result, APIError):
        logger.error("error serving %s", endpoint, exc_info=result)
        result = internal_error(result)
    try:
        return encode_result(result)
    except Exception as e:  # noqa: BLE001 (a body JSON cannot hold: the route's bug, answered as one)
        logger.error("error writing the answer of %s", endpoint, exc_info=e)
        return encode_result(internal_error(e))


def internal_error(exc: BaseException) -> APIError:
    """The 500 a route's bug is answered with (its type only: no internals leak)."""
    return APIError(f"internal error: {type(exc).__name__}", 500)


def encode_result(result: Any) -> Tuple[int, bytes, str, Optional[Dict[str, str]]]:
    """(status, body, content type, headers) of what a route returned (a
    :class:`~mtok.api.routes.Response` or a JSON value) or of an APIError."""
    if isinstance(result, APIError):
        return result.status, json_body(result.body()), JSON_TYPE, result.headers
    if not isinstance(result, Response):
        return 200, json_body(result), JSON_TYPE, None
    headers = result.headers
    content_type = TEXT_TYPE if isinstance(result.body, str) else JSON_TYPE
    if headers and "Content-Type" in headers:
        headers = dict(headers)
        content_type = headers.pop("Content-Type")
    data = result.body.encode() if isinstance(result.body, str) else json_body(result.body)
    return result.status, data, content_type, headers


def refuse(sock: socket.socket, limit: int) -> None:
    """Answer a connection past ``--max-connections`` with 503, and close it."""
    body = json.dumps(APIError(f"too many connections (the limit is {limit} per worker)", 503).body()).encode()
    head = (f"HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json\r\nContent-Length: {len(body)}"
            "\r\nRetry-After: 1\r\nConnection: close\r\n\r\n").encode()
    try:
        sock.settimeout(1.0)
        sock.sendall(head + body)
    except OSError:
        pass
    finally:
        sock.close()
