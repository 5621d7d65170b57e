"""The runners: the I/O of the scheduler, detokenizer and router processes.

The cores (:class:`~mtok.managers.scheduler.Scheduler`,
:class:`~mtok.managers.detokenizer.DetokenizerManager`,
:class:`~mtok.managers.router.MultiTokenizerRouter`) are plain objects,
messages in and messages out; constructing one opens no socket and starts no
thread, as gunicorn's ``Worker.__init__`` "shouldn't do anything to the
current process".  A runner owns the rest, in socketserver's separate steps:

``bind()``
    open the process's inbox (a :class:`~mtok.wire.ipc.Receiver`) and its
    outbound :class:`~mtok.wire.ipc.Sender` or
    :class:`~mtok.wire.socket_mapping.SocketMapping`;
``serve_forever()``
    the loop: receive, hand each message to the core, send what it gives back
    (the router's runner runs two threads instead, ``activate()``);
``close()``
    close everything ``bind()`` opened; called from ``finally``.

``run_scheduler_process`` and ``run_detokenizer_process`` are the child
processes' entry points (gunicorn's ``init_process``): read the arguments,
build the core and bind inside the boot handshake, serve until SIGTERM, close,
exit.  Where the detokenizer's outputs go is chosen once, here: to the one
TokenizerManager (:class:`ToTokenizerManager`), or by the worker address on
each request (:class:`ToWorkers`).

Where the detokenizer runs is chosen here too (``--detokenizer``): in the
scheduler's process (``inline``, :class:`InlineDetokenizer`: each step's
batch is decoded where it is made and goes straight to the workers) or in a
process of its own (``process``, SGLang's layout).  Inline, a step costs one
hop, one pickling and one wake-up less; measured on 2 cores it is the faster
at one request at a time and at 64 streams alike (docs/benchmarks.md).  A
process of its own gives the decoding a core of its own, for when the
scheduler's process is the one that is busy.
"""

from __future__ import annotations

import logging
import signal
import threading
from typing import Any, Iterable, List, Optional

from ..models import load_tokenizers
from ..procutil import ChildBoot, exit_now
from ..wire.args import PortArgs, read_args
from ..wire.io_struct import AbortReq, BaseBatchReq, group_by_worker
from ..wire.ipc import Receiver, Sender
from ..wire.metrics import publish
from ..wire.socket_mapping import SocketMapping
from ..wire.status import SCHEDULER_SLOT, StatusBoard
from .detokenizer import DetokenizerManager
from .router import MultiTokenizerRouter
from .scheduler import Scheduler

logger = logging.getLogger(__name__)


class SchedulerRunner:
    """The scheduler process's sockets, status-board gauges and loop.
    ``detokenizer``: a :class:`~mtok.managers.detokenizer.DetokenizerManager`
    to run here (``--detokenizer inline``), or None to send each step to the
    detokenizer's process."""

    def __init__(self, scheduler: Scheduler, port_args: PortArgs, authkey: bytes,
                 board: Optional[StatusBoard] = None, detokenizer: Optional[DetokenizerManager] = None):
        self.scheduler = scheduler
        self.port_args = port_args
        self.authkey = authkey
        self.board = board
        self.detokenizer = detokenizer
        self.inbox: Optional[Receiver] = None
        self.to_detokenizer: Any = None  # a Sender, or an InlineDetokenizer: send() and close()
        self.detokenizer_gone = False  # set once a send fails: its death is the supervisor's to handle
        self._published: Optional[tuple] = None

    def bind(self) -> None:
        self.inbox = Receiver(self.port_args.scheduler_inbox, self.authkey)
        if self.detokenizer is None:
            self.to_detokenizer = Sender(self.port_args.detokenizer_inbox, self.authkey)
        else:
            workers = self.scheduler.server_args.tokenizer_worker_num
            self.to_detokenizer = InlineDetokenizer(self.detokenizer, output_sink(
                workers, self.port_args.reply_inbox, self.authkey))

    def serve_forever(self) -> None:
        core = self.scheduler
        while True:
            for msg in self.inbox.recv_all(core.wait_time()):
                core.handle(msg)
            core.advance()
            self.deliver(core.take_outputs())
            self.publish_gauges()

    def deliver(self, outputs: List[Any]) -> None:
        """Send on; if the detokenizer has died the supervisor is about to stop
        the server and names it, so this process stays up rather than muddle
        that, says so once, and drops the work it can no longer deliver."""
        for msg in outputs:
            if self.detokenizer_gone:
                return
            try:
                self.to_detokenizer.send(msg)
            except ConnectionError as e:
                whom = "the tokenizer manager" if self.detokenizer is not None else "the detokenizer"
                logger.error("cannot reach %s: %s; dropping all requests", whom, e)
                self.detokenizer_gone = True
                self.scheduler.drop_all()

    def publish_gauges(self) -> None:
        """The queue lengths, for /metrics, and what the engines say of themselves;
        written only when they change."""
        state = self.scheduler.gauges() + (self.scheduler.engine_context_lengths(),)
        if self.board is not None and state != self._published:
            self._published = state
            snap: dict = {"gauges": {"num_requests_running": state[0], "num_requests_waiting": state[1]}}
            if state[2] is not None:
                snap["engine_problem"] = state[2]  # /health reads it: 503 while set
            if state[3]:
                snap["engine_context"] = dict(state[3])  # the workers' context limits (an upstream's max_model_len)
            publish(self.board.extra(SCHEDULER_SLOT), snap)

    def close(self) -> None:
        for part in (self.inbox, self.to_detokenizer, self.board):
            if part is not None:
                part.close()


