"""``python -m mtok.bench transport``: mtok's IPC beside pyzmq PUSH/PULL.

    python -m mtok.bench transport [--prompt-tokens 16,512] [--round-trips 2000] [--messages 20000]

Between two processes, with the message a tokenizer worker sends the scheduler
(a ``TokenizedGenerateReqInput``): the latency of one hop (half a round trip,
pickling and unpickling included) and how many messages per second one sender
gets through.  mtok's side is :mod:`mtok.wire.ipc` (``multiprocessing.connection``
over AF_UNIX, authenticated, restricted unpickler); the other is pyzmq's
``send_pyobj``/``recv_pyobj`` over ``ipc://``, measured when pyzmq is installed.
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import shutil
import sys
import tempfile
import time
from typing import Any, Dict, List, Optional

from mtok.wire.io_struct import RpcOutput, SamplingParams, TokenizedGenerateReqInput
from mtok.wire.ipc import Receiver, Sender, dumps

from .report import distribution_ms, table, write_json


class MtokLink:
    """One process's two endpoints on mtok's IPC: a Receiver it owns, a Sender to the other side."""

    name = "mtok.wire.ipc"

    def __init__(self, listen: str, peer: str, authkey: bytes):
        self.receiver = Receiver(listen, authkey)
        self.sender = Sender(peer, authkey)

    def send(self, obj: Any) -> None:
        self.sender.send(obj)

    def recv(self) -> List[Any]:
        while True:
            got = self.receiver.recv_all(None)
            if got:  # [] means a peer joined; keep waiting
                return got

    def close(self) -> None:
        self.sender.close()
        self.receiver.close()


class ZmqLink:
    """The same over pyzmq: a PULL socket bound here, a PUSH socket to the other side."""

    name = "pyzmq"

    def __init__(self, listen: str, peer: str, authkey: bytes):
        import zmq

        self.zmq = zmq
        self.ctx = zmq.Context()
        self.pull = self.ctx.socket(zmq.PULL)
        self.pull.bind(f"ipc://{listen}")
        self.push = self.ctx.socket(zmq.PUSH)
        self.push.connect(f"ipc://{peer}")

    def send(self, obj: Any) -> None:
        self.push.send_pyobj(obj)

    def recv(self) -> List[Any]:
        out = [self.pull.recv_pyobj()]
        while True:
            try:
                out.append(self.pull.recv_pyobj(self.zmq.NOBLOCK))
            except self.zmq.Again:
                return out

    def close(self) -> None:
        self.ctx.destroy(linger=0)


LINKS = {"mtok": MtokLink, "zmq": ZmqLink}


def echo_main(kind: str, listen: str, peer: str, authkey: bytes) -> None:
    """The far side: answer each ping, count everything else until "end"."""
    link = LINKS[kind](listen, peer, authkey)
    link.send(RpcOutput(rid="ready"))
    count = 0
    while True:
        for msg in link.recv():
            if msg.rid == "ping":
                link.send(RpcOutput(rid="pong"))
            elif msg.rid == "end":
                link.send(RpcOutput(rid="count", result=count))
                count = 0
            elif msg.rid == "quit":
                link.close()
                return
            else:
                count += 1


def message(prompt_tokens: int) -> TokenizedGenerateReqInput:
    return TokenizedGenerateReqInput(rid="data", input_ids=list(range(1000, 1000 + prompt_tokens)),
                                     sampling_params=SamplingParams(max_new_tokens=128, stop=["\n\n"]),
                                     stream=True, worker_address="/tmp/mtok-x/worker-0-1a2b3c4d.sock")


def _expect(link: Any, rid: str) -> Any:
    while True:
        for msg in link.recv():
            if msg.rid == rid:
                return msg


def measure(kind: str, prompt_tokens: int, round_trips: int, messages: int) -> Dict[str, Any]:
    workdir = tempfile.mkdtemp(prefix="mtok-bench-ipc-")
    here, there = os.path.join(workdir, "a.sock"), os.path.join(workdir, "b.sock")
    authkey = os.urandom(32)
    link = LINKS[kind](here, there, authkey)
    child = multiprocessing.get_context("spawn").Process(target=echo_main, args=(kind, there, here, authkey),
                                                         daemon=True)
    child.start()
    try:
        _expect(link, "ready")
        ping = message(prompt_tokens)
        ping.rid = "ping"
        hops = []
        for i in range(round_trips + round_trips // 10):
            start = time.perf_counter()
            link.send(ping)
            _expect(link, "pong")
            if i >= round_trips // 10:  # the first tenth warms up
                hops.append((time.perf_counter() - start) / 2)
        data, end = message(prompt_tokens), RpcOutput(rid="end")
        for _ in range(messages // 10):
            link.send(data)
        link.send(end)
        _expect(link, "count")
        start = time.perf_counter()
        for _ in range(messages):
            link.send(data)
        link.send(end)
        got = _expect(link, "count").result
        elapsed = time.perf_counter() - start
        link.send(RpcOutput(rid="quit"))
    finally:
        child.join(5)
        if child.is_alive():
            child.kill()
        link.close()
        shutil.rmtree(workdir, ignore_errors=True)
    lat = distribution_ms(hops) or {}
    return {
        "transport": LINKS[kind].name, "prompt_tokens": prompt_tokens, "message_bytes": len(dumps(data)),
        "hop_us": {k: round(v * 1000, 1) for k, v in lat.items()},
        "messages_per_s": round(got / elapsed), "received": got,
    }


def zmq_available() -> bool:
    try:
        import zmq  # noqa: F401
    except ImportError:
        return False
    return True


COLUMNS = [("transport", "transport"), ("prompt tokens", "prompt_tokens"), ("bytes", "message_bytes"),
           ("hop p50 us", "hop_us.p50"), ("hop p90 us", "hop_us.p90"), ("hop p99 us", "hop_us.p99"),
           ("messages/s", "messages_per_s")]


def main(argv: Optional[List[str]] = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m mtok.bench transport", description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--prompt-tokens", default="16,512", help="message sizes, as prompt token counts")
    parser.add_argument("--round-trips", type=int, default=2000, help="for the latency (default 2000)")
    parser.add_argument("--messages", type=int, default=20000, help="for the throughput (default 20000)")
    parser.add_argument("--json", metavar="OUT")
    args = parser.parse_args(argv)
    kinds = ["mtok"]
    if zmq_available():
        kinds.append("zmq")
    else:
        print("pyzmq: not installed; skipped (pip install pyzmq to compare)", file=sys.stderr)
    rows = [measure(kind, int(n), args.round_trips, args.messages)
            for n in args.prompt_tokens.split(",") for kind in kinds]
    print(table(rows, COLUMNS))
    write_json(args.json, "transport", vars(args), rows)
    return 0
