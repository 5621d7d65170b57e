"""The peer's engine process: mtok's echo engine with continuous batching, behind ZMQ.

Each HTTP worker PUSHes ``("generate", rid, ids, max_new_tokens, ignore_eos,
reply_addr)`` or ``("abort", rid)``; every step advances every running request
by one token (the prompt read back, cycling), and each worker gets one message
per step: a list of ``(rid, token, finish_reason, prompt_tokens,
completion_tokens)``.  The same work per step as mtok's scheduler, so the
comparison measures the frontends.
"""

from __future__ import annotations

import argparse
import collections
import os
import time
from typing import Dict, List

import zmq


IDLE_POLL_MS = 1000  # how often an idle engine checks that its server still exists


class Req:
    __slots__ = ("rid", "ids", "max_new", "ignore_eos", "reply", "produced")

    def __init__(self, rid, ids, max_new, ignore_eos, reply):
        self.rid, self.ids, self.max_new, self.ignore_eos, self.reply = rid, ids, max_new, ignore_eos, reply
        self.produced = 0


class EchoEngine:
    def __init__(self, addr: str, step_delay: float, max_running: int, eos_ids: List[int]):
        self.ctx = zmq.Context()
        self.pull = self.ctx.socket(zmq.PULL)
        self.pull.bind(addr)
        self.replies: Dict[str, zmq.Socket] = {}
        self.step_delay = step_delay
        self.max_running = max_running
        self.eos = set(eos_ids)
        self.waiting: "collections.deque[Req]" = collections.deque()
        self.running: List[Req] = []
        self.aborted: set = set()

    def reply_socket(self, addr: str) -> zmq.Socket:
        sock = self.replies.get(addr)
        if sock is None:
            sock = self.replies[addr] = self.ctx.socket(zmq.PUSH)
            sock.connect(addr)
        return sock

    def receive(self, timeout_ms: int) -> None:
        if not self.pull.poll(timeout_ms):
            return
        while True:
            try:
                msg = self.pull.recv_pyobj(zmq.NOBLOCK)
            except zmq.Again:
                return
            if msg[0] == "generate":
                self.waiting.append(Req(*msg[1:]))
            elif msg[0] == "abort":
                self.aborted.add(msg[1])

    def step(self) -> None:
        while self.waiting and len(self.running) < self.max_running:
            self.running.append(self.waiting.popleft())
        out: Dict[str, list] = {}
        still = []
        for r in self.running:
            if r.rid in self.aborted:
                self.aborted.discard(r.rid)
                out.setdefault(r.reply, []).append((r.rid, None, {"type": "abort"}, len(r.ids), r.produced))
                continue
            tok = r.ids[r.produced % len(r.ids)]
            r.produced += 1
            finish = None
            if not r.ignore_eos and tok in self.eos:
                finish = {"type": "stop", "matched": tok}
            elif r.produced >= r.max_new:
                finish = {"type": "length", "length": r.produced}
            out.setdefault(r.reply, []).append((r.rid, tok, finish, len(r.ids), r.produced))
            if finish is None:
                still.append(r)
        self.running = still
        for addr, items in out.items():
            self.reply_socket(addr).send_pyobj(items)

    def run(self) -> None:
        parent = os.getppid()
        next_step = 0.0
        while True:
            busy = bool(self.running or self.waiting)
            wait_s = max(0.0, next_step - time.monotonic()) if busy else None
            self.receive(IDLE_POLL_MS if wait_s is None else int(wait_s * 1000))
            if wait_s is None and os.getppid() != parent:
                return  # the server that started this engine is gone
            if (self.running or self.waiting) and time.monotonic() >= next_step:
                started = time.monotonic()
                self.step()
                next_step = started + self.step_delay


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--addr", required=True)
    p.add_argument("--engine-step-delay", type=float, default=0.0)
    p.add_argument("--max-running-requests", type=int, default=256)
    p.add_argument("--eos-ids", default="")
    a = p.parse_args()
    eos = [int(x) for x in a.eos_ids.split(",") if x]
    EchoEngine(a.addr, a.engine_step_delay, a.max_running_requests, eos).run()


if __name__ == "__main__":
    main()
