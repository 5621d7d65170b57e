"""The load generator: client processes that keep a server busy and time every request.

Each client process runs one selector loop over its keep-alive connections
(:mod:`.http_client`), so a few processes hold hundreds of requests in flight
without a thread each.  With a fixed concurrency every connection sends its
next request as soon as the last one is answered; with a rate, arrivals are
Poisson and a request's latency counts from when it *should* have been sent,
so a slow server cannot hide its backlog (coordinated omission).

The clock is shared: the parent picks the start, the end of the warm-up and the
end, all on CLOCK_MONOTONIC (system-wide on Linux).  Only requests answered
inside the timed window count, and the parent samples the server's CPU time at
the window's edges.
"""

from __future__ import annotations

import json
import multiprocessing
import multiprocessing.connection
import os
import random
import selectors
import sys
import time
from array import array
from dataclasses import dataclass
from typing import Any, Dict, List, Optional, Tuple

from .http_client import Connection, Response, Target
from .procstat import ProcessTree, cpu_delta
from .report import summarize
from .workload import Plan, Workload

DRAIN_S = 5.0  # after the end, how long in-flight requests may take to finish
MAX_ERROR_SAMPLES = 5


@dataclass
class ClientSpec:
    index: int
    clients: int
    target: Target
    plans: List[Plan]
    connections: int  # concurrency mode: this many, always busy
    rate: Optional[float]  # rate mode: this process's share of the arrivals
    max_connections: int
    share: Optional[int]  # count mode: measured requests this process sends
    seed: int


class Records:
    """Per-request measurements, as compact arrays (they cross a pipe at the end)."""

    def __init__(self) -> None:
        self.start, self.end, self.ttft = array("d"), array("d"), array("d")
        self.input_tokens, self.output_tokens = array("l"), array("l")
        self.itl, self.tpot = array("d"), array("d")
        self.errors = 0
        self.error_samples: List[str] = []

    def add(self, start: float, end: float, resp: Response, plan: Plan) -> None:
        usage = _usage(resp.body)
        if usage is None or resp.status != 200:
            self.error(f"HTTP {resp.status}: {resp.body[:200]!r}")
            return
        n_in, n_out = usage
        events = resp.events
        if events and resp.last_events and _is_usage_only(resp.last_events[-1]):
            events = events[:-1]
        self.start.append(start)
        self.end.append(end)
        self.ttft.append(events[0] - start if events else -1.0)
        self.itl.extend(b - a for a, b in zip(events, events[1:]))
        self.input_tokens.append(plan.input_tokens if n_in is None else n_in)
        n_out = plan.output_tokens if n_out is None else n_out
        self.output_tokens.append(n_out)
        if len(events) > 1 and n_out > 1:  # per token, however many tokens each event carried
            self.tpot.append((events[-1] - events[0]) / (n_out - 1))

    def error(self, what: str) -> None:
        self.errors += 1
        if len(self.error_samples) < MAX_ERROR_SAMPLES and what not in self.error_samples:
            self.error_samples.append(what)

    def merge(self, other: "Records") -> None:
        for name in ("start", "end", "ttft", "input_tokens", "output_tokens", "itl", "tpot"):
            getattr(self, name).extend(getattr(other, name))
        self.errors += other.errors
        for e in other.error_samples:
            if len(self.error_samples) < MAX_ERROR_SAMPLES and e not in self.error_samples:
                self.error_samples.append(e)


def _usage(body: bytes) -> Optional[Tuple[Optional[int], Optional[int]]]:
    """(prompt tokens, completion tokens) from any endpoint's answer; None for an error."""
    try:
        obj = json.loads(body.rsplit(b"\n", 1)[-1]) if body else None
    except ValueError:
        return None
    if isinstance(obj, list) and obj:
        obj = obj[-1]
    if not isinstance(obj, dict) or "error" in obj:
        return None
    info = obj.get("meta_info") or obj.get("usage")
    if isinstance(info, dict):
        return info.get("prompt_tokens"), info.get("completion_tokens")
    if "count" in obj:
        return obj["count"], 0
    return None, None


def _is_usage_only(payload: bytes) -> bool:
    return b'"choices"' in payload and b'"usage"' in payload and b'"text"' not in payload


