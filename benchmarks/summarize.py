"""The tables of docs/benchmarks.md, printed as Markdown from benchmarks/results/*.json.

    python benchmarks/summarize.py [benchmarks/results]
"""

from __future__ import annotations

import glob
import json
import os
import sys
from typing import Any, Dict, List, Optional, Sequence

HERE = os.path.dirname(os.path.abspath(__file__))


def load(folder: str, name: str) -> Optional[Dict[str, Any]]:
    path = os.path.join(folder, f"{name}.json")
    if not os.path.isfile(path):
        return None
    with open(path, encoding="utf-8") as f:
        return json.load(f)


def get(d: Any, key: str) -> Any:
    for part in key.split("."):
        d = d.get(part) if isinstance(d, dict) else None
    return d


def fmt(v: Any) -> str:
    if v is None:
        return "–"
    if isinstance(v, bool):
        return "yes" if v else "no"
    if isinstance(v, float):
        if v == int(v) and abs(v) >= 10:
            return f"{int(v):,}"
        places = 3 if abs(v) < 1 else 2 if abs(v) < 100 else 1 if abs(v) < 1000 else 0
        return f"{v:,.{places}f}"
    if isinstance(v, int):
        return f"{v:,}"
    return str(v)


def md(headers: Sequence[str], rows: List[Sequence[Any]]) -> str:
    lines = ["| " + " | ".join(headers) + " |", "|" + "|".join("---" for _ in headers) + "|"]
    lines += ["| " + " | ".join(fmt(c) if not isinstance(c, str) else c for c in row) + " |" for row in rows]
    return "\n".join(lines)


def machine(folder: str) -> str:
    """The machine of the newest result (older ones, such as the chat bench's, may stay in the folder)."""
    found = []
    for path in glob.glob(os.path.join(folder, "*.json")):
        with open(path, encoding="utf-8") as f:
            m = json.load(f).get("machine")
        if m:
            found.append(m)
    if not found:
        return "unknown"
    m = max(found, key=lambda m: m["date"])
    return f"{m['nproc']} cores ({m['cpu_model']}), {m['implementation']} {m['python']}, {m['platform']}; {m['date']}"


COMPARE_ROWS = [
    ("requests/s", "requests_per_s"), ("output tokens/s", "output_tokens_per_s"),
    ("server CPU ms/request", "server_cpu_ms_per_request"), ("server cores busy", "server_cores_busy"),
    ("client cores busy", "client_cores_busy"),
    ("TTFT p50 ms", "ttft_ms.p50"), ("ITL p50 ms (between events)", "itl_ms.p50"),
    ("TPOT p50 ms (per token)", "tpot_ms.p50"), ("e2e p50 ms", "e2e_ms.p50"),
    ("e2e p90 ms", "e2e_ms.p90"), ("e2e p99 ms", "e2e_ms.p99"), ("errors", "errors"),
]


def compare_table(doc: Dict[str, Any]) -> str:
    r = doc["results"]
    if "skipped" in r:
        return f"(skipped: {r['skipped']})"
    rows = []
    for name, key in COMPARE_ROWS:
        a, b = get(r["mtok"], key), get(r["fastapi"], key)
        if a is None and b is None:
            continue
        ratio = a / b if isinstance(a, (int, float)) and isinstance(b, (int, float)) and b else None
        rows.append([name, a, b, f"{ratio:.2f}x" if ratio is not None else "–"])
    w = doc["params"]["workload"]
    if w["endpoint"] == "chat-3turn":
        return chat_what(doc) + "\n\n" + md(["", "mtok", "FastAPI peer", "mtok / peer"], rows) + cpu_by_process(r)
    output = "" if w["endpoint"] == "tokenize" else \
        f"{w['output_len']} output token{'s' if w['output_len'] != 1 else ''}, "
    per_round = "output tokens/s" if w["stream"] else "req/s"
    what = (f"`{w['endpoint_path']}`, {w['input_len']}-token prompts (~{r['mtok'].get('mean_prompt_bytes', '?')} "
            f"bytes), {output}{'streamed, ' if w['stream'] else ''}concurrency {w['concurrency']}, "
            f"{w['duration']:g} s after {w['warmup']:g} s warm-up; median of {doc['params']['rounds']} rounds "
            f"({per_round} per round: mtok {_list(r['rounds']['mtok'])}; FastAPI {_list(r['rounds']['fastapi'])})")
    return what + "\n\n" + md(["", "mtok", "FastAPI peer", "mtok / peer"], rows) + cpu_by_process(r)


