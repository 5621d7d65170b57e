"""The HTTP side of the pipeline, in whichever process holds it.

:class:`HttpFrontend` puts a TokenizerManager behind an HTTP server (this module
sits above both, beside :mod:`mtok.serve`, since it wires the routes of
:mod:`mtok.api` to the managers they call).  In
single-worker mode the main process holds one; in multi-worker mode each
worker process runs :func:`run_tokenizer_worker_process`, the runner of its
:class:`TokenizerWorker`: it starts it (inbox, sender, receiver thread),
serves, drains, and closes it.

The serving loop's thread is the worker's pulse: it writes the heartbeat,
accepts connections and (with the event loop) reads the inbox of results.  If
it ever stops unasked (an exception escaped it), the handler threads would
serve on while nothing else moved: a half-alive worker, killed only
``--worker-timeout`` later by the supervisor.  So its end is reported
(``on_death``): a worker process exits at once and is replaced; with one
worker the supervisor fails the server.
"""

from __future__ import annotations

import functools
import logging
import signal
import socket
import threading
import time
from typing import Callable, Optional

from .api.native import Api
from .wire.args import ServerArgs, read_args
from .api import loop
from .api.server import HTTPServer
from .api.listen import make_listen_socket
from .wire.metrics import publish, read as read_metrics
from .procutil import ChildBoot, exit_now, on_signal
from .wire.status import FIRST_WORKER_SLOT, SCHEDULER_SLOT, ServerState, StatusBoard
from .managers.tokenizer_manager import TokenizerManager, TokenizerWorker

logger = logging.getLogger(__name__)

EXIT_LOOP_DIED = 70  # EX_SOFTWARE: the worker's serving loop stopped


class HttpFrontend:
    """``shared``: other workers accept on ``sock`` too (the shared listening
    socket, not one SO_REUSEPORT socket each, whose connections only this worker can take)."""

    def __init__(self, tm: TokenizerManager, board: StatusBoard, slot: int, sock: socket.socket, args: ServerArgs,
                 shared: bool = False):
        self.tm = tm
        self.sock = sock
        self.api = Api(tm, board, slot)
        self.httpd = HTTPServer(sock, self.api, args.api_key, args.max_request_bytes, args.http_timeout,
                                args.max_connections, tm.metrics)
        self.board, self.slot = board, slot
        self.httpd.tick = self.tick
        self.httpd.cors = frozenset(args.cors_allow_origins or ())
        self.loop: Optional[loop.EventLoop] = None
        if loop.enabled(args):
            corked = getattr(tm.send_to_scheduler, "corked", None)
            fewest = functools.partial(board.fewest_connections, slot) if shared else None
            self.loop = loop.EventLoop(self.httpd, corked, fewest, args.request_timeout)
        if not tm.receives_in_thread:  # the inbox is ours to read: in the loop, or in a thread
            if self.loop is not None:
                tm.recv_from_detokenizer.attach(self.loop.add_reader, self.loop.remove_reader, tm.handle_message)
            else:
                tm.start_receiver_thread()
        self._thread: Optional[threading.Thread] = None
        self._stopping = False  # stop_accepting was called: the threads-only loop returns, as asked

    def tick(self) -> None:
        """Called by the serving loop at least every poll interval: proof of
        life, this worker's counters for whoever answers /metrics, the context
        limits the engines have learned (an upstream's ``max_model_len``), and a
        look at the server's state, so that a core process's death fails the
        requests in flight even if the supervisor's notice to this worker went astray."""
        self.board.heartbeat(self.slot)
        self.board.set_served(self.slot, self.httpd.served)
        publish(self.board.extra(self.slot), self.httpd.metrics.snapshot())
        self.tm.learn_context_lengths((read_metrics(self.board.extra(SCHEDULER_SLOT)) or {}).get("engine_context"))
        if self.tm.failure is None and self.board.state == ServerState.FAILED:
            self.tm.fail_all(self.board.failure_message())

    def start(self, on_death: Callable[[str], None]) -> None:
        """Serve in a thread of its own; ``on_death(why)`` is called from it if it stops unasked."""
        self._thread = threading.Thread(target=self._serve, args=(on_death,), name="http", daemon=True)
        self._thread.start()

    def _serve(self, on_death: Callable[[str], None]) -> None:
        serve = self.httpd.serve_forever if self.loop is None else self.loop.serve_forever
        why = "it returned"
        try:
            serve(poll_interval=0.25)
        except BaseException as e:  # noqa: BLE001 (whatever it was, this worker no longer serves)
            why = f"{type(e).__name__}: {e}"
            logger.critical("the HTTP serving loop failed", exc_info=True)
        if not self._stopping:
            on_death(why)

    def stop_accepting(self) -> None:
        self._stopping = True
        self.httpd.draining = True
        serving = self._thread is not None and self._thread.is_alive()  # a dead loop answers no one
        if serving and self.loop is not None:
            self.loop.stop_accepting()
        elif serving:
            self.httpd.shutdown()
        try:
            self.sock.close()
        except OSError:
            pass

    @property
    def busy(self) -> bool:
        return self.httpd.in_flight > 0 or self.tm.num_in_flight > 0

    def drain(self, timeout: float, interrupted: Callable[[], bool] = lambda: False) -> bool:
        """Wait for requests in flight to finish; False if the time ran out or
        ``interrupted`` said to stop waiting."""
        deadline = time.monotonic() + timeout
        while self.busy:
            if time.monotonic() >= deadline:
                logger.warning("graceful timeout: %d request(s) still in flight", self.tm.num_in_flight)
                return False
            if interrupted():
                return False
            time.sleep(0.02)  # a poll of two counters, not synchronisation
        return True


def _exit_dead(why: str) -> None:
    """A worker whose serving loop stopped leaves, so that the supervisor replaces it now."""
    logger.critical("the HTTP serving loop stopped (%s); exiting, to be replaced", why)
    exit_now(EXIT_LOOP_DIED)


def run_tokenizer_worker_process(
    shm_name: str,
    status_name: str,
    authkey: bytes,
    parent_pid: int,
    slot: int,
    worker_address: str,
    shared_sock: Optional[socket.socket],
    ready_conn,
) -> None:
    server_args, port_args = read_args(shm_name)
    with ChildBoot(f"worker-{slot - FIRST_WORKER_SLOT}", parent_pid, ready_conn, server_args.log_level):
        board = StatusBoard.attach(status_name)
        tm = TokenizerWorker(server_args, port_args, authkey, worker_address).start(receive_thread=False)
        sock = shared_sock or make_listen_socket(server_args.host, server_args.port, reuseport=True)
        front = HttpFrontend(tm, board, slot, sock, server_args, shared=shared_sock is not None)
    stop = threading.Event()
    on_signal(signal.SIGTERM, stop.set)
    on_signal(signal.SIGQUIT, lambda: exit_now(0))
    board.heartbeat(slot)
    front.start(on_death=_exit_dead)
    while not stop.wait(1.0):
        pass
    front.stop_accepting()
    front.drain(server_args.graceful_timeout)
    tm.close()
    exit_now(0)
