"""Routing results to workers by name: :class:`SocketMapping` (ZMQ's
PUSH-by-name), one :class:`_Peer` per worker IPC name.

The detokenizer and the router serve every worker from one loop, so a worker
that stops reading must not stall them, and must not lose its results either:
a slow worker is not a dead one.  Each peer sends from its own thread, and
while its worker does not read, its pending step outputs are merged per
request (:func:`merge_outputs`).  Only the supervisor decides that a worker is
gone (:meth:`SocketMapping.drop`).
"""

from __future__ import annotations

import collections
import logging
import os
import threading
from typing import Any, Dict, List, Optional

from . import io_struct
from .ipc import Sender, dumps

logger = logging.getLogger(__name__)


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
        self._merge_at = self.MERGE_AT  # grows if what is pending does not merge (not step outputs)
        self._cond = threading.Condition()
        self._on_gone = on_gone
        self.alive = True
        threading.Thread(target=self._run, name=f"peer:{os.path.basename(name)}", daemon=True).start()

    def put(self, obj: Any) -> bool:
        with self._cond:
            if not self.alive:
                return False
            self._pending.append(obj)
            if len(self._pending) >= self._merge_at:
                self._pending = merge_outputs(self._pending)
                self._merge_at = max(self.MERGE_AT, 2 * len(self._pending))
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
            self._merge_at = self.MERGE_AT
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
    copy = io_struct.BatchStrOutput(rids=list(msg.rids), worker_addresses=list(msg.worker_addresses or []) or None)
    for name in _MERGED_FIELDS:
        setattr(copy, name, [list(v) if isinstance(v, list) else v for v in getattr(msg, name)])
    if msg.logprobs is not None:
        copy.logprobs = [None if d is None else {k: list(v) for k, v in d.items()} for d in msg.logprobs]
    return copy


def _merge_logprobs(acc: Any, i: int, msg: Any, j: int) -> None:
    """Request ``j`` of ``msg``'s logprob rows added to request ``i`` of ``acc`` (new or open)."""
    new = msg.logprobs[j] if msg.logprobs is not None else None
    if new is None:
        if acc.logprobs is not None and i == len(acc.logprobs):
            acc.logprobs.append(None)
        return
    if acc.logprobs is None:
        acc.logprobs = [None] * len(acc.rids)
    if i == len(acc.logprobs):
        acc.logprobs.append(None)
    have = acc.logprobs[i] = acc.logprobs[i] or {}
    for key, rows in new.items():
        have.setdefault(key, []).extend(rows)


_MERGED_FIELDS = ("finished_reasons", "output_strs", "output_ids", "prompt_tokens", "completion_tokens")


def _merge_into(acc: Any, msg: Any) -> None:
    open_at = {rid: i for i, rid in enumerate(acc.rids) if acc.finished_reasons[i] is None}
    for j, rid in enumerate(msg.rids):
        i = open_at.get(rid)
        if i is None:
            acc.rids.append(rid)
            if acc.worker_addresses is not None:
                acc.worker_addresses.append((msg.worker_addresses or [None])[j] if msg.worker_addresses else None)
            for name in _MERGED_FIELDS:
                value = getattr(msg, name)[j]
                getattr(acc, name).append(list(value) if isinstance(value, list) else value)
            i = open_at[rid] = len(acc.rids) - 1
            _merge_logprobs(acc, i, msg, j)
        else:
            _merge_logprobs(acc, i, msg, j)
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
