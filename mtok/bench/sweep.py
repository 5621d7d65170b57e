"""``python -m mtok.bench sweep``: throughput against the worker count, and its curve.

    python -m mtok.bench sweep --max-workers 8 --input-len 512 --output-len 1 --svg scaling.svg
    python -m mtok.bench sweep --workers-list 1,2 --with-peer --python /work/venv-peers/bin/python

Starts the server once per N = 1, 2, 4, ... up to ``--max-workers`` (default:
the number of cores), runs the same workload against each, prints the table and
draws the curve (with the ideal N-times-one-worker line) as an SVG file.
"""

from __future__ import annotations

import argparse
import os
import sys
from typing import Any, Dict, List, Optional

from .load import add_workload_args, measure, workload_from
from .report import LOAD_COLUMNS, table, write_json
from .servers import add_server_args, missing_peer, server_config
from .svg import Chart

METRICS = {"requests_per_s": "requests/s", "output_tokens_per_s": "output tokens/s",
           "input_tokens_per_s": "input tokens/s"}


def worker_counts(max_workers: int) -> List[int]:
    counts, n = [], 1
    while n < max_workers:
        counts.append(n)
        n *= 2
    return counts + [max_workers]


def draw(rows: List[Dict[str, Any]], metric: str, title: str, path: str) -> None:
    chart = Chart(title, "worker processes (N)", METRICS[metric], x_ticks=sorted({r["workers"] for r in rows}))
    for kind in dict.fromkeys(r["server_kind"] for r in rows):
        points = [(r["workers"], r[metric]) for r in rows if r["server_kind"] == kind]
        chart.add(kind, points)
        base = dict(points).get(1)
        if base and kind == rows[0]["server_kind"]:
            chart.add(f"{kind}, linear", [(n, base * n) for n, _ in points], dashed=True)
    chart.write(path)


def main(argv: Optional[List[str]] = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m mtok.bench sweep", description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    add_server_args(parser, workers=False)
    add_workload_args(parser)
    g = parser.add_argument_group("sweep")
    g.add_argument("--max-workers", type=int, default=os.cpu_count() or 1, help="largest N (default: cores)")
    g.add_argument("--workers-list", help="the worker counts, e.g. 1,2,3 (instead of powers of two)")
    g.add_argument("--with-peer", action="store_true", help="also sweep the FastAPI peer (uvicorn --workers N)")
    g.add_argument("--metric", choices=METRICS, help="what the curve shows (default: output tokens/s when "
                   "streaming, else requests/s)")
    g.add_argument("--svg", metavar="OUT", help="write the curve as an SVG file")
    g.add_argument("--title", help="the chart's title")
    args = parser.parse_args(argv)
    if args.url:
        parser.error("sweep starts its own servers; --url does not apply")
    counts = [int(x) for x in args.workers_list.split(",")] if args.workers_list else worker_counts(args.max_workers)
    kinds = [args.server]
    if args.with_peer and args.server != "fastapi":
        why = missing_peer(args.python)
        if why:
            print(f"peer skipped: {why}", file=sys.stderr)
        else:
            kinds.append("fastapi")
    workload = workload_from(args)
    metric = args.metric or ("output_tokens_per_s" if args.stream else "requests_per_s")
    rows = []
    for n in counts:
        for kind in kinds:
            result = measure(args, workload, server_config(args, kind=kind, workers=n))
            result.update(label=f"{kind} N={n}", server_kind=kind, workers=n)
            base = next((r for r in rows if r["server_kind"] == kind and r["workers"] == 1), None)
            result["speedup"] = round(result[metric] / base[metric], 3) if base and base[metric] else None
            rows.append(result)
    print(table(rows, LOAD_COLUMNS + [("speedup", "speedup")]))
    if args.svg:
        draw(rows, metric, args.title or f"{workload.endpoint}: {METRICS[metric]} by worker count", args.svg)
        print(f"wrote {args.svg}")
    write_json(args.json, "sweep", {"workload": workload.describe(), "workers": counts, "metric": metric}, rows)
    return 0
