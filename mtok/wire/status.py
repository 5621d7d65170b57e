"""The status board: a small shared-memory segment every process can read.

The supervisor writes the server's state and who holds each slot; each process
writes its own heartbeat and counters into its slot.  Any worker can then
answer ``/health`` or ``/get_server_info`` for the whole server without a
round trip, and the supervisor spots a wedged worker by its stale heartbeat
(:class:`SilenceWatch`).  Each field has exactly one writer, so no lock is needed.

A field another process reads while it is written (a heartbeat, a count)
goes through a view of the board as 64-bit words: one aligned word is one
load or store.  ``struct.pack_into`` writes a ``Q`` a byte at a time, and a
reader racing it saw heartbeats hours old (or in the future) and blamed a
serving worker for silence it never kept.
"""

from __future__ import annotations

import enum
import os
import struct
import time
from dataclasses import dataclass
from typing import Callable, Dict, List, Optional, Tuple

from .args import SHM_PREFIX, attach_shm, create_shm

_HEADER = struct.Struct("<4sHHBxxxIQ")  # magic, version, nslots, state, restarts, started_ns
_SLOT = struct.Struct("<IBxHQQ128s")  # pid, state, open connections, heartbeat_ns, served, IPC name
_STATE_CONNS = struct.Struct("<BxH")
_BEAT = struct.calcsize("<IBxH")  # where the heartbeat, a word, begins in a slot
_SERVED = _BEAT + 8  # the served count, a word
_NAME = _SERVED + 8
FRESH_HEARTBEAT = 1.0  # seconds: a worker whose heartbeat is older is not counted on to accept
HEADER_SIZE = 64
SLOT_SIZE = 16384  # room after the fixed fields for the process's metrics snapshot
SLOT_EXTRA = SLOT_SIZE - _SLOT.size
_MAGIC = b"MTOK"

SCHEDULER_SLOT = 0
DETOKENIZER_SLOT = 1
FIRST_WORKER_SLOT = 2


class ServerState(enum.IntEnum):
    STARTING = 0
    SERVING = 1
    DEGRADED = 2  # a worker is missing; the rest serve
    STOPPING = 3
    FAILED = 4


class SlotState(enum.IntEnum):
    EMPTY = 0
    BOOTING = 1
    READY = 2
    STOPPING = 3
    DEAD = 4


@dataclass
class SlotInfo:
    index: int
    pid: int
    state: SlotState
    heartbeat_age: float
    served: int
    name: str


def status_shm_name(pid: Optional[int] = None) -> str:
    return f"{SHM_PREFIX}status_{pid or os.getpid()}"