class InlineDetokenizer:
    """The detokenizer in the scheduler's process: what the scheduler would
    send to the detokenizer's inbox goes through the core here, and what it
    gives back to the sink, as :class:`DetokenizerRunner` would."""

    def __init__(self, manager: DetokenizerManager, sink: Any):
        self.manager = manager
        self.sink = sink

    def send(self, msg: Any) -> None:
        out = self.manager.handle(msg)
        if out is not None:
            self.sink.deliver(out)

    def close(self) -> None:
        self.sink.close()


def output_sink(workers: int, reply_inbox: str, authkey: bytes) -> Any:
    """Where decoded outputs go: the one TokenizerManager, or each worker its piece."""
    return (ToTokenizerManager if workers == 1 else ToWorkers)(reply_inbox, authkey)


class ToTokenizerManager:
    """One worker: every output goes to its TokenizerManager's inbox."""

    def __init__(self, address: str, authkey: bytes):
        self.sender = Sender(address, authkey)

    def deliver(self, out: Any) -> None:
        if isinstance(out, AbortReq):
            return  # only the router announces a departed worker, and there is no router
        self.sender.send(out)

    def close(self) -> None:
        self.sender.close()


class ToWorkers:
    """N workers: each step's batch is split by the worker address on each
    request and every piece goes straight to its worker; anything else (control
    replies) goes to the router, which delivers it by the address on it."""

    def __init__(self, router_address: str, authkey: bytes):
        self.by_address = SocketMapping(authkey)
        self.router = Sender(router_address, authkey)

    def deliver(self, out: Any) -> None:
        if isinstance(out, BaseBatchReq):
            for address, piece in group_by_worker(out).items():
                self.by_address.send_output(address, piece)
        elif isinstance(out, AbortReq):
            self.by_address.drop(out.abort_all_of)  # the supervisor says that worker is gone
        else:
            self.router.send(out)

    def close(self) -> None:
        self.by_address.clear_all_sockets()
        self.router.close()


class DetokenizerRunner:
    """The detokenizer process's inbox, output sink and loop."""

    def __init__(self, manager: DetokenizerManager, port_args: PortArgs, authkey: bytes, workers: int):
        self.manager = manager
        self.port_args = port_args
        self.authkey = authkey
        self.workers = workers
        self.inbox: Optional[Receiver] = None
        self.sink: Any = None

    def bind(self) -> None:
        self.inbox = Receiver(self.port_args.detokenizer_inbox, self.authkey)
        self.sink = output_sink(self.workers, self.port_args.reply_inbox, self.authkey)

    def serve_forever(self) -> None:
        while True:
            for msg in self.inbox.recv_all():
                out = self.manager.handle(msg)
                if out is not None:
                    self.sink.deliver(out)

    def close(self) -> None:
        for part in (self.inbox, self.sink):
            if part is not None:
                part.close()


