"""``python -m mtok.bench upstream``: what putting mtok in front of an upstream
engine costs, per request and per streamed token.

It starts an engine host (mtok ``--skip-tokenizer-init``, echo engine, no step
delay: the fastest upstream there is) and a frontend with ``--engine
sglang:URL`` pointing at it, then times the same token-id requests, one at a
time on a kept-alive connection, against the upstream alone and through the
frontend.  The difference is the whole extra tier: the frontend's HTTP
parsing, its scheduler and detokenizer, and the adapter's pooled connection
and stream parsing.  Median of ``--repeat`` runs.
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import statistics
import sys
import time
from typing import Any, Dict, List, Optional

from .servers import READY, ROOT, ReadyProcess


def start(*args: str) -> ReadyProcess:
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    env["PYTHONPATH"] = os.pathsep.join(p for p in (ROOT, env.get("PYTHONPATH")) if p)
    proc = ReadyProcess([sys.executable, "-m", "mtok.serve", "--port", "0", *args], env, "mtok-bench-upstream-")
    m = proc.wait_ready(READY)
    if m is None:
        proc.stop()
        raise RuntimeError(f"server did not start:\n{proc.stderr()[-2000:]}")
    proc.url = m.group(1)  # type: ignore[attr-defined]
    return proc


def timed(conn: http.client.HTTPConnection, body: Dict[str, Any]) -> float:
    t0 = time.perf_counter()
    conn.request("POST", "/generate", body=json.dumps(body), headers={"Content-Type": "application/json"})
    resp = conn.getresponse()
    data = resp.read()
    if resp.status != 200:
        raise RuntimeError(f"{resp.status}: {data[:200]!r}")
    return time.perf_counter() - t0


def measure(url: str, body: Dict[str, Any], repeat: int) -> float:
    host, port = url.split("//")[1].split(":")
    conn = http.client.HTTPConnection(host, int(port), timeout=120)
    try:
        for _ in range(3):
            timed(conn, body)  # warm up
        return statistics.median(timed(conn, body) for _ in range(repeat))
    finally:
        conn.close()


def main(argv: Optional[List[str]] = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m mtok.bench upstream", description=__doc__.split("\n\n")[0])
    ap.add_argument("--repeat", type=int, default=50, help="requests per measurement (default: %(default)s)")
    ap.add_argument("--tokens", type=int, default=512, help="streamed tokens per request (default: %(default)s)")
    args = ap.parse_args(argv)
    upstream = start("--skip-tokenizer-init")
    front: Optional[ReadyProcess] = None
    try:
        front = start("--engine", f"sglang:{upstream.url}")  # type: ignore[attr-defined]
        one = {"input_ids": list(range(5, 69)), "sampling_params": {"max_new_tokens": 1}}
        many = {"input_ids": list(range(5, 69)), "stream": True,
                "sampling_params": {"max_new_tokens": args.tokens, "ignore_eos": True}}
        rows = []
        for name, body, per in (("request, 1 token", one, 1), (f"stream, {args.tokens} tokens", many, args.tokens)):
            direct = measure(upstream.url, body, args.repeat)  # type: ignore[attr-defined]
            via = measure(front.url, body, args.repeat)  # type: ignore[attr-defined]
            rows.append((name, direct, via, (via - direct) / per))
        print(f"{'':<22}{'upstream alone':>16}{'through mtok':>16}{'added':>14}")
        for name, direct, via, added in rows:
            unit = "per request" if "request" in name else "per token"
            print(f"{name:<22}{direct * 1e3:>13.2f} ms{via * 1e3:>13.2f} ms{added * 1e6:>8.0f} us {unit}")
        return 0
    finally:
        if front is not None:
            front.stop()
        upstream.stop()
