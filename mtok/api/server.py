"""HTTP transport: ``http.server``, threaded, tuned, and strict.

The handler knows nothing of LLMs.  It reads a request within a deadline,
enforces the body limit and the API key, dispatches to a route of the app
(see :mod:`mtok.api.native`), and writes what the route returns: a JSON value, a
:class:`Response`, or an :class:`EventStream` sent as server-sent events over
chunked encoding.  Every error, its own included, is a JSON body.
"""

from __future__ import annotations

import email.utils
import hmac
import http.server
import json
import logging
import os
import socket
import socketserver
import threading
import time
from typing import Any, Callable, Dict, Optional
from urllib.parse import urlsplit

from .connections import ConnectionWatch, DisconnectWatcher, ReadDeadlines
from .listen import LISTEN_BACKLOG
from .framing import (
    CHUNKED,
    NO_BODY,
    FramingError,
    Headers,
    body_framing,
    connection_options,
    crlf_line,
    field,
    is_json_type,
    read_chunked,
    read_exact,
    read_headers,
)
from ..wire.metrics import Metrics
from .routes import OPEN_PATHS, EventStream, Request, Response, collect_routes, find_route, route  # noqa: F401
from ..managers.request_handle import ClientDisconnected
from .validate import APIError

logger = logging.getLogger(__name__)


_JSON = json.JSONEncoder(ensure_ascii=False)  # one encoder, not one per response
_PID = [os.getpid()]  # this worker's pid, for the X-Mtok-Worker header


_date_cache: list = [0, ""]


def http_date() -> str:
    """The Date header, formatted once a second rather than once a response."""
    now = int(time.time())
    if _date_cache[0] != now:
        _date_cache[:] = [now, email.utils.formatdate(now, usegmt=True)]
    return _date_cache[1]


class HTTPServer(socketserver.ThreadingMixIn, http.server.HTTPServer):
    daemon_threads = True
    block_on_close = False
    allow_reuse_address = True
    request_queue_size = LISTEN_BACKLOG

    def __init__(self, sock: socket.socket, app: Any, api_key: Optional[str], max_body: int, timeout: float,
                 max_connections: int = 1024, metrics: Optional[Metrics] = None):
        # Bind and listen happen elsewhere (the socket may be shared by workers).
        socketserver.BaseServer.__init__(self, sock.getsockname(), RequestHandler)
        self.socket = sock
        self.server_name, self.server_port = "mtok", sock.getsockname()[1]
        self.app = app
        self.routes = collect_routes(app)
        self.api_key = api_key.encode() if api_key else None
        self.max_body = max_body
        self.read_timeout = timeout
        self.watcher = DisconnectWatcher()
        self.deadlines = ReadDeadlines(timeout)
        self.tick: Optional[Callable[[], None]] = None
        self.metrics = metrics or Metrics()
        self.max_connections = max_connections
        self.cors: frozenset = frozenset()  # --cors-allow-origins
        self.connections = 0
        self.draining = False  # set on graceful stop: new requests are turned away
        self.in_flight = 0  # requests being handled (idle keep-alive connections don't count)
        self.served = 0
        self._count_lock = threading.Lock()

    def service_actions(self) -> None:
        if self.tick is not None:
            self.tick()

    def process_request(self, request: Any, client_address: Any) -> None:
        """One thread per connection, up to ``max_connections``; past that the
        connection gets a 503 at once, so a flood cannot grow the thread count."""
        with self._count_lock:
            full = self.connections >= self.max_connections
            if not full:
                self.connections += 1
        if full:
            _refuse(request, self.max_connections)
            return
        try:
            super().process_request(request, client_address)
        except BaseException:
            with self._count_lock:
                self.connections -= 1
            raise

    def process_request_thread(self, request: Any, client_address: Any) -> None:
        try:
            super().process_request_thread(request, client_address)
        finally:
            with self._count_lock:
                self.connections -= 1

    def count(self, delta: int) -> None:
        with self._count_lock:
            self.in_flight += delta
            if delta < 0:
                self.served -= delta

    def handle_error(self, request: Any, client_address: Any) -> None:
        logger.exception("unhandled error serving %s", client_address)


