"""The transport: ``multiprocessing.connection`` over AF_UNIX, authenticated.

An IPC name is the path of a socket file in the server's private (0700)
directory, so a sender can reach any endpoint from its name alone.  A
:class:`Receiver` owns a name and reads from every peer that connects to it
(ZMQ's PULL); a :class:`Sender` connects to a name on first use (PUSH).  Every
connection runs multiprocessing's HMAC challenge in both directions before a
byte of payload is read, and payloads are unpickled by :func:`loads`, which
refuses any class that is not an mtok message.
"""

from __future__ import annotations

import io
import logging
import os
import pickle
import select
import socket
import threading
from multiprocessing.connection import (
    AuthenticationError,
    Client,
    Connection,
    answer_challenge,
    deliver_challenge,
)
from typing import Any, Dict, List, Optional

from . import finish, io_struct

logger = logging.getLogger(__name__)

HANDSHAKE_TIMEOUT = 5.0
MAX_DRAIN_ROUNDS = 64  # polls per recv_bytes_all, so a chatty peer cannot starve the caller

_ALLOWED = {(cls.__module__, cls.__qualname__) for cls in io_struct.MESSAGE_TYPES + finish.FINISH_TYPES}


class _MessageUnpickler(pickle.Unpickler):
    def find_class(self, module: str, name: str) -> Any:
        if (module, name) in _ALLOWED:
            return super().find_class(module, name)
        raise pickle.UnpicklingError(f"refusing to unpickle {module}.{name}: not an mtok message")


def dumps(obj: Any) -> bytes:
    return pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL)


def loads(data: bytes) -> Any:
    return _MessageUnpickler(io.BytesIO(data)).load()


def ipc_name(sock_dir: str, role: str) -> str:
    return os.path.join(sock_dir, f"{role}.sock")