def _serve_until_sigterm(runner: Any) -> None:
    """Serve; SIGTERM ends the loop (as an exception, so ``finally`` closes
    the sockets), then the process leaves at once (see :func:`exit_now`)."""
    def stop(signum: int, frame: Any) -> None:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        raise SystemExit(0)

    try:
        signal.signal(signal.SIGTERM, stop)
        runner.serve_forever()
    except SystemExit:
        pass
    finally:
        runner.close()
    exit_now(0)


def run_scheduler_process(args_ref: str, authkey: bytes, parent_pid: int, ready_conn) -> None:
    server_args, port_args = read_args(args_ref)
    with ChildBoot("scheduler", parent_pid, ready_conn, server_args.log_level):
        tokenizers = load_tokenizers(server_args.model_specs(), server_args.tokenizer_backend)
        inline = DetokenizerManager(server_args, tokenizers) if server_args.detokenizer == "inline" else None
        runner = SchedulerRunner(Scheduler(server_args, tokenizers), port_args, authkey,
                                 StatusBoard.attach(port_args.status_name), inline)
        runner.bind()
    _serve_until_sigterm(runner)


def run_detokenizer_process(args_ref: str, authkey: bytes, parent_pid: int, ready_conn) -> None:
    server_args, port_args = read_args(args_ref)
    with ChildBoot("detokenizer", parent_pid, ready_conn, server_args.log_level):
        runner = DetokenizerRunner(DetokenizerManager(server_args), port_args, authkey,
                                   server_args.tokenizer_worker_num)
        runner.bind()
    _serve_until_sigterm(runner)


class RouterRunner:
    """The router's sockets and its two threads, in the main process.

    ``forward_to_scheduler`` passes what the workers send on to the scheduler
    as bytes (it never unpickles them); ``deliver_replies`` delivers each reply
    that comes back through the detokenizer to the worker named on it."""

    def __init__(self, port_args: PortArgs, authkey: bytes, router: Optional[MultiTokenizerRouter] = None):
        self.port_args = port_args
        self.authkey = authkey
        self.router = router or MultiTokenizerRouter()
        self.from_workers: Optional[Receiver] = None
        self.from_detokenizer: Optional[Receiver] = None
        self.to_scheduler: Optional[Sender] = None
        self.by_address: Optional[SocketMapping] = None
        self.threads: List[threading.Thread] = []
        self._closed = False

    def start(self) -> None:
        self.bind()
        self.activate()

    def bind(self) -> None:
        self.from_workers = Receiver(self.port_args.router_inbox, self.authkey)
        self.to_scheduler = Sender(self.port_args.scheduler_inbox, self.authkey)
        self.from_detokenizer = Receiver(self.port_args.reply_inbox, self.authkey)
        self.by_address = SocketMapping(self.authkey)

    def activate(self) -> None:
        for target, name in ((self.forward_to_scheduler, "router-in"), (self.deliver_replies, "router-out")):
            thread = threading.Thread(target=target, name=name, daemon=True)
            thread.start()
            self.threads.append(thread)

    def forward_to_scheduler(self) -> None:
        while not self._closed:
            batch = self.from_workers.recv_bytes_all(timeout=1.0)
            if batch:
                try:
                    self.to_scheduler.send_all(batch)  # one write for all the workers sent
                except ConnectionError as e:
                    logger.error("cannot reach the scheduler: %d message(s) lost: %s", len(batch), e)

    def deliver_replies(self) -> None:
        while not self._closed:
            for msg in self.from_detokenizer.recv_all(timeout=1.0):
                self.by_address.send_output(self.router.reply_address(msg), msg)

    def broadcast(self, msg: Any, addresses: Iterable[str]) -> None:
        for address in addresses:
            self.by_address.send_output(address, msg)

    def worker_gone(self, address: str) -> None:
        """A worker died: forget its connection, and have the scheduler abort what it had in flight."""
        self.by_address.drop(address)
        try:
            self.to_scheduler.send(self.router.departure_notice(address))
        except ConnectionError as e:
            logger.error("cannot tell the scheduler that %s is gone: %s", address, e)

    def close(self) -> None:
        self._closed = True
        if self.by_address is not None:
            self.by_address.clear_all_sockets()
        for part in (self.to_scheduler, self.from_workers, self.from_detokenizer):
            if part is not None:
                part.close()
        for thread in self.threads:
            thread.join(timeout=2.0)
