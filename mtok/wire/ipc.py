"""The transport: ``multiprocessing.connection`` over AF_UNIX, authenticated.

An IPC name is the path of a socket file in the server's private (0700)
directory, so a sender can reach any endpoint from its name alone.  A
:class:`Receiver` owns a name and reads from every peer that connects to it
(ZMQ's PULL); a :class:`Sender` connects to a name on first use (PUSH).  Every
connection runs multiprocessing's HMAC challenge in both directions before a
byte of payload is read, and payloads are unpickled by :func:`loads`, which
refuses any class that is not an mtok message.

Several messages ready at once cross in one system call each way: a
:class:`SharedSender` (or :meth:`Sender.send_all`) writes them together and a
:class:`Receiver` cuts them all out of one read (:mod:`mtok.wire.frames`).
"""

from __future__ import annotations

import io
import logging
import os
import pickle
import queue
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
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

from . import finish, io_struct
from .frames import Frames, pack, write_all

logger = logging.getLogger(__name__)

HANDSHAKE_TIMEOUT = 5.0
MAX_DRAIN_ROUNDS = 64  # polls per recv_bytes_all, so a chatty peer cannot starve the caller

# (module, name) -> the class itself: an allowed name is answered from here, with no import
_ALLOWED = {(cls.__module__, cls.__qualname__): cls for cls in io_struct.MESSAGE_TYPES + finish.FINISH_TYPES}


class _MessageUnpickler(pickle.Unpickler):
    def find_class(self, module: str, name: str) -> Any:
        cls = _ALLOWED.get((module, name))
        if cls is None:
            raise pickle.UnpicklingError(f"refusing to unpickle {module}.{name}: not an mtok message")
        return cls


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
        # fd -> the connection and what has arrived of its next messages; the reading thread's own
        self._conns: Dict[int, Tuple[Connection, Frames]] = {}
        self._joined: List[Connection] = []  # authenticated, not yet picked up by the reader
        self._lock = threading.Lock()
        self._wake_r, self._wake_w = os.pipe()
        self._poll: Any = select.poll()  # or, once attached to an event loop, a _LoopPoller
        self._poll.register(self._wake_r, select.POLLIN)
        self._closed = False
        self._sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self._sock.bind(name)
        self._sock.listen(128)
        threading.Thread(target=self._accept_loop, name=f"accept:{os.path.basename(name)}", daemon=True).start()

    @property
    def peer_count(self) -> int:
        return len(self._conns) + len(self._joined)

    def attach(self, add_reader: Callable[[int, Callable[[], None]], None], remove_reader: Callable[[int], None],
               deliver: Callable[[Any], None]) -> None:
        """Be read by an event loop rather than by :meth:`recv_all`: every
        descriptor this receiver waits on (its wake-up pipe, each peer as it
        joins) is added to the loop with ``add_reader(fd, callback)`` and taken
        out with ``remove_reader(fd)``; each message read goes to ``deliver``.
        Call it before the loop runs.  (The loop waits on these descriptors
        itself, rather than on an epoll of ours inside its own: two system
        calls fewer for each batch of results.)"""
        old, self._poll = self._poll, _LoopPoller(self, add_reader, remove_reader, deliver)
        for fd in [self._wake_r, *self._conns]:
            old.unregister(fd)
            self._poll.register(fd, select.POLLIN)

    def _read_ready(self, fd: int, deliver: Callable[[Any], None]) -> None:
        """The attached loop saw ``fd`` readable."""
        out: List[bytes] = []
        self._read_fd(fd, out)
        for msg in self._decode(out):
            deliver(msg)

    def _read_fd(self, fd: int, out: List[bytes]) -> None:
        """``fd`` is readable: take in a joining peer, or add the whole messages
        a peer sent to ``out`` (dropping it when it has gone)."""
        if fd == self._wake_r:
            return self._take_joined()
        peer = self._conns.get(fd)
        if peer is None:
            return
        try:
            peer[1].read(fd, out)
        except (EOFError, OSError):
            self._drop(fd)

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
            self._conns[conn.fileno()] = (conn, Frames())
            self._poll.register(conn.fileno(), select.POLLIN)

    def _drop(self, fd: int) -> None:
        peer = self._conns.pop(fd, None)
        if peer is not None:
            self._poll.unregister(fd)
            peer[0].close()

    def recv_bytes_all(self, timeout: Optional[float] = None) -> List[bytes]:
        """Every payload that is ready, waiting up to ``timeout`` for the first
        (None: forever).  Returns [] on timeout, when a new peer joined, or
        when only part of a message has arrived.  Each ready peer costs one
        read(), however many messages it wrote (see :mod:`mtok.wire.frames`).
        Call it from one thread only."""
        out: List[bytes] = []
        wait = None if timeout is None else timeout * 1000.0  # poll counts ms
        for _ in range(MAX_DRAIN_ROUNDS):
            if self._closed:
                break
            try:
                events = self._poll.poll(wait)
            except (OSError, ValueError, RuntimeError):  # closed under us
                break
            if not events:
                break
            for fd, _ in events:
                self._read_fd(fd, out)
            if not out:
                break
            wait = 0  # take what else is already there, then hand it over
        return out

    def recv_all(self, timeout: Optional[float] = None) -> List[Any]:
        return self._decode(self.recv_bytes_all(timeout))

    def _decode(self, payloads: List[bytes]) -> List[Any]:
        out = []
        for data in payloads:
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
            conns = [conn for conn, _ in self._conns.values()] + self._joined
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


