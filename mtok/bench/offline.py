"""``python -m mtok.bench offline``: one batch through ``mtok.Engine`` beside the same batch over HTTP.

    python -m mtok.bench offline --batch 10000 --input-len 32 --output-len 8 --concurrency 64

The offline side is one ``Engine.generate`` call with the whole batch; the
HTTP side sends the same prompts (a JSONL file both read) as one ``/generate``
request each, ``--concurrency`` at a time, to ``python -m mtok.serve`` with the
same settings.  Both ignore eos, so every prompt costs the same tokens.
``--rounds`` alternates the two, to spread a noisy machine's drift over both.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from typing import Any, Dict, List, Optional

from ..tokenizer.load import load_tokenizer
from .load import measure_started
from .report import table, write_json
from .servers import ServerConfig
from .workload import PromptMaker, Workload


def make_prompts(path: str, n: int, input_len: int, tokenizer_path: Optional[str], backend: str, seed: int) -> List[str]:
    maker = PromptMaker(load_tokenizer(tokenizer_path, backend), seed)
    prompts = [maker.make(input_len) for _ in range(n)]
    with open(path, "w", encoding="utf-8") as f:
        for p in prompts:
            f.write(json.dumps(p) + "\n")
    return prompts


def run_offline(prompts: List[str], args: argparse.Namespace) -> Dict[str, Any]:
    import mtok

    settings = dict(engine_step_delay=args.engine_step_delay, tokenizer_path=args.tokenizer_path,
                    tokenizer_backend=args.tokenizer_backend, log_level="warning")
    with mtok.Engine(**settings) as engine:
        engine.generate(prompts[:64], {"max_new_tokens": 1})  # warm: caches, connections
        cpu0, t0 = _cpu(), time.perf_counter()
        out = engine.generate(prompts, {"max_new_tokens": args.output_len, "ignore_eos": True})
        wall = time.perf_counter() - t0
        cpu = _cpu() - cpu0
    tokens = sum(o["meta_info"]["completion_tokens"] for o in out)
    return {"mode": "offline (Engine.generate)", "requests": len(out), "seconds": round(wall, 3),
            "requests_per_s": round(len(out) / wall, 1), "output_tokens_per_s": round(tokens / wall, 1),
            "caller_cpu_s": round(cpu, 3)}


def _cpu() -> float:
    t = os.times()
    return t.user + t.system


def run_http(prompts_file: str, n: int, args: argparse.Namespace) -> Dict[str, Any]:
    config = ServerConfig(workers=args.workers, engine_step_delay=args.engine_step_delay,
                          tokenizer_path=args.tokenizer_path, tokenizer_backend=args.tokenizer_backend)
    workload = Workload(endpoint="generate", output_len=args.output_len, prompts_file=prompts_file,
                        concurrency=args.concurrency, duration=None, requests=n, warmup=0.0, pool=n)
    r = measure_started(config, workload, progress=not args.quiet)
    return {"mode": f"HTTP /generate ({args.workers} worker(s), {args.concurrency} in flight)",
            "requests": r["requests"], "errors": r["errors"], "seconds": round(r["requests"] / r["requests_per_s"], 3)
            if r["requests_per_s"] else None, "requests_per_s": r["requests_per_s"],
            "output_tokens_per_s": r["output_tokens_per_s"], "server_cpu_s": r["server_cpu_s"]}


def main(argv: Optional[List[str]] = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m mtok.bench offline", description=__doc__.split("\n\n")[0])
    parser.add_argument("--batch", type=int, default=10000, help="prompts in the batch (default: %(default)s)")
    parser.add_argument("--input-len", type=int, default=32, help="prompt tokens (default: %(default)s)")
    parser.add_argument("--output-len", type=int, default=8, help="tokens generated per prompt (default: %(default)s)")
    parser.add_argument("--concurrency", type=int, default=64, help="HTTP requests in flight (default: %(default)s)")
    parser.add_argument("--workers", type=int, default=1, help="HTTP worker processes (default: %(default)s)")
    parser.add_argument("--engine-step-delay", type=float, default=0.0)
    parser.add_argument("--tokenizer-path")
    parser.add_argument("--tokenizer-backend", choices=("auto", "hf", "python"), default="auto")
    parser.add_argument("--rounds", type=int, default=1, help="alternations of the two (default: %(default)s)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", metavar="OUT", help="write the results as JSON")
    parser.add_argument("--quiet", action="store_true")
    args = parser.parse_args(argv)
    rows: List[Dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="mtok-bench-offline-") as tmp:
        path = os.path.join(tmp, "prompts.jsonl")
        prompts = make_prompts(path, args.batch, args.input_len, args.tokenizer_path, args.tokenizer_backend, args.seed)
        for _ in range(args.rounds):
            rows.append(run_offline(prompts, args))
            rows.append(run_http(path, len(prompts), args))
    best = {m: max(r["requests_per_s"] for r in rows if r["mode"] == m) for m in {r["mode"] for r in rows}}
    offline = max(v for k, v in best.items() if k.startswith("offline"))
    http = max(v for k, v in best.items() if k.startswith("HTTP"))
    print(table(rows, [("mode", "mode"), ("requests", "requests"), ("seconds", "seconds"),
                       ("req/s", "requests_per_s"), ("out tok/s", "output_tokens_per_s")]))
    print(f"offline / HTTP (best of {args.rounds}): {offline / http:.2f}x")
    write_json(args.json, "offline", {k: v for k, v in vars(args).items() if k != "json"},
               {"rows": rows, "offline_over_http": round(offline / http, 3)})
    return 0 if all(not r.get("errors") for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
