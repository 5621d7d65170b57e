"""The MultiTokenizerRouter: the hub between N workers and the scheduler.

It runs as two threads of the main process.  ``forward_to_scheduler`` forwards
what the workers send to the scheduler, as bytes: it never unpickles them.
``deliver_replies`` takes the non-batch messages that come back through the
detokenizer (control replies, failure notices) and delivers each to the worker
named on it.  Batch outputs do not pass here; the detokenizer sends those to
the workers directly.
"""

from __future__ import annotations

import logging
import threading
from typing import Any, Iterable

from ..wire.args import PortArgs
from ..wire.io_struct import AbortReq
from ..wire.ipc import Receiver, Sender
from ..wire.socket_mapping import SocketMapping

logger = logging.getLogger(__name__)


class MultiTokenizerRouter:
    def __init__(self, port_args: PortArgs, authkey: bytes):
        self.receive_from_worker = Receiver(port_args.router_inbox, authkey)
        self.send_to_scheduler = Sender(port_args.scheduler_inbox, authkey)
        self.recv_from_detokenizer = Receiver(port_args.reply_inbox, authkey)
        self.socket_mapping = SocketMapping(authkey)
        self._closed = False
        for target, name in ((self.forward_to_scheduler, "router-in"), (self.deliver_replies, "router-out")):
            threading.Thread(target=target, name=name, daemon=True).start()

    def forward_to_scheduler(self) -> None:
        while not self._closed:
            for data in self.receive_from_worker.recv_bytes_all(timeout=1.0):
                try:
                    self.send_to_scheduler.send_bytes(data)
                except ConnectionError as e:
                    logger.error("cannot reach the scheduler: %s", e)

    def deliver_replies(self) -> None:
        while not self._closed:
            for msg in self.recv_from_detokenizer.recv_all(timeout=1.0):
                self.socket_mapping.send_output(getattr(msg, "worker_address", None), msg)

    def broadcast(self, msg: Any, names: Iterable[str]) -> None:
        for name in names:
            self.socket_mapping.send_output(name, msg)

    def worker_gone(self, name: str) -> None:
        """A worker died: abort what it had in flight, forget its connection."""
        self.socket_mapping.drop(name)
        try:
            self.send_to_scheduler.send(AbortReq(abort_all_of=name))
        except ConnectionError as e:
            logger.error("cannot tell the scheduler that %s is gone: %s", name, e)

    def close(self) -> None:
        self._closed = True
        self.socket_mapping.clear_all_sockets()
        self.send_to_scheduler.close()
        self.receive_from_worker.close()
        self.recv_from_detokenizer.close()