class StatusBoard:
    def __init__(self, shm, nslots: int):
        self.shm = shm
        self.buf = shm.buf
        self.words = shm.buf[: (len(shm.buf) // 8) * 8].cast("Q")  # whole-word reads and writes (see above)
        self.nslots = nslots

    @classmethod
    def create(cls, name: str, nworkers: int) -> "StatusBoard":
        nslots = FIRST_WORKER_SLOT + nworkers
        shm = create_shm(name, HEADER_SIZE + nslots * SLOT_SIZE)
        board = cls(shm, nslots)
        _HEADER.pack_into(board.buf, 0, _MAGIC, 1, nslots, ServerState.STARTING, 0, time.time_ns())
        return board

    @classmethod
    def attach(cls, name: str) -> "StatusBoard":
        shm = attach_shm(name)
        magic, _, nslots, *_ = _HEADER.unpack_from(shm.buf, 0)
        if magic != _MAGIC:
            raise RuntimeError(f"{name} is not an mtok status board")
        return cls(shm, nslots)

    def close(self) -> None:
        self.words.release()
        self.buf = None  # type: ignore[assignment]
        try:
            self.shm.close()
        except BufferError:
            pass

    # -- header ------------------------------------------------------------------
    def _header(self) -> tuple:
        return _HEADER.unpack_from(self.buf, 0)

    @property
    def state(self) -> ServerState:
        return ServerState(self._header()[3])

    @state.setter
    def state(self, value: ServerState) -> None:
        struct.pack_into("<B", self.buf, 8, value)

    @property
    def restarts(self) -> int:
        return self._header()[4]

    def count_restart(self) -> None:
        struct.pack_into("<I", self.buf, 12, self.restarts + 1)

    # -- slots ---------------------------------------------------------------------
    def _offset(self, index: int) -> int:
        if not 0 <= index < self.nslots:
            raise IndexError(index)
        return HEADER_SIZE + index * SLOT_SIZE

    def claim(self, index: int, pid: int, name: str = "", state: SlotState = SlotState.BOOTING) -> None:
        """Give a slot to a new process; its counters start from zero."""
        off = self._offset(index)
        self.words[self._word(index, _BEAT)] = time.monotonic_ns()  # first, and never zero: it may be read meanwhile
        self.buf[off : off + _BEAT] = bytes(_BEAT)
        self.buf[off + _BEAT + 8 : off + SLOT_SIZE] = bytes(SLOT_SIZE - _BEAT - 8)
        struct.pack_into("<IB", self.buf, off, pid, state)
        self.buf[off + _NAME : off + _NAME + 128] = name.encode()[:128].ljust(128, b"\0")

    def set_state(self, index: int, state: SlotState) -> None:
        struct.pack_into("<B", self.buf, self._offset(index) + 4, state)

    def _word(self, index: int, field: int) -> int:
        """Where in ``words`` the word-sized ``field`` (``_BEAT``, ``_SERVED``) of slot ``index`` is."""
        return (self._offset(index) + field) // 8

    def heartbeat(self, index: int) -> None:
        self.words[self._word(index, _BEAT)] = time.monotonic_ns()

    def _beat(self, index: int) -> int:
        return self.words[self._word(index, _BEAT)]

    def last_beat(self, index: int) -> Tuple[int, int]:
        """The slot's (pid, heartbeat_ns): which process, and which beat."""
        return struct.unpack_from("<I", self.buf, self._offset(index))[0], self._beat(index)

    def set_served(self, index: int, n: int) -> None:
        self.words[self._word(index, _SERVED)] = n

    def fewest_connections(self, index: int, n: int) -> bool:
        """Publish that worker ``index`` holds ``n`` open connections, and say
        whether no other live worker (ready, heartbeat fresh) holds fewer."""
        struct.pack_into("<H", self.buf, self._offset(index) + 6, min(n, 0xFFFF))
        now = time.monotonic_ns()
        for i in range(FIRST_WORKER_SLOT, self.nslots):
            off = self._offset(i)
            state, conns = _STATE_CONNS.unpack_from(self.buf, off + 4)
            if conns < n and state == SlotState.READY and now - self._beat(i) < FRESH_HEARTBEAT * 1e9:
                return False
        return True

    def extra(self, index: int) -> memoryview:
        """The slot's free area, for the owning process's own counters."""
        off = self._offset(index) + _SLOT.size
        return self.buf[off : off + SLOT_EXTRA]

    def slot(self, index: int) -> SlotInfo:
        off = self._offset(index)
        pid, state, _, _, _, name = _SLOT.unpack_from(self.buf, off)
        age = (time.monotonic_ns() - self._beat(index)) / 1e9
        served = self.words[self._word(index, _SERVED)]
        return SlotInfo(index, pid, SlotState(state), age, served, name.rstrip(b"\0").decode())

    def failure_message(self) -> str:
        """What a failed server tells its clients: which core process died."""
        for index, role in ((SCHEDULER_SLOT, "scheduler"), (DETOKENIZER_SLOT, "detokenizer")):
            info = self.slot(index)
            if info.state == SlotState.DEAD:
                return f"the {role} (pid {info.pid}) died"
        return "a core process died"

    def worker_slots(self) -> List[SlotInfo]:
        return [self.slot(i) for i in range(FIRST_WORKER_SLOT, self.nslots)]


class SilenceWatch:
    """The supervisor's measure of each worker's silence, on its own passes.

    A heartbeat's age alone blames a worker for time the supervisor itself did
    not run: when the whole process group is stopped (Ctrl-Z, SIGSTOP), a
    sandbox or VM is paused, or the supervisor blocks writing a log line to a
    full pipe, CLOCK_MONOTONIC runs on, and on waking the supervisor found every
    heartbeat old and killed workers that were serving (issue 23: "missed its
    heartbeat for 1165.8 s").  So silence accrues pass by pass, each pass
    counting at most ``stall`` seconds: a worker is given its full timeout again
    after the supervisor was away, and a new beat (or a new process in the
    slot) starts its count from zero.  :meth:`overdue` names each incarnation
    once, so it is logged and killed once, however long its death takes.
    """

    def __init__(self, board: StatusBoard, timeout: float, stall: float = 0.5,
                 clock: Callable[[], float] = time.monotonic):
        self.board, self.timeout, self.stall, self.clock = board, timeout, stall, clock
        self._last_pass: Optional[float] = None
        self._credit = 0.0
        self._seen: Dict[int, Tuple[int, int, float]] = {}  # slot -> (pid, heartbeat_ns, seconds silent)
        self._reported: Dict[int, int] = {}  # slot -> the pid found overdue in it

    def next_pass(self) -> None:
        now = self.clock()
        self._credit = 0.0 if self._last_pass is None else min(now - self._last_pass, self.stall)
        self._last_pass = now

    def silent_for(self, index: int) -> float:
        """Seconds the process in slot ``index`` has not beaten, as this pass sees it."""
        pid, beat = self.board.last_beat(index)
        seen_pid, seen_beat, silent = self._seen.get(index, (-1, -1, 0.0))
        silent = silent + self._credit if (pid, beat) == (seen_pid, seen_beat) else 0.0
        self._seen[index] = (pid, beat, silent)
        return silent

    def overdue(self, index: int) -> Optional[float]:
        """The silence of slot ``index``'s process, the first time it passes the timeout; else None."""
        silent = self.silent_for(index)
        pid = self._seen[index][0]
        if silent <= self.timeout or self._reported.get(index) == pid:
            return None
        self._reported[index] = pid
        return silent