class ClientLoop:
    """One client process: its connections, its arrivals, its records."""

    def __init__(self, spec: ClientSpec, progress: Any):
        self.spec = spec
        self.progress = progress  # shared counters: [done, errors] per client
        self.sel = selectors.DefaultSelector()
        self.conns: List[Connection] = []
        self.idle: List[Connection] = []
        self.records = Records()
        self.next_plan = spec.index
        self.backlog: List[float] = []  # rate mode: arrivals waiting for a connection
        self.rnd = random.Random(spec.seed * 1000 + spec.index)
        self.in_flight = 0
        self.measured_started = 0

    def open(self, n: int) -> None:
        for _ in range(n):
            conn = Connection(self.spec.target)
            self.conns.append(conn)
            self.idle.append(conn)
            self.sel.register(conn.sock, selectors.EVENT_READ, conn)

    def _drop(self, conn: Connection) -> None:
        try:
            self.sel.unregister(conn.sock)
        except (KeyError, ValueError):
            pass
        conn.close()
        self.conns.remove(conn)
        if conn in self.idle:
            self.idle.remove(conn)

    def _connection(self) -> Optional[Connection]:
        if self.idle:
            return self.idle.pop()
        if self.spec.rate is not None and len(self.conns) < self.spec.max_connections:
            self.open(1)
            return self.idle.pop()
        return None

    def _send(self, conn: Connection, started: float) -> None:
        plan = self.spec.plans[self.next_plan % len(self.spec.plans)]
        self.next_plan += self.spec.clients
        try:
            conn.send(plan.request, started, plan)
        except OSError as e:
            self.records.error(f"send: {type(e).__name__}: {e}")
            self._drop(conn)
            self.progress[2 * self.spec.index + 1] += 1
            return
        self.in_flight += 1

    def _may_start(self, started: float, warm_end: float) -> bool:
        if self.spec.share is None or started < warm_end:
            return True
        if self.measured_started >= self.spec.share:
            return False
        self.measured_started += 1
        return True

    def _issue(self, now: float, warm_end: float, stop_at: float) -> None:
        if now >= stop_at:
            return
        if self.spec.rate is None:
            if len(self.conns) < self.spec.connections:
                self.open(self.spec.connections - len(self.conns))  # replace dropped ones
            while self.idle and self._may_start(now, warm_end):
                self._send(self.idle.pop(), now)
            return
        while self.backlog and self.backlog[0] <= now:
            conn = self._connection()
            if conn is None:
                break
            due = self.backlog.pop(0)
            if self._may_start(due, warm_end):
                self._send(conn, due)
            else:
                self.idle.append(conn)
                self.backlog.clear()

    def run(self, t0: float, warm_end: float, end: Optional[float]) -> Records:
        stop_at = end if end is not None else float("inf")
        next_arrival = t0
        while True:
            now = time.monotonic()
            finished = self.spec.share is not None and self.measured_started >= self.spec.share
            if self.spec.rate is not None and now < stop_at and not finished:
                while next_arrival <= now:
                    self.backlog.append(next_arrival)
                    next_arrival += self.rnd.expovariate(self.spec.rate)
            try:
                self._issue(now, warm_end, stop_at)
            except OSError as e:  # cannot (re)connect: count it, try again on the next turn
                self.records.error(f"connect: {type(e).__name__}: {e}")
                self.progress[2 * self.spec.index + 1] += 1
            if self.in_flight == 0 and (now >= stop_at or finished):
                break
            if now >= stop_at + DRAIN_S:
                break
            timeout = 0.05 if self.spec.rate is None else max(0.0, min(0.05, next_arrival - now))
            for key, _ in self.sel.select(timeout):
                self._on_readable(key.data, warm_end, end)
        for conn in list(self.conns):
            self._drop(conn)
        return self.records

    def _on_readable(self, conn: Connection, warm_end: float, end: Optional[float]) -> None:
        now = time.monotonic()
        was_busy = conn.busy
        try:
            resp = conn.on_readable(now)
        except (OSError, ValueError) as e:
            if was_busy:
                self.in_flight -= 1
                self.records.error(f"{type(e).__name__}: {e}")
                self.progress[2 * self.spec.index + 1] += 1
            self._drop(conn)
            return
        if resp is None:
            return
        self.in_flight -= 1
        self.progress[2 * self.spec.index] += 1
        counted = conn.started >= warm_end if self.spec.share is not None else now >= warm_end
        if counted and (end is None or now <= end):
            before = self.records.errors
            self.records.add(conn.started, now, resp, conn.plan)  # type: ignore[arg-type]
            if self.records.errors > before:
                self.progress[2 * self.spec.index + 1] += 1
        if conn.close_after:
            self._drop(conn)
        else:
            self.idle.append(conn)


def client_main(spec: ClientSpec, pipe: Any, progress: Any) -> None:
    """A client process: connect, report ready, wait for the clock, run, send the records."""
    loop = ClientLoop(spec, progress)
    try:
        loop.open(spec.connections)
    except OSError as e:
        pipe.send(("error", f"cannot connect to {spec.target.url}: {e}"))
        return
    pipe.send(("ready", None))
    t0, warm_end, end = pipe.recv()
    cpu0, wall0 = time.process_time(), time.monotonic()
    records = loop.run(t0, warm_end, end)
    answered = progress[2 * spec.index]  # warm-up and drain included, like the CPU time
    pipe.send(("done", (records, time.process_time() - cpu0, time.monotonic() - wall0, answered)))


