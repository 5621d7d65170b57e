"""``python -m mtok.bench soak``: a long mixed load, watching the server's memory and files.

    python -m mtok.bench soak --duration 600 --tokenizer-worker-num 2 --json soak.json

Sends a mix of every request kind (``/generate`` and ``/v1/completions``, each
streamed and not, and ``/tokenize``) for ``--duration`` seconds, and every
``--interval`` seconds records the resident memory, open file descriptors,
threads and processes of the whole server tree.  A server that leaks shows it as
a slope; the summary gives the growth from the first sample after the warm-up
to the last, and the state once the load has stopped.
"""

from __future__ import annotations

import argparse
import sys
import threading
import time
from typing import Any, Dict, List, Optional

from .http_client import Target
from .load import add_workload_args, measure_running, workload_from
from .procstat import ProcessTree, TreeSample
from .report import describe_load, table, write_json
from .servers import ServerProcess, add_server_args, discover_root_pid, server_config
from .svg import Chart, nice_ceiling


def _row(t: float, s: TreeSample) -> Dict[str, Any]:
    return {"t_s": round(t, 1), "rss_mb": round(s.rss_bytes / 2**20, 1), "open_fds": s.open_fds,
            "threads": s.threads, "processes": len(s.pids)}


def soak(target: Target, tree: ProcessTree, args: argparse.Namespace) -> Dict[str, Any]:
    workload = workload_from(args)
    samples: List[Dict[str, Any]] = []
    outcome: Dict[str, Any] = {}

    def load() -> None:
        try:
            outcome["load"] = measure_running(target, workload, tree.root, args.tokenizer_path,
                                              args.tokenizer_backend, progress=not args.quiet)
        except Exception as e:  # reported below, with the samples taken so far
            outcome["error"] = f"{type(e).__name__}: {e}"

    start = time.monotonic()
    runner = threading.Thread(target=load, name="soak-load")
    runner.start()
    while runner.is_alive():
        samples.append(_row(time.monotonic() - start, tree.sample()))
        runner.join(args.interval)
    time.sleep(1.0)  # let the server settle once the clients are gone
    after = _row(time.monotonic() - start, tree.sample())
    steady = [s for s in samples if s["t_s"] >= args.warmup + 1] or samples
    result: Dict[str, Any] = {
        "samples": samples,
        "after_load": after,
        "rss_mb_growth": round(steady[-1]["rss_mb"] - steady[0]["rss_mb"], 1) if steady else None,
        "rss_mb_max": max((s["rss_mb"] for s in samples), default=None),
        "open_fds_max": max((s["open_fds"] for s in samples), default=None),
        "open_fds_first_last": [steady[0]["open_fds"], steady[-1]["open_fds"]] if steady else None,
    }
    result.update(outcome)
    return result


def draw(result: Dict[str, Any], path: str) -> None:
    samples = result["samples"]
    end = samples[-1]["t_s"] if samples else 1.0
    step = nice_ceiling(end / 6)
    chart = Chart("server memory under a mixed load", "seconds", "MB resident (all processes)",
                  x_ticks=[step * i for i in range(int(end // step) + 1)])
    chart.add("RSS", [(s["t_s"], s["rss_mb"]) for s in samples])
    chart.write(path)


def main(argv: Optional[List[str]] = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m mtok.bench soak", description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    add_server_args(parser)
    add_workload_args(parser, duration=600.0)
    parser.add_argument("--interval", type=float, default=5.0, help="seconds between samples (default 5)")
    parser.add_argument("--svg", metavar="OUT", help="draw the server's memory over time as an SVG file")
    parser.set_defaults(endpoint="mixed", input_len=64, output_len=32, concurrency=32)
    args = parser.parse_args(argv)
    if args.url:
        target = Target.from_url(args.url)
        pid = args.server_pid or discover_root_pid(target)
        if pid is None:
            parser.error("soak needs the server's pid (--server-pid), on this machine")
        result = soak(target, ProcessTree(pid), args)
    else:
        with ServerProcess(server_config(args)) as server:
            result = soak(server.target, ProcessTree(server.pid), args)
    print(table(result["samples"] + [dict(result["after_load"], t_s="after")],
                [("t s", "t_s"), ("RSS MB", "rss_mb"), ("open fds", "open_fds"), ("threads", "threads"),
                 ("processes", "processes")]))
    print(f"RSS growth after warm-up: {result['rss_mb_growth']} MB; open fds first/last: "
          f"{result['open_fds_first_last']}")
    if "load" in result:
        print(describe_load(result["load"]))
    else:
        print(f"the load failed: {result.get('error')}", file=sys.stderr)
    if args.svg:
        draw(result, args.svg)
    write_json(args.json, "soak", {"workload": workload_from(args).describe(), "interval": args.interval}, result)
    return 0 if "load" in result and not result["load"]["errors"] else 1
