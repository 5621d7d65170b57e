"""``python -m mtok.bench compare``: mtok and the FastAPI peer, alternately, on one workload.

    python -m mtok.bench compare --python /work/venv-peers/bin/python --input-len 512 --output-len 1 --rounds 3

Each round starts mtok, runs the workload, stops it, then does the same with
the peer (same worker count, same tokenizer file, same engine step delay), so
that neither server runs while the other is measured and slow drifts of the
machine hit both alike.  The median round of each is compared; the ratio is
mtok / peer (above 1 for throughput means mtok is ahead; below 1 for CPU per
request and latency means mtok is cheaper).  The CPU per request is split by
process too (main, scheduler, detokenizer, each worker; the peer's main, engine
and workers), from the median round of each.  The peer runs under ``--python``,
which must have benchmarks/peers/requirements.txt installed; without it the
comparison is skipped, saying why.

With ``--endpoint chat-3turn`` (a three-turn chat with two tools through
``--chat-template``, see :mod:`.chat_workload`) each server is first asked one
conversation, streamed and not, and the comparison runs only if both give the
same parsed reply (reasoning, content, tool call) and the one the conversation
was written to produce; ``--check-only`` stops after that check.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any, Dict, List, Optional

from . import chat_workload
from .load import add_workload_args, measure, workload_from
from .report import LOAD_COLUMNS, cpu_breakdown, lookup, table, write_json
from .servers import add_server_args, missing_peer, server_config

RATIOS = [
    ("requests_per_s", "req/s"),
    ("output_tokens_per_s", "output tok/s"),
    ("server_cpu_ms_per_request", "CPU ms/request"),
    ("e2e_ms.p50", "e2e p50"),
    ("ttft_ms.p50", "TTFT p50"),
    ("itl_ms.p50", "ITL p50"),
    ("tpot_ms.p50", "TPOT p50"),
]


def median_run(runs: List[Dict[str, Any]], key: str = "requests_per_s") -> Dict[str, Any]:
    """The run whose throughput is the median (a real run, not a blend of several)."""
    ranked = sorted(runs, key=lambda r: r[key])
    return ranked[(len(ranked) - 1) // 2]


def ratios(mine: Dict[str, Any], peer: Dict[str, Any]) -> Dict[str, Optional[float]]:
    out: Dict[str, Optional[float]] = {}
    for key, _ in RATIOS:
        a, b = lookup(mine, key), lookup(peer, key)
        out[key] = round(a / b, 3) if isinstance(a, (int, float)) and isinstance(b, (int, float)) and b else None
    return out


def paired_ratios(mine: List[Dict[str, Any]], peer: List[Dict[str, Any]], key: str) -> Dict[str, Dict[str, float]]:
    """mtok / peer round by round (each pair ran back to back, so a machine whose load
    drifts hits both alike): the median ratio, and the least and greatest, per measure."""
    out: Dict[str, Dict[str, float]] = {}
    for measure in (key, "server_cpu_ms_per_request"):
        each = sorted(a[measure] / b[measure] for a, b in zip(mine, peer)
                      if isinstance(a.get(measure), (int, float)) and b.get(measure))
        if each:
            out[measure] = {"median": round(each[(len(each) - 1) // 2], 3), "min": round(each[0], 3),
                            "max": round(each[-1], 3)}
    return out


def main(argv: Optional[List[str]] = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m mtok.bench compare", description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    add_server_args(parser)
    add_workload_args(parser)
    parser.add_argument("--rounds", type=int, default=3, help="alternations; the median counts (default 3)")
    parser.add_argument("--label", default="", help="a name for this comparison in the output")
    parser.add_argument("--check-only", action="store_true",
                        help="chat-3turn: only check that both servers give the same parsed reply")
    args = parser.parse_args(argv)
    if args.url:
        parser.error("compare starts both servers itself; --url does not apply")
    workload = workload_from(args)
    params = {"workload": workload.describe(), "rounds": args.rounds, "workers": args.workers}
    why = missing_peer(args.python)
    if why:
        print(f"compare: the FastAPI peer is not available, so nothing to compare: {why}", file=sys.stderr)
        write_json(args.json, "compare", params, {"skipped": why})
        return 0
    if workload.endpoint == chat_workload.ENDPOINT:
        check = chat_workload.check([server_config(args, kind=k) for k in ("mtok", "fastapi")], args.chat_template,
                                    args.tokenizer_path, args.tokenizer_backend, args.seed)
        params["check"] = check
        for problem in check["problems"]:
            print(f"compare: {problem}", file=sys.stderr)
        if check["problems"] or args.check_only:
            write_json(args.json, "compare", params, {"check": check})
            print(f"compare: the servers' replies {'differ' if check['problems'] else 'agree'} "
                  f"({check['prompt_tokens']}-token prompt, {check['reply_tokens']}-token reply)")
            return 1 if check["problems"] else 0
    runs: Dict[str, List[Dict[str, Any]]] = {"mtok": [], "fastapi": []}
    for i in range(args.rounds):
        for kind in runs:
            result = measure(args, workload, server_config(args, kind=kind))
            result["label"] = f"{kind} round {i + 1}"
            runs[kind].append(result)
    key = "output_tokens_per_s" if workload.stream else "requests_per_s"
    mine, peer = median_run(runs["mtok"], key), median_run(runs["fastapi"], key)
    summary = {"label": args.label, "mtok": mine, "fastapi": peer, "ratio": ratios(mine, peer),
               "rounds": {k: [r[key] for r in v] for k, v in runs.items()},
               "paired_ratio": paired_ratios(runs["mtok"], runs["fastapi"], key)}
    print(table(runs["mtok"] + runs["fastapi"], LOAD_COLUMNS))
    print(f"\nmedian of {args.rounds} round(s), mtok / fastapi:")
    for k, name in RATIOS:
        if summary["ratio"][k] is not None:
            print(f"  {name:<15} {summary['ratio'][k]:.2f}x   ({_short(lookup(mine, k))} vs {_short(lookup(peer, k))})")
    for k, p in summary["paired_ratio"].items():
        print(f"  paired by round, {k}: median {p['median']:.2f}x (from {p['min']:.2f}x to {p['max']:.2f}x)")
    for kind, run in (("mtok", mine), ("fastapi", peer)):
        if run.get("server_cpu_ms_per_request_by_process"):
            print(f"CPU ms/request by process, {kind}: {cpu_breakdown(run)}")
    write_json(args.json, "compare", params, summary)
    return 0


def _short(v: Any) -> str:
    return f"{v:,.3f}" if isinstance(v, float) and v < 10 else f"{v:,.1f}"