def chat_what(doc: Dict[str, Any]) -> str:
    """The chat-3turn workload in words: the conversation, the reply, the servers' flags."""
    p, r = doc["params"], doc["results"]
    w, server = p["workload"], r["mtok"].get("server", {})
    template = os.path.basename(server.get("chat_template") or "?")
    per = {k: round(r["mtok"][f"{k}_tokens_per_s"] / r["mtok"]["requests_per_s"]) for k in ("input", "output")}
    return (f"`{w['endpoint_path']}`, a three-turn chat (system, user, assistant, user) with two tools through "
            f"`{template}`, prompts of {per['input']} tokens on average (~{r['mtok'].get('mean_prompt_bytes', '?')} "
            f"bytes), replies of {per['output']} (reasoning, an answer, one tool call), "
            f"{'streamed, ' if w['stream'] else ''}`--tool-call-parser {server.get('tool_call_parser')} "
            f"--reasoning-parser {server.get('reasoning_parser')}`, {p['workers']} workers, concurrency "
            f"{w['concurrency']}, {w['duration']:g} s after {w['warmup']:g} s warm-up; both servers gave the same "
            f"parsed reply before the clock started; median of {p['rounds']} rounds (output tokens/s per round: mtok "
            f"{_list(r['rounds']['mtok'])}; FastAPI {_list(r['rounds']['fastapi'])})")


def cpu_by_process(r: Dict[str, Any]) -> str:
    """A line per server: where its CPU per request went, process by process."""
    lines = []
    for side, name in (("mtok", "mtok"), ("fastapi", "FastAPI peer")):
        by = r[side].get("server_cpu_ms_per_request_by_process")
        if by:
            parts = " + ".join(f"{role} {ms:.3f}" for role, ms in by.items() if ms >= 0.0005 or role == "main")
            lines.append(f"- {name}: {parts} ms")
    return "\n\nCPU ms per request, by process:\n\n" + "\n".join(lines) if lines else ""


def vllm_frontend_table(doc: Dict[str, Any]) -> str:
    """mtok before vLLM --skip-tokenizer-init beside vLLM's own frontend: a row per target and workload."""
    r, p = doc["results"], doc["params"]
    if "skipped" in r:
        return f"(skipped: {r['skipped']})"
    rows = [[f"{x['workload']}, {x['target']}", x["requests_per_s"], get(x, "ttft_ms.p50"), get(x, "e2e_ms.p50"),
             get(x, "e2e_ms.p99"), get(x, "cpu.frontend"), get(x, "cpu.vllm_api_server"), get(x, "cpu.vllm_engine"),
             _times(get(r, f"frontend_over_vllm_api_server.{x['workload']}.{x['target']}")) or "–", x["errors"]]
            for x in r["rows"]]
    size = next((x["mean_prompt_bytes"] for x in r["rows"] if x["workload"] == "completions"), "?")
    what = (f"{p['input_len']}-token completions (~{fmt(size)} bytes) and three-turn chats, {p['output_len']} "
            f"greedy tokens each (`ignore_eos`), streamed, concurrency {p['concurrency']}, {p['duration']:g} s "
            f"after {p['warmup']:g} s warm-up; median of {p['rounds']} rounds; {len(p['check']['samples'])} sample answers were the same "
            f"text on every target before the clock started")
    return what + "\n\n" + md(["workload, target", "req/s", "TTFT p50 ms", "e2e p50 ms", "e2e p99 ms",
                               "frontend CPU ms/req", "vLLM API server ms/req", "vLLM engine ms/req",
                               "frontend / vLLM's", "errors"], rows)


def sweep_table(doc: Dict[str, Any]) -> str:
    rows = [[r["server_kind"], r["workers"], r["requests_per_s"], r["output_tokens_per_s"],
             r["server_cpu_ms_per_request"], r["server_cores_busy"], get(r, "e2e_ms.p50"),
             f"{r['speedup']:.2f}x" if r.get("speedup") else "–", r["errors"]] for r in doc["results"]]
    return md(["server", "N", "req/s", "output tok/s", "CPU ms/request", "cores busy", "e2e p50 ms",
               "vs N=1", "errors"], rows)


