"""``python -m mtok.bench vllm-frontend``: mtok in front of a real vLLM, against vLLM's own frontend.

    python -m mtok.bench vllm-frontend --venv /tmp/vllm-venv --model /tmp/tiny-llama --json out.json

vLLM's API server does a frontend's work in the engine's own deployment:
tokenizing, the chat template, detokenizing, the OpenAI shapes.  mtok's place
is to do that work instead, in front of ``vllm --skip-tokenizer-init
--enable-scale-out``, whose token route (``/inference/v1/generate``) takes and
gives ids only.  So one run boots the same model twice, side by side (the
scripts/real_vllm.py engines, about 3.5 GiB each): plain, and ids-only; and
sends the same requests, streamed, from the bench's load generator to

- ``vllm``: vLLM's own ``/v1/completions`` and ``/v1/chat/completions`` on the plain engine;
- ``mtok N=1``, ``mtok N=2``: mtok (``--engine vllm:URL``) before the ids-only engine.

Two workloads: ~2 KB completions (``--input-len`` tokens of the model's
tokenizer) and three-turn chats (:func:`.chat_workload.conversation`'s messages,
without tools) through the model's chat template; short greedy replies
(``--output-len``, ``ignore_eos``).  Before anything is timed each target
answers a few of the requests unstreamed, one at a time, and the run stops
unless every answer is the same text as vLLM's own.

The CPU is read per process from ``/proc`` over the timed window, on every
tree that serves the requests: in ``vllm``, the API server and the engine (its
EngineCore and whatever that spawns); behind mtok, each mtok process (main,
workers, scheduler, detokenizer) and the ids-only vLLM's API server and engine.
The figure this bench exists for is the *frontend's* CPU per request: mtok's
processes together against vLLM's API server doing the same work.  vLLM's API
server behind mtok is still busy (HTTP, the token route's stream), so the
total outside the engine is given too.  Rounds alternate the targets (the
median round counts), so a drifting machine load hits each alike.

vLLM is no dependency: it lives in its own venv (``scripts/real_vllm.py
install``), named by ``--venv`` or ``MTOK_VLLM_VENV``; without one the bench
says why and writes that to ``--json``.
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import random
import statistics
import sys
import tempfile
from typing import Any, Dict, List, Optional, Tuple

from . import chat_workload
from .http_client import Target, build_request
from .loadgen import run_load
from .natural_text import TEXT_CHOICES
from .procstat import ProcessTree
from .report import table, write_json
from .servers import ROOT, ServerConfig, ServerProcess
from .workload import Plan, Workload, prompt_maker, request_body

MODEL = "tiny-llama"  # the name scripts/real_vllm.py serves it under
WORKLOADS = {"completions": "/v1/completions", "chat": "/v1/chat/completions"}
COLUMNS = [
    ("target", "target"), ("workload", "workload"), ("req/s", "requests_per_s"),
    ("out tok/s", "output_tokens_per_s"), ("TTFT p50", "ttft_ms.p50"), ("e2e p50", "e2e_ms.p50"),
    ("e2e p99", "e2e_ms.p99"), ("frontend ms/req", "cpu.frontend"), ("mtok ms/req", "cpu.mtok"),
    ("vLLM API ms/req", "cpu.vllm_api_server"), ("engine ms/req", "cpu.vllm_engine"), ("errors", "errors"),
]


def real_vllm_module() -> Any:
    """scripts/real_vllm.py (a checkout's, like the FastAPI peer: not in the installed package)."""
    scripts = os.path.join(ROOT, "scripts")
    if not os.path.isfile(os.path.join(scripts, "real_vllm.py")):
        return None
    sys.path.insert(0, scripts)
    import real_vllm  # type: ignore

    return real_vllm


# -- the CPU of several process trees, read as one -------------------------------------------------

class Trees:
    """The trees serving a target, sampled together: roles named ``mtok <role>`` or
    ``vllm <role>``, vLLM's root process being its ``api-server``."""

    def __init__(self, **trees: ProcessTree):
        self.trees = trees

    def cpu_by_role(self) -> Dict[str, float]:
        out: Dict[str, float] = {}
        for name, tree in self.trees.items():
            for role, seconds in tree.cpu_by_role().items():
                if name == "vllm" and role == "main":
                    role = "api-server"
                out[f"{name} {role}"] = seconds
        return out


def cpu_split(by_process: Optional[Dict[str, float]], target: str) -> Dict[str, Optional[float]]:
    """CPU ms per request: mtok's processes together, vLLM's API server, vLLM's
    engine (every other process of its tree), and the frontend's (mtok's behind
    mtok, the API server's in vLLM alone)."""
    if not by_process:
        return {"mtok": None, "vllm_api_server": None, "vllm_engine": None, "frontend": None}
    mtok = sum(ms for role, ms in by_process.items() if role.startswith("mtok "))
    api = by_process.get("vllm api-server", 0.0)
    engine = sum(ms for role, ms in by_process.items() if role.startswith("vllm ") and role != "vllm api-server")
    out = {"mtok": round(mtok, 3) if target != "vllm" else None, "vllm_api_server": round(api, 3),
           "vllm_engine": round(engine, 3), "frontend": round(api if target == "vllm" else mtok, 3)}
    out["outside_engine"] = round(mtok + api, 3)
    return out


# -- the requests ---------------------------------------------------------------------------------------

def bodies(workload: str, tokenizer: Any, args: argparse.Namespace) -> List[Dict[str, Any]]:
    """The pool of request bodies (streamed), greedy and of a fixed reply length."""
    if workload == "completions":
        maker = prompt_maker(Workload(text=args.text, seed=args.seed), tokenizer)
        out = [request_body("completions", maker.make(args.input_len), args.output_len, True)
               for _ in range(args.pool)]
    else:
        rnd = random.Random(args.seed)
        out = [{"messages": chat_workload.conversation(rnd)[0], "max_tokens": args.output_len, "ignore_eos": True,
                "stream": True, "stream_options": {"include_usage": True}} for _ in range(args.pool)]
    for body in out:
        body.update(model=MODEL, temperature=0)
    return out


def prompt_size(body: Dict[str, Any]) -> int:
    text = body.get("prompt") or "".join(m["content"] for m in body.get("messages", ()))
    return len(text.encode("utf-8"))


def plans(target: Target, workload: str, pool: List[Dict[str, Any]]) -> List[Plan]:
    return [Plan(build_request(target, WORKLOADS[workload], json.dumps(b).encode()), 0, b["max_tokens"], True,
                 prompt_size(b)) for b in pool]


def answer(target: Target, workload: str, body: Dict[str, Any]) -> Tuple[str, Any]:
    """One request unstreamed: the reply's text and its usage."""
    body = {k: v for k, v in body.items() if k not in ("stream", "stream_options")}
    conn = http.client.HTTPConnection(target.host, target.port, timeout=120)
    try:
        conn.request("POST", WORKLOADS[workload], json.dumps(body), {"Content-Type": "application/json"})
        resp = conn.getresponse()
        raw = resp.read()
    finally:
        conn.close()
    if resp.status != 200:
        raise RuntimeError(f"{target.host}:{target.port}{WORKLOADS[workload]}: HTTP {resp.status}: {raw[:300]!r}")
    doc = json.loads(raw)
    choice = doc["choices"][0]
    text = choice["text"] if workload == "completions" else choice["message"]["content"]
    return text, [doc["usage"]["prompt_tokens"], doc["usage"]["completion_tokens"]]


def check(targets: Dict[str, Target], pools: Dict[str, List[Dict[str, Any]]], samples: int) -> Dict[str, Any]:
    """The first ``samples`` requests of each workload, asked of every target: the
    problems (empty when every text and token count is vLLM's own)."""
    problems, seen = [], []
    for workload, pool in pools.items():
        for i, body in enumerate(pool[:samples]):
            got = {name: answer(t, workload, body) for name, t in targets.items()}
            ref = got["vllm"]
            seen.append({"workload": workload, "sample": i, "vllm": ref})
            for name, reply in got.items():
                if reply != ref:
                    problems.append(f"{workload} #{i}: {name} answered {reply!r}, vLLM {ref!r}")
    return {"samples": seen, "problems": problems}


# -- the runs -------------------------------------------------------------------------------------------

def mtok_config(args: argparse.Namespace, engine_url: str, workers: int) -> ServerConfig:
    return ServerConfig(kind="mtok", workers=workers, tokenizer_path=args.model,
                        extra=["--engine", f"vllm:{engine_url}", "--served-model-name", MODEL])


def run_one(target: Target, trees: Trees, workload: str, pool: List[Dict[str, Any]],
            args: argparse.Namespace) -> Dict[str, Any]:
    load = Workload(endpoint=workload, stream=True, concurrency=args.concurrency, duration=args.duration,
                    warmup=args.warmup, clients=args.clients, seed=args.seed)
    result = run_load(target, load, plans(target, workload, pool), trees, not args.quiet)
    result["mean_prompt_bytes"] = round(statistics.mean(prompt_size(b) for b in pool))
    return result


def measure(engines: Dict[str, Any], pools: Dict[str, List[Dict[str, Any]]],
            args: argparse.Namespace) -> List[Dict[str, Any]]:
    """Every round: each workload against vLLM alone, then mtok at each N (started for the run)."""
    plain, ids_only = engines["plain"], engines["ids_only"]
    runs = []
    for rnd in range(args.rounds):
        for workload, pool in pools.items():
            for workers in [0, *args.workers]:
                if not args.quiet:
                    print(f"vllm-frontend: round {rnd + 1}, {workload}, "
                          f"{'vLLM alone' if not workers else f'mtok N={workers}'}", file=sys.stderr, flush=True)
                if not workers:
                    trees = Trees(vllm=ProcessTree(plain.proc.pid))
                    result = run_one(Target.from_url(plain.url), trees, workload, pool, args)
                    name = "vllm"
                else:
                    with ServerProcess(mtok_config(args, ids_only.url, workers)) as server:
                        trees = Trees(mtok=ProcessTree(server.pid), vllm=ProcessTree(ids_only.proc.pid))
                        result = run_one(server.target, trees, workload, pool, args)
                    name = f"mtok N={workers}"
                result.update(target=name, workload=workload, round=rnd + 1,
                              cpu=cpu_split(result["server_cpu_ms_per_request_by_process"], name))
                runs.append(result)
    return runs


def medians(runs: List[Dict[str, Any]]) -> List[Dict[str, Any]]:
    """Per (target, workload), the run of median throughput."""
    groups: Dict[Tuple[str, str], List[Dict[str, Any]]] = {}
    for r in runs:
        groups.setdefault((r["target"], r["workload"]), []).append(r)
    out = []
    for group in groups.values():
        ranked = sorted(group, key=lambda r: r["output_tokens_per_s"])
        out.append(ranked[(len(ranked) - 1) // 2])
    return out


def ratios(rows: List[Dict[str, Any]]) -> Dict[str, Dict[str, Optional[float]]]:
    """Per workload and mtok target: its frontend CPU per request over vLLM's API server's
    (below 1: mtok's processes cost less than vLLM's own frontend for the same requests)."""
    ref = {r["workload"]: r["cpu"]["frontend"] for r in rows if r["target"] == "vllm"}
    out: Dict[str, Dict[str, Optional[float]]] = {}
    for r in rows:
        base = ref.get(r["workload"])
        if r["target"] != "vllm" and base and r["cpu"]["frontend"] is not None:
            out.setdefault(r["workload"], {})[r["target"]] = round(r["cpu"]["frontend"] / base, 3)
    return out


# -- the engines ----------------------------------------------------------------------------------------

def boot(real_vllm: Any, args: argparse.Namespace, logs: str) -> Dict[str, Any]:
    """The plain and the ids-only engine, booted at once (each boot mostly waits)."""
    engines = {"plain": real_vllm.VLLMServer(args.venv, args.model, max_num_seqs=args.concurrency,
                                             log_path=os.path.join(logs, "plain.log")),
               "ids_only": real_vllm.VLLMServer(args.venv, args.model, max_num_seqs=args.concurrency,
                                                skip_tokenizer_init=True, log_path=os.path.join(logs, "ids.log"))}
    try:
        for e in engines.values():
            e.start()
        for e in engines.values():
            e.wait_healthy()
    except BaseException:
        for e in engines.values():
            e.stop()  # every process it started, whichever failed
        raise
    return engines


def main(argv: Optional[List[str]] = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m mtok.bench vllm-frontend", description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--venv", default=os.environ.get("MTOK_VLLM_VENV"),
                    help="the venv scripts/real_vllm.py install made (default: $MTOK_VLLM_VENV)")
    ap.add_argument("--model", help="the model's directory, used as it is (scripts/real_vllm.py model DIR "
                    "makes the tiny one); built into a temporary directory when not given")
    ap.add_argument("--workloads", default="completions,chat", help="of completions, chat (default: %(default)s)")
    ap.add_argument("--tokenizer-worker-num", "--workers", dest="workers", default="1,2",
                    help="mtok's worker counts (default: %(default)s)")
    ap.add_argument("--input-len", type=int, default=450, help="completion prompts' tokens (default: %(default)s)")
    ap.add_argument("--text", choices=TEXT_CHOICES, default="random",
                    help="what completion prompts are made of (see `load --text`; default: %(default)s)")
    ap.add_argument("--output-len", type=int, default=16, help="tokens per reply (default: %(default)s)")
    ap.add_argument("--concurrency", type=int, default=8, help="requests in flight, and the engines' "
                    "--max-num-seqs (default: %(default)s)")
    ap.add_argument("--duration", type=float, default=20.0, help="timed seconds per run (default: %(default)s)")
    ap.add_argument("--warmup", type=float, default=3.0, help="seconds before the clock starts (default: %(default)s)")
    ap.add_argument("--rounds", type=int, default=1, help="alternations of the targets; the median counts")
    ap.add_argument("--pool", type=int, default=64, help="distinct requests per workload (default: %(default)s)")
    ap.add_argument("--check-samples", type=int, default=3, help="requests per workload whose answers are "
                    "compared before measuring (default: %(default)s)")
    ap.add_argument("--clients", type=int, default=1, help="load generator processes (default: %(default)s)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--json", metavar="OUT", help="write the results as JSON")
    ap.add_argument("--quiet", action="store_true", help="no progress lines on stderr")
    args = ap.parse_args(argv)
    args.workers = [int(n) for n in args.workers.split(",") if n]
    workloads = [w for w in args.workloads.split(",") if w]
    unknown = set(workloads) - set(WORKLOADS)
    if unknown:
        ap.error(f"unknown workload(s) {', '.join(sorted(unknown))}; choose from {', '.join(WORKLOADS)}")
    params = {k: v for k, v in vars(args).items() if k not in ("json", "quiet")}
    real_vllm = real_vllm_module()
    why = "scripts/real_vllm.py is absent (it lives in a checkout of mtok)" if real_vllm is None else \
        real_vllm.why_not_installed(args.venv)
    if why:
        print(f"vllm-frontend: no real vLLM, so nothing to measure: {why}", file=sys.stderr)
        write_json(args.json, "vllm-frontend", params, {"skipped": why})
        return 0
    if args.model and not os.path.isfile(os.path.join(args.model, "config.json")):
        ap.error(f"--model {args.model}: no config.json there (make one with scripts/real_vllm.py model DIR)")
    logs = tempfile.mkdtemp(prefix="mtok-bench-vllm-")
    args.model = os.path.abspath(args.model) if args.model else real_vllm.model_dir(os.path.join(logs, "model"),
                                                                                    args.venv)
    params["model"] = args.model
    engines = boot(real_vllm, args, logs)
    try:
        return run(engines, workloads, args, params)
    finally:
        for e in engines.values():
            e.stop()
        print(f"vllm-frontend: engines stopped; boots {[e.boot_seconds for e in engines.values()]} s, "
              f"logs in {logs}", file=sys.stderr)


def run(engines: Dict[str, Any], workloads: List[str], args: argparse.Namespace, params: Dict[str, Any]) -> int:
    from mtok.tokenizer.load import load_tokenizer

    tokenizer = load_tokenizer(args.model)
    pools = {w: bodies(w, tokenizer, args) for w in workloads}
    targets = {"vllm": Target.from_url(engines["plain"].url)}
    servers = [ServerProcess(mtok_config(args, engines["ids_only"].url, n)) for n in args.workers]
    try:
        targets.update((f"mtok N={n}", s.target) for n, s in zip(args.workers, servers))
        checked = check(targets, pools, args.check_samples)
    finally:
        for s in servers:
            s.stop()
    params["check"] = checked
    for problem in checked["problems"]:
        print(f"vllm-frontend: {problem}", file=sys.stderr)
    if checked["problems"]:
        write_json(args.json, "vllm-frontend", params, {"check": checked})
        return 1
    print(f"vllm-frontend: {len(checked['samples'])} sample answers are the same text on every target",
          file=sys.stderr)
    runs = measure(engines, pools, args)
    rows = medians(runs)
    summary = {"rows": rows, "frontend_over_vllm_api_server": ratios(rows), "runs": runs,
               "boot_s": {k: e.boot_seconds for k, e in engines.items()}}
    print(table(runs, COLUMNS))
    print("\nfrontend CPU per request (mtok's processes) / vLLM's API server's, median round:")
    for workload, by in summary["frontend_over_vllm_api_server"].items():
        print(f"  {workload}: " + ", ".join(f"{t} {x:.2f}x" for t, x in by.items()))
    for r in rows:
        by = r.get("server_cpu_ms_per_request_by_process") or {}
        print(f"  {r['target']}, {r['workload']}: " + " + ".join(f"{k} {v:.2f}" for k, v in by.items() if v >= 0.005))
    write_json(args.json, "vllm-frontend", params, summary)
    return 0