class _LoopPoller:
    """What a :class:`Receiver` attached to an event loop registers its descriptors with."""

    def __init__(self, receiver: Receiver, add_reader: Callable[[int, Callable[[], None]], None],
                 remove_reader: Callable[[int], None], deliver: Callable[[Any], None]):
        self._receiver, self._add, self._remove, self._deliver = receiver, add_reader, remove_reader, deliver

    def register(self, fd: int, _mask: int) -> None:
        self._add(fd, lambda: self._receiver._read_ready(fd, self._deliver))

    def unregister(self, fd: int) -> None:
        self._remove(fd)


class Sender:
    """A connection to an IPC name, opened on first send and reopened after a failure."""

    def __init__(self, name: str, authkey: bytes):
        self.name = name
        self._authkey = authkey
        self._conn: Optional[Connection] = None
        self._lock = threading.Lock()

    def send_bytes(self, data: bytes) -> None:
        self.send_all((data,))

    def send_all(self, payloads: Sequence[bytes]) -> None:
        """Send several payloads with one write (the receiver reads them as separate messages)."""
        with self._lock:
            try:
                if self._conn is None:
                    self._conn = Client(self.name, family="AF_UNIX", authkey=self._authkey)
                write_all(self._conn.fileno(), pack(payloads))
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


class SharedSender:
    """A :class:`Sender` for many threads, none of which ever waits for another.

    :meth:`send` pickles and queues the message; then, if no other thread is
    writing, this one writes everything queued (its own and what others queued
    meanwhile) in one write, and looks again after it lets go.  A thread that
    finds a write under way just returns: the writer takes its message along.

    Why: a worker's HTTP threads all send to one inbox.  With a lock held over
    each write, the others slept on that lock and woke one by one (a context
    switch each, ~10 µs of CPU on a small VM), and the scheduler woke once per
    message.  Here nobody sleeps, a burst of requests is one write, one read on
    the other side, and one scheduler step.

    A write that fails is reported, not raised: ``on_failure(messages, error)``
    gets every message the write carried (other threads' too), so their owner
    can fail those requests; nothing is dropped unseen.
    """

    def __init__(self, sender: Sender, on_failure: Callable[[List[Any], ConnectionError], None]):
        self.sender = sender
        self.on_failure = on_failure
        self._queue: "queue.SimpleQueue[Any]" = queue.SimpleQueue()  # put and get_nowait are atomic
        self._writing = threading.Lock()  # only ever tried, never waited on (but by a cork and in close)
        self._cork = _Cork(self)

    def send(self, obj: Any) -> None:
        self._queue.put((dumps(obj), obj))
        self._write_queued()

    def _write_queued(self) -> None:
        while self._writing.acquire(blocking=False):
            try:
                self._flush()
            finally:
                self._writing.release()
            if self._queue.empty():  # else whatever was queued meanwhile: write it, or see another writing it
                return

    def corked(self) -> "_Cork":
        """Hold the writes for the ``with`` block: what is sent meanwhile, by any
        thread, goes out in one write at its end.  The event loop holds it over
        each turn, so that the requests of one turn are one message to the router."""
        return self._cork

    def _flush(self) -> None:
        # Only the holder of _writing takes from the queue, so what empty() denies is there to get.
        q = self._queue
        if q.empty():  # most of the loop's turns: nothing sent
            return
        batch = []
        while not q.empty():
            batch.append(q.get_nowait())
        try:
            self.sender.send_all([data for data, _ in batch])
        except ConnectionError as e:
            try:
                self.on_failure([obj for _, obj in batch], e)
            except Exception:
                logger.exception("on_failure raised for %d message(s) to %s", len(batch), self.sender.name)

    def close(self) -> None:
        """Send what is queued, then close the connection."""
        with self._writing:
            self._flush()
        self.sender.close()


class _Cork:
    """:meth:`SharedSender.corked`'s context manager, a class rather than a
    generator: the event loop enters one on every turn.  It keeps no state of its
    own (the lock is the sender's), so one object serves every ``with``, on any thread."""

    def __init__(self, sender: SharedSender):
        self._sender = sender

    def __enter__(self) -> None:
        self._sender._writing.acquire()

    def __exit__(self, *exc: Any) -> None:
        sender = self._sender
        try:
            sender._flush()
        finally:
            sender._writing.release()
        sender._write_queued()  # what was queued after that flush


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

    def corked(self) -> Any:
        return self.sender.corked()

    def close(self) -> None:
        self.sender.close()
