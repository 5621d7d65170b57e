"""HTTP transport: ``http.server``, threaded, tuned, and strict.

:class:`HTTPServer` holds what both transports share: the routes, the limits,
the counters and the metrics.  Its handler threads serve connections only
where the event loop (:mod:`mtok.api.loop`) does not: with
``--http-threads-only``, or on a system without epoll; then every connection
gets a thread of its own.

The handler knows nothing of LLMs.  It reads a request within a deadline,
enforces the body limit and the API key, dispatches to a route of the app
(see :mod:`mtok.api.native`), and writes what the route returns: a JSON value, a
:class:`Response`, or an :class:`EventStream` sent as server-sent events over
chunked encoding.  Every error, its own included, is a JSON body.
"""

from __future__ import annotations

import http.server
import logging
import socket
import socketserver
import threading
import time
from typing import Any, Callable, Dict, Optional

from .connections import ClientDisconnected, ConnectionWatch, DisconnectWatcher, ReadDeadlines
from .listen import LISTEN_BACKLOG
from .framing import (
    CHUNKED,
    NO_BODY,
    FramingError,
    field,
    head_framing,
    parse_request_line,
    read_chunked,
    read_exact,
    read_headers,
)
from .admission import admit, closes_after_refusal, with_cors
from .respond import JSON_TYPE, TEXT_TYPE, body_fields, encode_result, internal_error, json_body, refuse, response_head
from .sse import SSEWriter
from ..wire.metrics import Metrics
from .routes import EventStream, Pending, Request, Response, collect_routes, route, settle_blocking  # noqa: F401
from ..validate import APIError

logger = logging.getLogger(__name__)


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
        self.submit_all = getattr(app, "submit_all", no_jobs)  # how a route's Job is submitted (routes.Job)
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

    def admit(self, sock: socket.socket) -> bool:
        """Count a new connection, up to ``max_connections``; past that it gets a
        503 at once (and False), so a flood cannot grow the thread count."""
        with self._count_lock:
            full = self.connections >= self.max_connections
            if not full:
                self.connections += 1
        if full:
            refuse(sock, self.max_connections)
        return not full

    def release(self) -> None:
        """Uncount a connection closed outside a handler thread (by the event loop)."""
        with self._count_lock:
            self.connections -= 1

    def process_request(self, request: Any, client_address: Any) -> None:
        """One thread per connection (see :meth:`admit`)."""
        if self.admit(request):
            try:
                super().process_request(request, client_address)
            except BaseException:
                self.release()
                raise

    def process_request_thread(self, request: Any, client_address: Any) -> None:
        try:
            super().process_request_thread(request, client_address)
        finally:
            self.release()

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

    def finish(self) -> None:
        """Close both files; what a client that left did not take is dropped
        (the dispatch that saw it go has said so), not raised as a server error."""
        for f in (self.wfile, self.rfile):
            try:
                f.close()  # the buffered writer closes its socket file even when its last flush fails
            except OSError:
                pass

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
        self.command, self.path, self.request_version = parse_request_line(self.raw_requestline)
        self.headers = read_headers(self.rfile, len(self.raw_requestline))
        self.framing, self.body_length, self.close_connection = head_framing(
            self.headers, self.request_version, self.server.max_body)
        self.body_done = self.framing == NO_BODY

    def dispatch(self) -> None:
        self.server.count(1)
        self.response_started = self.streaming = False
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
        try:
            if self.expired:  # the headers were cut short by the deadline
                self.close_connection = True
                raise APIError("the request took too long to arrive", 408)
            try:
                handler = admit(self.server, self.command, path, self.headers, self.framing)
            except APIError:
                self.close_connection = self.close_connection or closes_after_refusal(self.server, self.framing)
                raise
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
            if self.streaming:  # routine for a stream (a client that had enough): one line, no traceback
                logger.info("client %s went away during a stream", self.address_string())
        except Exception as e:  # a bug must cost one request, never the server
            logger.exception("error in %s %s", self.command, path)
            self.fail(internal_error(e))

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

    def read_body(self) -> bytes:
        """The body, as framed by the head (checked in parse_request).  The
        client is told to go on (100 Continue) only now, when the request has
        passed authentication and routing."""
        if self.framing == NO_BODY:
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
        result = settle_blocking(result, self.server.submit_all)
        if isinstance(result, EventStream):
            try:
                self.send_events(result)
            finally:  # the writer owns a stream's handle: what a client left mid-stream is aborted
                result.close()
        else:
            self.send_body(*encode_result(result))

    def send_json(self, body: Any, status: int = 200, headers: Optional[Dict[str, str]] = None) -> None:
        self.send_body(status, json_body(body), JSON_TYPE, headers)

    def send_text(self, text: str, status: int = 200, headers: Optional[Dict[str, str]] = None) -> None:
        self.send_body(status, text.encode(), TEXT_TYPE, headers)

    def send_body(self, status: int, data: bytes, content_type: str, headers: Optional[Dict[str, str]]) -> None:
        head = self._head(status, body_fields(data, content_type), headers)
        # one send, past the buffered writer (empty: a 100 Continue is flushed at once)
        self.connection.sendall(head if self.command == "HEAD" else head + data)

    def _head(self, status: int, fields: str, headers: Optional[Dict[str, str]]) -> bytes:
        """The status line and headers in one piece (send_header, per header, costs more)."""
        self.status = status
        self.response_started = True
        if logger.isEnabledFor(logging.DEBUG):
            self.log_request(status)
        headers = with_cors(self.server.cors, getattr(self, "headers", None), headers)
        return response_head(self.protocol_version, status, fields, headers, self.close_connection)

    def send_events(self, stream: EventStream) -> None:
        """The stream as server-sent events, one flush per event; :meth:`write`, its owner, closes it."""
        sse = SSEWriter(stream, self.request_version)
        if not sse.chunked:
            self.close_connection = True
        write, flush = self.wfile.write, self.wfile.flush
        self.streaming = True
        write(self._head(200, sse.head_fields(), stream.headers))
        while not sse.ended:
            write(sse.pull(1)[0])
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


def no_jobs(requests: Any) -> Any:
    """The ``submit_all`` of an app whose routes make no :class:`~mtok.api.routes.Job`."""
    raise RuntimeError("a route returned a Job, and its app has no submit_all")