class Receiver:
    """Listens on an IPC name and yields messages from every connected peer."""

    def __init__(self, name: str, authkey: bytes):
        self.name = name
        self._authkey = authkey
        self._conns: Dict[int, Connection] = {}  # fd -> connection; the reading thread's own
        self._joined: List[Connection] = []  # authenticated, not yet picked up by the reader
        self._lock = threading.Lock()
        self._wake_r, self._wake_w = os.pipe()
        self._poll = select.poll()
        self._poll.register(self._wake_r, select.POLLIN)
        self._closed = False
        self._sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self._sock.bind(name)
        self._sock.listen(128)
        threading.Thread(target=self._accept_loop, name=f"accept:{os.path.basename(name)}", daemon=True).start()

    @property
    def peer_count(self) -> int:
        return len(self._conns) + len(self._joined)

    def _accept_loop(self) -> None:
        while not self._closed:
            try:
                sock, _ = self._sock.accept()
            except OSError:
                if self._closed:
                    return
                continue
            threading.Thread(target=self._handshake, args=(sock,), daemon=True).start()

    def _handshake(self, sock: socket.socket) -> None:
        """Authenticate one peer, giving up after HANDSHAKE_TIMEOUT so a silent
        peer cannot hold the endpoint."""
        conn = Connection(os.dup(sock.fileno()))
        done = threading.Lock()

        def expire() -> None:
            if done.acquire(blocking=False):
                try:
                    sock.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass

        timer = threading.Timer(HANDSHAKE_TIMEOUT, expire)
        timer.daemon = True
        timer.start()
        try:
            deliver_challenge(conn, self._authkey)
            answer_challenge(conn, self._authkey)
            if not done.acquire(blocking=False):
                raise AuthenticationError("handshake timed out")
        except (AuthenticationError, EOFError, OSError) as e:
            logger.warning("refused a peer on %s: %s", self.name, e or type(e).__name__)
            conn.close()
            return
        finally:
            timer.cancel()
            sock.close()
        with self._lock:
            if self._closed:
                conn.close()
                return
            self._joined.append(conn)
        os.write(self._wake_w, b"\0")  # the reader registers it

    def _take_joined(self) -> None:
        try:
            os.read(self._wake_r, 4096)
        except OSError:
            return
        with self._lock:
            joined, self._joined = self._joined, []
        for conn in joined:
            self._conns[conn.fileno()] = conn
            self._poll.register(conn.fileno(), select.POLLIN)

    def _drop(self, fd: int) -> None:
        conn = self._conns.pop(fd, None)
        if conn is not None:
            self._poll.unregister(fd)
            conn.close()

    def recv_bytes_all(self, timeout: Optional[float] = None) -> List[bytes]:
        """Every payload that is ready, waiting up to ``timeout`` for the first
        (None: forever).  Returns [] on timeout or when a new peer joined.
        Call it from one thread only."""
        out: List[bytes] = []
        wait_ms = None if timeout is None else timeout * 1000.0
        for _ in range(MAX_DRAIN_ROUNDS):
            if self._closed:
                break
            try:
                events = self._poll.poll(wait_ms)
            except (OSError, ValueError, RuntimeError):  # closed under us
                break
            if not events:
                break
            for fd, _ in events:
                if fd == self._wake_r:
                    self._take_joined()
                    continue
                conn = self._conns.get(fd)
                if conn is None:
                    continue
                try:
                    out.append(conn.recv_bytes())
                except (EOFError, OSError):
                    self._drop(fd)
            if not out:
                break
            wait_ms = 0  # take what else is already there, then hand it over
        return out

    def recv_all(self, timeout: Optional[float] = None) -> List[Any]:
        out = []
        for data in self.recv_bytes_all(timeout):
            try:
                out.append(loads(data))
            except Exception as e:  # an authenticated peer sent garbage: log, never die
                logger.error("dropping an undecodable message on %s: %s", self.name, e)
        return out

    def close(self) -> None:
        self._closed = True
        try:
            os.write(self._wake_w, b"\0")  # wake a reader blocked in recv_bytes_all
        except OSError:
            pass
        try:
            self._sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self._sock.close()
        with self._lock:
            conns = list(self._conns.values()) + self._joined
            self._conns, self._joined = {}, []
        for c in conns:
            c.close()
        for fd in (self._wake_r, self._wake_w):
            try:
                os.close(fd)
            except OSError:
                pass
        try:
            os.unlink(self.name)
        except OSError:
            pass


class Sender:
    """A connection to an IPC name, opened on first send and reopened after a failure."""

    def __init__(self, name: str, authkey: bytes):
        self.name = name
        self._authkey = authkey
        self._conn: Optional[Connection] = None
        self._lock = threading.Lock()

    def send_bytes(self, data: bytes) -> None:
        with self._lock:
            try:
                if self._conn is None:
                    self._conn = Client(self.name, family="AF_UNIX", authkey=self._authkey)
                self._conn.send_bytes(data)
            except (OSError, EOFError, AuthenticationError) as e:
                self._reset()
                raise ConnectionError(f"cannot send to {self.name}: {e}") from e

    def send(self, obj: Any) -> None:
        self.send_bytes(dumps(obj))

    def _reset(self) -> None:
        if self._conn is not None:
            try:
                self._conn.close()
            except OSError:
                pass
        self._conn = None

    def close(self) -> None:
        with self._lock:
            self._reset()


class SenderWrapper:
    """Stamps the owning worker's IPC name on everything it sends, so that
    :class:`~mtok.managers.tokenizer_manager.TokenizerManager` code needs no routing logic."""

    def __init__(self, sender: Sender, worker_address: str):
        self.sender = sender
        self.worker_address = worker_address

    def send(self, obj: Any) -> None:
        if isinstance(obj, io_struct.BaseReq):
            obj.worker_address = self.worker_address
        elif isinstance(obj, io_struct.BaseBatchReq):
            obj.worker_addresses = [self.worker_address] * len(obj.rids)
        self.sender.send(obj)

    def close(self) -> None:
        self.sender.close()
