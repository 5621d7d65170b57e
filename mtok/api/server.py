"""HTTP transport: the server every worker has, and its fallback of a thread
per connection.

:class:`HTTPServer` holds what both transports share: the routes, the limits,
the counters and the metrics.  Its threads serve connections only where the
event loop (:mod:`mtok.api.loop`) does not: with ``--http-threads-only``, or
on a system without epoll; then every connection gets a thread of its own
(:class:`ConnectionHandler`), which reads and answers with the loop's own
parts: the connection object (:class:`~mtok.api.loop_conn.Conn`), the reader
(:mod:`mtok.api.intake`, with the gate of :mod:`mtok.api.admission`), the
encoders (:mod:`mtok.api.respond`, :mod:`mtok.api.sse`).  Only the waiting
differs: a thread blocks on its socket and on its request's mailbox.

It knows nothing of LLMs: a route returns a JSON value, a :class:`Response`,
a :class:`Pending`, an :class:`EventStream` or a :class:`Job`, and every
error, its own included, is a JSON body.
"""

from __future__ import annotations

import logging
import socket
import socketserver
import threading
import time
from typing import Any, Callable, Optional

from . import intake
from .admission import with_cors
from .connections import ClientDisconnected, ConnectionWatch, DisconnectWatcher
from .listen import LISTEN_BACKLOG
from .loop_conn import Conn
from .respond import body_fields, encode_outcome, refuse, response_head
from .routes import EventStream, Pending, Request, Response, collect_routes, route, settle_blocking  # noqa: F401
from .sse import SSEWriter
from ..validate import APIError
from ..wire.metrics import Metrics

logger = logging.getLogger(__name__)

TOO_LATE = "the request took too long to arrive"


class HTTPServer(socketserver.ThreadingMixIn, socketserver.TCPServer):
    daemon_threads = True
    block_on_close = False
    allow_reuse_address = True
    request_queue_size = LISTEN_BACKLOG

    def __init__(self, sock: socket.socket, app: Any, api_key: Optional[str], max_body: int, timeout: float,
                 max_connections: int = 1024, metrics: Optional[Metrics] = None):
        # Bind and listen happen elsewhere (the socket may be shared by workers).
        socketserver.BaseServer.__init__(self, sock.getsockname(), ConnectionHandler)
        self.socket = sock
        self.server_port = sock.getsockname()[1]
        self.app = app
        self.routes = collect_routes(app)
        self.submit_all = getattr(app, "submit_all", no_jobs)  # how a route's Job is submitted (routes.Job)
        self.api_key = api_key.encode() if api_key else None
        self.max_body = max_body
        self.read_timeout = timeout
        self.watcher = DisconnectWatcher()
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
        """Uncount a connection closed (by a thread, or by the event loop)."""
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


