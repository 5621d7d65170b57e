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

import collections
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

from . import io_struct

logger = logging.getLogger(__name__)

HANDSHAKE_TIMEOUT = 5.0
MAX_DRAIN_ROUNDS = 64  # polls per recv_bytes_all, so a chatty peer cannot starve the caller

_ALLOWED = {(cls.__module__, cls.__qualname__) for cls in io_struct.MESSAGE_TYPES}


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
    :class:`~mtok.tokenizer_manager.TokenizerManager` code needs no routing logic."""

    def __init__(self, sender: Sender, worker_ipc: str):
        self.sender = sender
        self.worker_ipc = worker_ipc

    def send(self, obj: Any) -> None:
        if isinstance(obj, io_struct.BaseReq):
            obj.http_worker_ipc = self.worker_ipc
        elif isinstance(obj, io_struct.BaseBatchReq):
            obj.http_worker_ipcs = [self.worker_ipc] * len(obj.rids)
        self.sender.send(obj)

    def close(self) -> None:
        self.sender.close()


class _Peer:
    """One worker's outbound messages and the thread that sends them.

    A worker that is stopped or wedged must not stall the sender's loop (the
    detokenizer serves every worker), so messages wait here.  A slow worker
    is not a dead one: while it does not read, its pending step outputs are
    merged (:func:`merge_outputs`), so what waits grows with the text of its
    requests, not with the number of steps; it all goes out when the worker
    reads again.  Only a failed connection, or the supervisor (through
    :meth:`SocketMapping.drop`), ends a peer."""

    MERGE_AT = 64  # pending messages that trigger a merge

    def __init__(self, name: str, authkey: bytes, on_gone):
        self.name = name
        self._sender = Sender(name, authkey)
        self._pending: List[Any] = []
        self._cond = threading.Condition()
        self._on_gone = on_gone
        self.alive = True
        threading.Thread(target=self._run, name=f"peer:{os.path.basename(name)}", daemon=True).start()

    def put(self, obj: Any) -> bool:
        with self._cond:
            if not self.alive:
                return False
            self._pending.append(obj)
            if len(self._pending) >= self.MERGE_AT:
                self._pending = merge_outputs(self._pending)
            self._cond.notify()
        return True

    @property
    def pending(self) -> int:
        return len(self._pending)

    def _take(self) -> Optional[List[Any]]:
        with self._cond:
            while self.alive and not self._pending:
                self._cond.wait()
            if not self.alive:
                return None
            batch, self._pending = merge_outputs(self._pending), []
            return batch

    def _run(self) -> None:
        while True:
            batch = self._take()
            if batch is None:
                break
            try:
                for obj in batch:
                    self._sender.send_bytes(dumps(obj))
            except ConnectionError as e:
                self._fail(str(e.__cause__ or e))
                break
        self._sender.close()

    def _fail(self, why: str) -> None:
        with self._cond:
            was_alive, self.alive = self.alive, False
            self._cond.notify()
        if was_alive:
            self._on_gone(self, why)

    def close(self) -> None:
        with self._cond:
            self.alive = False
            self._pending = []
            self._cond.notify()


def merge_outputs(msgs: List[Any]) -> List[Any]:
    """Runs of consecutive step outputs (``BatchStrOutput``) merged into one:
    per request its text and ids concatenated, its latest counts and finish.
    A rid that finished and then came back (a new request) gets a new entry.
    The messages given are not modified."""
    out: List[Any] = []
    made = set()  # ids of the merged copies made here
    for msg in msgs:
        last = out[-1] if out else None
        if isinstance(msg, io_struct.BatchStrOutput) and isinstance(last, io_struct.BatchStrOutput):
            if id(last) not in made:
                last = out[-1] = _copy_output(last)
                made.add(id(last))
            _merge_into(last, msg)
        else:
            out.append(msg)
    return out


def _copy_output(msg: Any) -> Any:
    copy = io_struct.BatchStrOutput(rids=list(msg.rids), http_worker_ipcs=list(msg.http_worker_ipcs or []) or None)
    for name in _MERGED_FIELDS:
        setattr(copy, name, [list(v) if isinstance(v, list) else v for v in getattr(msg, name)])
    return copy


_MERGED_FIELDS = ("finished_reasons", "output_strs", "output_ids", "prompt_tokens", "completion_tokens")


def _merge_into(acc: Any, msg: Any) -> None:
    open_at = {rid: i for i, rid in enumerate(acc.rids) if acc.finished_reasons[i] is None}
    for j, rid in enumerate(msg.rids):
        i = open_at.get(rid)
        if i is None:
            acc.rids.append(rid)
            if acc.http_worker_ipcs is not None:
                acc.http_worker_ipcs.append((msg.http_worker_ipcs or [None])[j] if msg.http_worker_ipcs else None)
            for name in _MERGED_FIELDS:
                value = getattr(msg, name)[j]
                getattr(acc, name).append(list(value) if isinstance(value, list) else value)
            i = open_at[rid] = len(acc.rids) - 1
        else:
            acc.output_strs[i] += msg.output_strs[j]
            acc.output_ids[i].extend(msg.output_ids[j])
            acc.prompt_tokens[i] = msg.prompt_tokens[j]
            acc.completion_tokens[i] = msg.completion_tokens[j]
            acc.finished_reasons[i] = msg.finished_reasons[j]
        if acc.finished_reasons[i] is not None:
            open_at.pop(rid, None)


class SocketMapping:
    """IPC name -> outbound connection, opened the first time a name is seen.

    Workers come and go (a replacement gets a new name), so nothing is
    registered up front.  A peer whose connection fails is logged once and
    its entry dropped; the next message to that name tries again, since only
    the supervisor knows a worker is dead: it says so through :meth:`drop`,
    and from then on that name is ignored.  Nothing is raised into the
    caller's loop.
    """

    def __init__(self, authkey: bytes):
        self._authkey = authkey
        self._mapping: Dict[str, _Peer] = {}
        self._gone_names: "collections.OrderedDict[str, None]" = collections.OrderedDict()
        self._failed: "collections.OrderedDict[str, None]" = collections.OrderedDict()
        self._lock = threading.Lock()

    def __contains__(self, name: str) -> bool:
        return name in self._mapping

    def __len__(self) -> int:
        return len(self._mapping)

    def send_output(self, name: Optional[str], output: Any) -> bool:
        if name is None:
            logger.warning("no IPC name on %s; dropped", type(output).__name__)
            return False
        peer = self._mapping.get(name)
        if peer is None:
            if name in self._gone_names:
                return False  # the supervisor replaced that worker; its name never comes back
            with self._lock:
                peer = self._mapping.get(name)
                if peer is None:
                    peer = self._mapping[name] = _Peer(name, self._authkey, self._gone)
        return peer.put(output)

    def _gone(self, peer: _Peer, why: str) -> None:
        with self._lock:
            if self._mapping.get(peer.name) is peer:
                del self._mapping[peer.name]
            first = peer.name not in self._failed
            _remember(self._failed, peer.name)
        if first:
            logger.warning("cannot send to %s (%s); will retry while it is listed as alive", peer.name, why)

    def drop(self, name: str) -> None:
        """The supervisor says this worker is gone: forget it for good."""
        with self._lock:
            peer = self._mapping.pop(name, None)
            _remember(self._gone_names, name)
        if peer is not None:
            peer.close()

    def clear_all_sockets(self) -> None:
        for name in list(self._mapping):
            peer = self._mapping.pop(name, None)
            if peer is not None:
                peer.close()


def _remember(names: "collections.OrderedDict[str, None]", name: str, keep: int = 1024) -> None:
    names[name] = None
    while len(names) > keep:
        names.popitem(last=False)