def _split(total: int, parts: int, i: int) -> int:
    return total // parts + (1 if i < total % parts else 0)


class Progress:
    """Prints a line to stderr about once a second while the clients run."""

    def __init__(self, counters: Any, enabled: bool):
        self.counters = counters
        self.enabled = enabled
        self.t0 = time.monotonic()
        self.last = (self.t0, 0)

    def tick(self, phase: str) -> None:
        if not self.enabled:
            return
        now = time.monotonic()
        done, errors = sum(self.counters[0::2]), sum(self.counters[1::2])
        rate = (done - self.last[1]) / max(1e-9, now - self.last[0])
        self.last = (now, done)
        print(f"  [{now - self.t0:6.1f}s] {phase:<7} {done:>8} answered  {rate:>9.1f} req/s  {errors} errors",
              file=sys.stderr, flush=True)


def run_load(target: Target, workload: Workload, plans: List[Plan], tree: Optional[ProcessTree] = None,
             progress: bool = True) -> Dict[str, Any]:
    """Drive ``target`` with ``workload``; the summary of the timed window."""
    ctx = multiprocessing.get_context("spawn")
    n = workload.client_count(os.cpu_count() or 1)
    if workload.rate is None:
        n = min(n, workload.concurrency)
    counters = ctx.Array("l", 2 * n, lock=False)
    procs, pipes = [], []
    for i in range(n):
        spec = ClientSpec(
            index=i, clients=n, target=target, plans=plans,
            connections=_split(workload.concurrency, n, i) if workload.rate is None else 0,
            rate=workload.rate / n if workload.rate is not None else None,
            max_connections=max(1, _split(workload.concurrency, n, i)) if workload.rate is not None else 0,
            share=_split(workload.requests, n, i) if workload.requests is not None else None,
            seed=workload.seed,
        )
        parent, child = ctx.Pipe()
        proc = ctx.Process(target=client_main, args=(spec, child, counters), name=f"mtok-bench-client-{i}",
                           daemon=True)
        proc.start()
        child.close()
        procs.append(proc)
        pipes.append(parent)
    try:
        return _drive(workload, pipes, counters, tree, progress)
    finally:
        for p in procs:
            p.join(DRAIN_S + 5)
            if p.is_alive():
                p.kill()


def _drive(workload: Workload, pipes: List[Any], counters: Any, tree: Optional[ProcessTree],
           progress: bool) -> Dict[str, Any]:
    for p in pipes:
        kind, detail = p.recv()
        if kind == "error":
            raise ConnectionError(detail)
    t0 = time.monotonic() + 0.05
    warm_end = t0 + workload.warmup
    end = warm_end + workload.duration if workload.requests is None else None
    for p in pipes:
        p.send((t0, warm_end, end))
    show = Progress(counters, progress)
    _sleep_until(warm_end, lambda: show.tick("warm-up"))
    cpu0 = tree.cpu_by_role() if tree else None
    if end is not None:
        _sleep_until(end, lambda: show.tick("run"))
        cpu1 = tree.cpu_by_role() if tree else None
        window = end - warm_end
    results = []
    pending = list(pipes)
    while pending:
        ready = multiprocessing.connection.wait(pending, 1.0)
        for p in ready:
            results.append(p.recv()[1])
            pending.remove(p)
        if not ready:
            show.tick("run" if end is None or time.monotonic() < end else "drain")
    records, client = Records(), ClientCost()
    for rec, cpu, wall, answered in results:
        records.merge(rec)
        client.add(cpu, wall, answered)
    if end is None:
        cpu1 = tree.cpu_by_role() if tree else None
        window = (max(records.end) if len(records.end) else time.monotonic()) - warm_end
    show.tick("done")
    by_role = None if cpu0 is None or cpu1 is None else cpu_delta(cpu0, cpu1)
    return summarize(records, window, by_role, client)


class ClientCost:
    """The client processes' own CPU: per request, and as cores kept busy."""

    def __init__(self) -> None:
        self.cpu = self.cores = 0.0
        self.answered = 0

    def add(self, cpu: float, wall: float, answered: int) -> None:
        self.cpu += cpu
        self.cores += cpu / max(wall, 1e-9)
        self.answered += answered

    @property
    def ms_per_request(self) -> Optional[float]:
        return round(1000 * self.cpu / self.answered, 4) if self.answered else None


def _sleep_until(deadline: float, tick: Any) -> None:
    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            return
        time.sleep(min(1.0, left))  # a clock, not synchronisation
        if time.monotonic() < deadline:
            tick()