class ConnectionHandler(socketserver.BaseRequestHandler):
    """One connection, served in its thread from its first request to its last:
    read a request (each within ``--http-timeout``, the wait for it on a kept-alive
    connection included), run its route, write its answer."""

    server: HTTPServer

    def handle(self) -> None:
        sock = self.request
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        conn = Conn(sock, self.client_address, time.monotonic())
        try:
            while True:
                plan = self.read_request(conn)
                if plan is None:
                    return
                self.serve(conn, plan)
                if conn.close:
                    return
        except OSError:  # the client left, or would not read: nothing more to tell it
            return

    def read_request(self, conn: Conn) -> Optional[intake.Plan]:
        """The next request (a Plan), or None once the connection is done with."""
        deadline, eof = time.monotonic() + self.server.read_timeout, False
        while True:
            got = intake.take(self.server, conn.buf, conn.progress, eof)
            if got is intake.CONTINUE:
                conn.sock.sendall(intake.CONTINUE_RESPONSE)
            elif got is not intake.WAIT:
                return got
            elif eof:
                return None
            else:
                remaining = deadline - time.monotonic()
                if remaining <= 0:  # a request too slow to arrive is answered; an idle connection closed
                    partial = conn.buf or conn.progress.head
                    return intake.Plan(None, None, True, APIError(TOO_LATE, 408)) if partial else None
                data = self.receive(conn.sock, remaining)
                if data:
                    conn.buf += data
                elif data is not None:  # the client closed: a request cut short is refused
                    if not (conn.buf or conn.progress.head):
                        return None
                    eof = True

    @staticmethod
    def receive(sock: socket.socket, timeout: float) -> Optional[bytes]:
        """What the client sent within ``timeout`` (None: nothing in time; b"": it closed)."""
        sock.settimeout(timeout)
        try:
            return sock.recv(intake.RECV_SIZE)
        except socket.timeout:
            return None
        except OSError:
            return b""

    def serve(self, conn: Conn, plan: intake.Plan) -> None:
        server = self.server
        server.count(1)
        start, endpoint = time.monotonic(), "other"
        conn.status, conn.close = 0, plan.close
        conn.head_only, conn.version, conn.request_headers = plan.command == "HEAD", plan.version, plan.headers
        try:
            result: Any = plan.error
            if result is None:
                req = plan.request
                endpoint = req.path if req.path in server.routes else "other"
                req.watch = ConnectionWatch(server.watcher, conn.sock)
                result = self.run(plan.handler, req)
            self.write(conn, result, endpoint)
        finally:
            server.count(-1)
            server.metrics.observe_request(endpoint, conn.status, time.monotonic() - start)

    def run(self, handler: Callable[[Request], Any], req: Request) -> Any:
        """The route's answer, waited for (a Job submitted alone, a Pending's
        results, a stream's first update), or the exception it raised."""
        try:
            return settle_blocking(handler(req), self.server.submit_all)
        except Exception as e:  # noqa: BLE001 (a refusal, a hang-up, a bug: written as the loop writes them)
            return e

    def write(self, conn: Conn, result: Any, endpoint: str) -> None:
        conn.sock.settimeout(self.server.read_timeout)  # each piece of the answer taken within --http-timeout
        try:
            if isinstance(result, EventStream):
                try:
                    return self.write_stream(conn, result)
                finally:  # the writer owns a stream's handle: what a client left mid-stream is aborted
                    result.close()
            status, data, content_type, headers = encode_outcome(result, endpoint)
            if status is None:  # the client left
                conn.close = True
                return
            conn.status = status
            conn.close = conn.close or status == 408
            head = response_head("HTTP/1.1", status, body_fields(data, content_type),
                                 with_cors(self.server.cors, conn.request_headers, headers), conn.close)
            conn.sock.sendall(head if conn.head_only else head + data)
        except socket.timeout:
            logger.warning("%s was too slow to read its response; closing", conn.addr[0])
            conn.close = True

    def write_stream(self, conn: Conn, stream: EventStream) -> None:
        """The stream as server-sent events, one send per event."""
        sse = SSEWriter(stream, conn.version)
        conn.close = conn.close or not sse.chunked
        conn.status = 200
        headers = with_cors(self.server.cors, conn.request_headers, stream.headers)
        try:
            conn.sock.sendall(response_head("HTTP/1.1", 200, sse.head_fields(), headers, conn.close))
            while not sse.ended:
                conn.sock.sendall(sse.pull(1)[0])
        except (ClientDisconnected, BrokenPipeError, ConnectionResetError):
            conn.close = True  # routine for a stream (a client that had enough): one line, no traceback
            logger.info("client %s went away during a stream", conn.addr[0])
        except Exception:  # noqa: BLE001 (a bug mid-stream: all the client can be told is the close)
            conn.close = True
            logger.exception("error writing the stream of %s", conn.addr[0])


def no_jobs(requests: Any) -> Any:
    """The ``submit_all`` of an app whose routes make no :class:`~mtok.api.routes.Job`."""
    raise RuntimeError("a route returned a Job, and its app has no submit_all")