def detok_table(doc: Dict[str, Any]) -> str:
    rows = [[r["backend"], r["streams"], r["tokens"], r["stream_ms"], r["decoder_ms"], r["one_shot_ms"],
             f"{r['stream_over_one_shot']:.1f}x", r["us_per_token_streamed"], r["same_text"]] for r in doc["results"]]
    return md(["backend", "streams", "tokens each", "streamed ms", "of which decoding ms", "one-shot decode ms",
               "streamed / one-shot", "µs per token streamed", "same text"], rows)


def transport_table(doc: Dict[str, Any]) -> str:
    rows = [[r["transport"], r["prompt_tokens"], r["message_bytes"], get(r, "hop_us.p50"), get(r, "hop_us.p99"),
             r["messages_per_s"]] for r in doc["results"]]
    return md(["transport", "prompt tokens", "message bytes", "hop p50 µs", "hop p99 µs", "messages/s"], rows)


def tokenizer_table(doc: Dict[str, Any]) -> str:
    rows = [[r["file"], r["backend"], r["load_s"], r.get("load_cached_s", ""), r["encode_cold_mb_s"], r["encode_warm_mb_s"], r["decode_mb_s"],
             _times(r.get("vs_tokenizers")), _times(r.get("cold_vs_tokenizers"))] for r in doc["results"]]
    return md(["file", "backend", "load s", "load cached s", "encode cold MB/s", "encode warm MB/s", "decode MB/s",
               "warm vs tokenizers", "cold vs tokenizers"], rows)


def _list(values: Sequence[float]) -> str:
    return " / ".join(fmt(v) for v in values)


def _times(v: Any) -> str:
    if v in (None, ""):
        return ""
    return str(v) if isinstance(v, str) else f"{v:.2f}x"


def soak_summary(doc: Dict[str, Any]) -> str:
    r = doc["results"]
    s = r["samples"]
    load_ = r.get("load") or {}
    return (f"{load_.get('requests', 0):,} requests in {load_.get('window_s', 0):.0f} s "
            f"({load_.get('requests_per_s', 0):,.0f} req/s), {load_.get('errors', '?')} errors; resident memory "
            f"{s[0]['rss_mb']} MB at the start, {r['rss_mb_max']} MB at most, growth after warm-up "
            f"{r['rss_mb_growth']} MB; open fds first/last {r['open_fds_first_last']}, "
            f"{r['after_load']['open_fds']} once idle; {s[-1]['processes']} processes, {s[-1]['threads']} threads.")


SECTIONS = [
    ("compare-generate-2kb", "Tokenization-heavy /generate, one worker", compare_table),
    ("compare-generate-2kb-pyrt", "The same, mtok on its pure-Python tokenizer runtime", compare_table),
    ("compare-stream", "Streaming, one worker", compare_table),
    ("compare-tokenize", "/tokenize of a short prompt, one worker", compare_table),
    ("compare-latency", "Pipeline latency at concurrency 1", compare_table),
    ("compare-generate-2kb-natural-n2", "/generate, ~2 KB of natural text, two workers", compare_table),
    ("compare-tokenize-natural-n2", "/tokenize of a short natural-text prompt, two workers", compare_table),
    ("compare-chat-qwen3-n2", "Chat: three turns, two tools, Qwen3's template and tokenizer, two workers",
     compare_table),
    ("sweep-generate-2kb", "Worker scaling: /generate, 2 KB prompts, 1 output token", sweep_table),
    ("sweep-stream", "Worker scaling: streaming, 256 output tokens", sweep_table),
    ("detok", "The detokenizer: streaming vs one decode", detok_table),
    ("transport", "Transport: one IPC hop", transport_table),
    ("tokenizer", "Tokenizer throughput", tokenizer_table),
    ("tokenizer-gemma3", "Tokenizer throughput, the real Gemma-3 tokenizer.json, many scripts", tokenizer_table),
    ("soak", "Soak: two minutes of mixed load, two workers", soak_summary),
    ("vllm-frontend", "mtok before a real vLLM (--skip-tokenizer-init) vs vLLM's own frontend", vllm_frontend_table),
]


def main() -> int:
    folder = sys.argv[1] if len(sys.argv) > 1 else os.path.join(HERE, "results")
    print(f"Machine: {machine(folder)}\n")
    for name, title, render in SECTIONS:
        doc = load(folder, name)
        if doc is not None:
            print(f"### {title}\n\n{render(doc)}\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
