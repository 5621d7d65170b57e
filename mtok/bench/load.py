"""``python -m mtok.bench load``: drive one server with one workload and report.

    python -m mtok.bench load --endpoint generate --input-len 512 --output-len 1 --concurrency 32 --duration 10
    python -m mtok.bench load --url http://127.0.0.1:30000 --stream --output-len 256 --rate 200
    python -m mtok.bench load --server fastapi --python /work/venv-peers/bin/python --json out.json

Without ``--url`` it starts the server itself (``python -m mtok.serve --port 0``
with the server flags given, or a peer with ``--server``) and stops it at the end.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any, Dict, List, Optional

from .http_client import Target
from .loadgen import run_load
from .natural_text import TEXT_CHOICES
from .report import describe_load, write_json
from .servers import (
    ServerConfig,
    ServerProcess,
    add_server_args,
    discover_root_pid,
    server_config,
    tokenizer_for,
    tree_for,
)
from .workload import ENDPOINTS, Workload, build_plans


def add_workload_args(parser: argparse.ArgumentParser, duration: float = 10.0) -> None:
    g = parser.add_argument_group("workload")
    g.add_argument("--endpoint", choices=[*ENDPOINTS, "mixed"], default="generate",
                   help="/generate, /v1/completions, /tokenize, /v1/chat/completions (chat; chat-tools: a reply with reasoning and a tool call; chat-3turn: a three-turn chat with two tools through --chat-template, whose reply is reasoning, an answer and a call; --input-len and --output-len do not apply), or a mix of the first three with and without streaming")
    g.add_argument("--input-len", type=int, default=128, help="prompt length in tokens (default: %(default)s)")
    g.add_argument("--output-len", type=int, default=16, help="tokens to generate (default: %(default)s)")
    g.add_argument("--prompts", metavar="JSONL", help="prompts from a file instead (a string or "
                   '{"prompt": ..., "output_len": N} per line)')
    g.add_argument("--text", choices=TEXT_CHOICES, default="random",
                   help="what prompts are made of: random word-like tokens (default), natural text in English, "
                   "Korean, code or a mixture, or 'natural': those four in turn")
    g.add_argument("--stream", action="store_true", help="stream the responses (server-sent events)")
    g.add_argument("--concurrency", type=int, default=None,
                   help="requests in flight (default 16); with --rate, the most connections open")
    g.add_argument("--rate", type=float, help="requests/s with Poisson arrivals instead of a fixed concurrency")
    g.add_argument("--duration", type=float, default=duration, help="timed seconds (default: %(default)s)")
    g.add_argument("--requests", type=int, help="a request count instead of a duration")
    g.add_argument("--warmup", type=float, default=1.0, help="seconds of load before the clock starts (default 1)")
    g.add_argument("--clients", type=int, default=0, help="client processes (default: up to 4, one per core)")
    g.add_argument("--pool", type=int, default=256, help="distinct prompts to cycle through (default 256)")
    g.add_argument("--seed", type=int, default=0)
    g.add_argument("--api-key", help="send Authorization: Bearer KEY")
    g.add_argument("--json", metavar="OUT", help="write the results as JSON")
    g.add_argument("--quiet", action="store_true", help="no progress lines on stderr")


def workload_from(args: argparse.Namespace) -> Workload:
    concurrency = args.concurrency or (1024 if args.rate else 16)
    return Workload(
        endpoint=args.endpoint, input_len=args.input_len, output_len=args.output_len, stream=args.stream,
        prompts_file=args.prompts, text=args.text, concurrency=concurrency, rate=args.rate,
        duration=None if args.requests else args.duration, requests=args.requests, warmup=args.warmup,
        clients=args.clients, pool=args.pool, seed=args.seed, chat_template=getattr(args, "chat_template", None),
        headers={"Authorization": f"Bearer {args.api_key}"} if args.api_key else {},
    )


def measure_running(target: Target, workload: Workload, root_pid: Optional[int], tokenizer_path: Optional[str],
                    backend: str = "auto", progress: bool = True) -> Dict[str, Any]:
    """One load run against a server that is already listening at ``target``."""
    tokenizer = tokenizer_for(target, tokenizer_path, backend)
    plans = build_plans(workload, tokenizer, target)
    result = run_load(target, workload, plans, tree_for(root_pid), progress)
    result["mean_prompt_bytes"] = round(sum(p.prompt_bytes for p in plans) / len(plans))
    return result


def measure_started(config: ServerConfig, workload: Workload, progress: bool = True) -> Dict[str, Any]:
    """Start the server ``config`` describes, run ``workload`` against it, stop it."""
    if progress:
        print(f"starting {config.kind} with {config.workers} worker(s) ...", file=sys.stderr, flush=True)
    with ServerProcess(config) as server:
        result = measure_running(server.target, workload, server.pid, config.tokenizer_path,
                                 config.tokenizer_backend, progress)
    result["server"] = config.describe()
    return result


def measure(args: argparse.Namespace, workload: Workload, config: Optional[ServerConfig] = None) -> Dict[str, Any]:
    """Against ``--url`` when given, else against a server started from ``config`` (or the flags)."""
    progress = not getattr(args, "quiet", False)
    if args.url:
        target = Target.from_url(args.url)
        pid = args.server_pid or discover_root_pid(target)
        result = measure_running(target, workload, pid, args.tokenizer_path, args.tokenizer_backend, progress)
        result["server"] = {"url": args.url, "root_pid": pid}
        return result
    return measure_started(config or server_config(args), workload, progress)


def main(argv: Optional[List[str]] = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m mtok.bench load", description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    add_server_args(parser)
    add_workload_args(parser)
    args = parser.parse_args(argv)
    workload = workload_from(args)
    result = measure(args, workload)
    print(describe_load(result))
    write_json(args.json, "load", {"workload": workload.describe()}, result)
    return 1 if result["errors"] and not result["requests"] else 0
