"""What a server costs the machine, read from ``/proc``: CPU time, memory, open files.

A server is a tree of processes (mtok: the supervisor, the scheduler, the
detokenizer, N workers; a uvicorn app: its supervisor, workers, an engine), so
every figure is summed over a root process and all its live descendants.

CPU time is ``utime + stime + cutime + cstime`` summed over the tree.  The
difference of two samples is then exact even when processes come and go in
between: a process born in the window counts in full, and one that died and was
reaped moves its time into its parent's ``cutime``.

:meth:`ProcessTree.cpu_by_role` splits the same total by process: each is named
by its role (mtok's processes name themselves ``mtok:<role>``; the peer's are
told apart by their command lines), so a benchmark can say which process a
request's CPU went to.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Dict, List, Optional, Tuple

CLK_TCK = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
PAGE_SIZE = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096


def _stat_fields(pid: int) -> Optional[List[str]]:
    """The fields of /proc/<pid>/stat after the command name (field 3 onwards)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            raw = f.read()
    except OSError:
        return None
    return raw[raw.rindex(b")") + 2:].decode().split()


def parent_map() -> Dict[int, List[int]]:
    """ppid -> the pids of its live children, for every process on the machine."""
    children: Dict[int, List[int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            fields = _stat_fields(int(entry))
            if fields is not None and fields[0] != "Z":
                children.setdefault(int(fields[1]), []).append(int(entry))
    return children


def parent_of(pid: int) -> Optional[int]:
    fields = _stat_fields(pid)
    return int(fields[1]) if fields else None


def proc_available() -> bool:
    return os.path.isfile("/proc/self/stat")


@dataclass
class TreeSample:
    """One look at a process tree."""

    pids: List[int]
    cpu_s: float
    rss_bytes: int
    open_fds: int
    threads: int


class ProcessTree:
    """A root pid and whatever descends from it, sampled on demand."""

    def __init__(self, root: int):
        self.root = root

    def pids(self) -> List[int]:
        if _stat_fields(self.root) is None:
            return []
        children = parent_map()
        out, todo = [self.root], [self.root]
        while todo:
            for child in children.get(todo.pop(), ()):
                out.append(child)
                todo.append(child)
        return out

    def cpu_seconds(self) -> float:
        return sum(_cpu_ticks(pid) for pid in self.pids()) / CLK_TCK

    def cpu_by_role(self) -> Dict[str, float]:
        """CPU seconds of each process of the tree, keyed by its role (see :func:`role_of`)."""
        out: Dict[str, float] = {}
        seen: Dict[str, int] = {}
        for pid in sorted(self.pids()):
            role = role_of(pid, self.root)
            if role in ("worker", "process"):  # unnamed: numbered in pid order
                seen[role] = seen.get(role, -1) + 1
                role = f"{role}-{seen[role]}"
            out[role] = out.get(role, 0.0) + _cpu_ticks(pid) / CLK_TCK
        return out

    def sample(self) -> TreeSample:
        """CPU, resident memory, open file descriptors and threads of the whole tree."""
        pids = self.pids()
        ticks = rss = fds = threads = 0
        for pid in pids:
            ticks += _cpu_ticks(pid)
            r, t = _rss_and_threads(pid)
            rss += r
            threads += t
            fds += _open_fds(pid)
        return TreeSample(pids, ticks / CLK_TCK, rss, fds, threads)


def _cpu_ticks(pid: int) -> int:
    fields = _stat_fields(pid)
    if fields is None:
        return 0
    # utime, stime, cutime, cstime are fields 14-17 of stat; fields[0] is field 3
    return sum(int(x) for x in fields[11:15])


def _rss_and_threads(pid: int) -> Tuple[int, int]:
    fields = _stat_fields(pid)
    if fields is None:
        return 0, 0
    # num_threads is field 20, rss (in pages) field 24
    return int(fields[21]) * PAGE_SIZE, int(fields[17])


def _open_fds(pid: int) -> int:
    try:
        return len(os.listdir(f"/proc/{pid}/fd"))
    except OSError:
        return 0  # gone, or not ours to look at


def _cmdline(pid: int) -> List[str]:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read().decode(errors="replace").split("\0")
    except OSError:
        return []


def _comm(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/comm", "rb") as f:
            return f.read().decode(errors="replace").strip()
    except OSError:
        return ""


MTOK_ROLES = ("scheduler", "detokenizer")  # names longer than a process title holds


def role_of(pid: int, root: int) -> str:
    """What one process of a server does: ``main`` (the root; mtok's supervisor and
    router, and the HTTP server too at N = 1), the role an mtok process named itself
    (``scheduler``, ``detokenizer``, ``worker-0``...), the title a vLLM process gave
    itself (``EngineCore``, ``Worker``), or for the peer ``engine`` and ``worker``
    (uvicorn's spawned workers; the caller numbers them)."""
    if pid == root:
        return "main"
    comm = _comm(pid)
    if comm.startswith("mtok:"):  # the kernel keeps 15 bytes of a name: "mtok:detokenize"
        role = comm[len("mtok:"):]
        return next((r for r in MTOK_ROLES if r.startswith(role)), role)
    cmd = " ".join(_cmdline(pid))
    if cmd.startswith("VLLM::"):  # vLLM titles its engine process "VLLM::EngineCore"
        return cmd.split()[0][len("VLLM::"):]
    if "echo_engine" in cmd:
        return "engine"
    if "resource_tracker" in cmd:
        return "resource-tracker"
    if "spawn_main" in cmd or "multiprocessing" in cmd:
        return "worker"
    return "process"


def cpu_delta(before: Dict[str, float], after: Dict[str, float]) -> Dict[str, float]:
    """CPU seconds each role spent between two :meth:`ProcessTree.cpu_by_role` samples
    (a role born in between counts in full)."""
    return {role: after[role] - before.get(role, 0.0) for role in after}