class RequestHandler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    wbufsize = -1  # buffered writes: one send per response, not one per header
    disable_nagle_algorithm = True
    server_version = "mtok"
    sys_version = ""
    server: HTTPServer
    expired = False  # set by ReadDeadlines

    def setup(self) -> None:
        self.timeout = self.server.read_timeout
        super().setup()

    # http.server calls do_<METHOD>; every method goes through dispatch.
    def do_GET(self) -> None:
        self.dispatch()

    do_POST = do_GET

    def __getattr__(self, name: str) -> Any:
        if name.startswith("do_"):
            return self.dispatch
        raise AttributeError(name)

    def handle_one_request(self) -> None:
        # The whole request, from its first byte to the end of its body, must
        # arrive within the deadline; so must the next one on a kept-alive
        # connection, which is what bounds idle connections too.
        self.server.deadlines.arm(self)
        try:
            super().handle_one_request()
        except OSError:  # the last flush: the client left, or does not read
            self.close_connection = True
        finally:
            self.server.deadlines.disarm(self)

    def parse_request(self) -> bool:
        """The request line and headers, parsed directly (http.server goes
        through the email package, the largest cost of a small request) and
        strictly (see :mod:`mtok.api.framing`)."""
        self.command = None
        self.request_version = "HTTP/0.9"
        self.close_connection = True
        self.body_done = True  # False while a body the client sent is unread
        self.requestline = str(self.raw_requestline, "iso-8859-1").rstrip("\r\n")
        try:
            self._parse_head()
        except FramingError as e:
            self.send_error(e.status, e.message)
            return False
        return True

    def _parse_head(self) -> None:
        words = crlf_line(self.raw_requestline, "the request line").decode("iso-8859-1").split(" ")
        if len(words) != 3 or not words[2].startswith("HTTP/") or not all(words):
            raise FramingError(f"bad request line {self.requestline[:100]!r}")
        command, path, version = words
        if version not in ("HTTP/1.1", "HTTP/1.0"):
            raise FramingError(f"unsupported HTTP version in {self.requestline[:100]!r}; use HTTP/1.1 or HTTP/1.0")
        self.command, self.request_version = command, version
        self.path = "/" + path.lstrip("/") if path.startswith("//") else path
        headers = self.headers = read_headers(self.rfile)
        if version == "HTTP/1.1" and not field(headers, "host"):
            raise FramingError("HTTP/1.1 requests need a Host header")
        self.framing, self.body_length = body_framing(headers, version, self.server.max_body)
        options = connection_options(headers)
        self.close_connection = "close" in options or (version == "HTTP/1.0" and "keep-alive" not in options)
        self.body_done = self.framing == NO_BODY

    def dispatch(self) -> None:
        self.server.count(1)
        self.response_started = False
        start = time.monotonic()
        self.status = 0
        try:
            self._dispatch()
        finally:
            self.server.count(-1)
            path = self.path.partition("?")[0]
            endpoint = path if path in self.server.routes else "other"  # /v1/models/{model} counts as other
            self.server.metrics.observe_request(endpoint, self.status, time.monotonic() - start)

    def _dispatch(self) -> None:
        path, _, query = self.path.partition("?")
        if "://" in path:
            path = urlsplit(path).path
        try:
            if self.expired:  # the headers were cut short by the deadline
                self.close_connection = True
                raise APIError("the request took too long to arrive", 408)
            if self.server.draining:
                self.close_connection = True
                raise APIError("the server is shutting down", 503, headers={"Retry-After": "1"})
            if self.command == "OPTIONS" and self.server.cors and self.headers.get("origin"):
                self.read_body()
                return self.send_text("", 204, self.cors_headers(preflight=True))
            if self.server.api_key is not None and path not in OPEN_PATHS:
                self.check_api_key()
            methods = find_route(self.server.routes, path)
            if methods is None:
                raise APIError(f"no route for {path!r}", 404)
            handler = methods.get(self.command)
            if handler is None:
                allow = ", ".join(sorted(methods))
                raise APIError(f"{self.command} is not allowed on {path}; use {allow}", 405, headers={"Allow": allow})
            if self.command in ("POST", "PUT", "PATCH") and not is_json_type(field(self.headers, "content-type")):
                raise APIError(f"Content-Type {self.headers.get('content-type')!r} is not JSON; send "
                               "application/json", 415)
            raw = self.read_body()
            self.server.deadlines.disarm(self)
            if self.expired:
                raise APIError("the request took too long to arrive", 408)
            req = Request(self.command, path, query, self.headers, raw, ConnectionWatch(self.server.watcher, self.connection))
            self.write(handler(req))
        except APIError as e:
            self.fail(e)
        except socket.timeout:  # a read or write stalled longer than --http-timeout
            if self.response_started:
                logger.warning("%s was too slow to read its response; closing", self.address_string())
            self.fail(APIError("the request took too long to arrive", 408))
        except (ClientDisconnected, BrokenPipeError, ConnectionResetError):
            self.close_connection = True
        except Exception as e:  # a bug must cost one request, never the server
            logger.exception("error in %s %s", self.command, path)
            self.fail(APIError(f"internal error: {type(e).__name__}", 500))

    def fail(self, e: APIError) -> None:
        """Answer an error, unless a response has begun: then all the client can
        be told is that the connection closes.  An error before the body was
        read closes the connection too: its unread bytes are no next request."""
        if not self.body_done or self.response_started or e.status == 408:
            self.close_connection = True
        if self.response_started:
            return
        try:
            self.send_json(e.body(), e.status, e.headers)
        except OSError:
            self.close_connection = True

    def cors_headers(self, preflight: bool = False) -> Dict[str, str]:
        """CORS for browser clients, for the origins of --cors-allow-origins."""
        origin = self.headers.get("origin")
        allowed = self.server.cors
        if not origin or not allowed or ("*" not in allowed and origin not in allowed):
            return {}
        out = {"Access-Control-Allow-Origin": "*" if "*" in allowed else origin, "Vary": "Origin"}
        if preflight:
            out["Access-Control-Allow-Methods"] = "GET, POST, PUT, OPTIONS"
            out["Access-Control-Allow-Headers"] = self.headers.get("access-control-request-headers") or \
                "Authorization, Content-Type"
            out["Access-Control-Max-Age"] = "600"
        return out

    def check_api_key(self) -> None:
        auth = self.headers.get("Authorization", "")
        scheme, _, token = auth.partition(" ")
        if scheme.lower() != "bearer" or not hmac.compare_digest(token.strip().encode(), self.server.api_key):
            raise APIError("a valid API key is required (Authorization: Bearer <key>)", 401,
                           headers={"WWW-Authenticate": "Bearer"})

    def read_body(self) -> bytes:
        """The body, as framed by the head (checked in parse_request).  The
        client is told to go on (100 Continue) only now, when the request has
        passed authentication and routing."""
        if self.framing == NO_BODY:
            if self.command in ("POST", "PUT", "PATCH") and "content-length" not in self.headers:
                raise APIError("a request body needs Content-Length or chunked encoding", 411)
            return b""
        if field(self.headers, "expect", "").lower() == "100-continue" and self.request_version == "HTTP/1.1":
            self.wfile.write(b"HTTP/1.1 100 Continue\r\n\r\n")
            self.wfile.flush()
        expired = lambda: self.expired  # noqa: E731
        if self.framing == CHUNKED:
            data = read_chunked(self.rfile, self.server.max_body, expired)
        else:
            data = read_exact(self.rfile, self.body_length, expired)
        self.body_done = True
        return data

    # -- writing ---------------------------------------------------------------------
    def write(self, result: Any) -> None:
        if isinstance(result, EventStream):
            try:
                self.send_events(result)
            finally:  # the writer owns a stream's handle: what a client left mid-stream is aborted
                result.close()
        elif isinstance(result, Response) and isinstance(result.body, str):
            self.send_text(result.body, result.status, result.headers)
        elif isinstance(result, Response):
            self.send_json(result.body, result.status, result.headers)
        else:
            self.send_json(result)

    def send_json(self, body: Any, status: int = 200, headers: Optional[Dict[str, str]] = None) -> None:
        self.send_text(_JSON.encode(body), status, headers, "application/json")

    def send_text(self, text: str, status: int = 200, headers: Optional[Dict[str, str]] = None,
                  content_type: str = "text/plain; charset=utf-8") -> None:
        data = text.encode()
        if headers and "Content-Type" in headers:
            headers = dict(headers)
            content_type = headers.pop("Content-Type")
        head = self._head(status, f"Content-Type: {content_type}\r\nContent-Length: {len(data)}\r\n", headers)
        # one send, past the buffered writer (empty: a 100 Continue is flushed at once)
        self.connection.sendall(head if self.command == "HEAD" else head + data)

    def _head(self, status: int, fields: str, headers: Optional[Dict[str, str]]) -> bytes:
        """The status line and headers in one piece (send_header, per header, costs more)."""
        self.status = status
        self.response_started = True
        if logger.isEnabledFor(logging.DEBUG):
            self.log_request(status)
        if self.server.cors and isinstance(getattr(self, "headers", None), Headers) and \
                "Access-Control-Allow-Origin" not in (headers or {}):
            headers = {**(headers or {}), **self.cors_headers()}
        extra = "".join(f"{k}: {v}\r\n" for k, v in headers.items()) if headers else ""
        if self.close_connection:
            extra += "Connection: close\r\n"
        return (f"{self.protocol_version} {status} {self.responses.get(status, ('',))[0]}\r\nServer: mtok\r\n"
                f"Date: {http_date()}\r\n{fields}X-Mtok-Worker: {_PID[0]}\r\n{extra}\r\n").encode("latin-1")

    def send_events(self, stream: EventStream) -> None:
        """The stream as server-sent events; :meth:`write`, its owner, closes it."""
        chunked = self.request_version != "HTTP/1.0"
        if not chunked:
            self.close_connection = True
        fields = "Content-Type: text/event-stream\r\nCache-Control: no-cache\r\n"
        if chunked:
            fields += "Transfer-Encoding: chunked\r\n"
        write, flush = self.wfile.write, self.wfile.flush
        write(self._head(200, fields, stream.headers))
        for ev in stream.events:
            data = ev if isinstance(ev, str) else _JSON.encode(ev)
            payload = b"data: " + data.encode() + b"\n\n"
            if chunked:
                write(b"%x\r\n%s\r\n" % (len(payload), payload))
            else:
                write(payload)
            flush()
        if chunked:
            write(b"0\r\n\r\n")
        flush()

    def send_error(self, code: int, message: Optional[str] = None, explain: Optional[str] = None) -> None:
        """http.server's own errors (bad request line, header flood, ...) as JSON."""
        self.close_connection = True
        if self.expired:
            code, message = 408, "the request took too long to arrive"
        if self.request_version == "HTTP/0.9":  # the request line was unreadable; answer with a status line
            self.request_version = "HTTP/1.0"
        body = APIError(message or self.responses.get(code, ("error",))[0], code).body()
        try:
            self.send_json(body, code)
        except OSError:
            pass

    def log_message(self, format: str, *args: Any) -> None:
        if logger.isEnabledFor(logging.DEBUG):
            logger.debug("%s %s", self.address_string(), format % args)


def _refuse(sock: socket.socket, limit: int) -> None:
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
