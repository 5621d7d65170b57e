"""``python -m mtok.bench parsers``: what tool-call and reasoning parsing costs per streamed chunk.

    python -m mtok.bench parsers [--chunks 256,2048] [--tool-parsers hermes,qwen25,...] [--repeat 3]

Builds a model output per format -- reasoning, an answer of ``--chunks`` pieces
of about a token each (4 characters), then two tool calls -- and times, in the
worker's own terms, a streamed chat request's parsing: the reasoning stream and
the tool-call stream fed one piece at a time, then finished, against one
one-shot parse of the whole text.  "us/chunk" is the streamed total divided by
the pieces; at two lengths it shows how the cost grows with the output (each
chunk re-reads the text since the last settled point).
"""

from __future__ import annotations

import argparse
import json
import time
from typing import Any, Dict, List, Optional

from mtok.parsers import collect, make_reasoning_parser, make_tool_parser

from .report import table, write_json

TOOLS = [{"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object"}}},
         {"type": "function", "function": {"name": "search", "parameters": {"type": "object"}}}]
CALLS = [("get_weather", {"city": "Paris", "days": 3}), ("search", {"query": "parsers", "filters": {"k": [1, 2]}})]
WORDS = "The parser reads each piece of the answer as it arrives and keeps only what it must. "


def render(fmt: str) -> str:
    """The two calls in ``fmt``'s syntax."""
    j = lambda a: json.dumps(a)  # noqa: E731
    if fmt in ("hermes", "qwen25"):
        nl = "\n" if fmt == "qwen25" else ""
        return "".join("<tool_call>%s%s%s</tool_call>\n" % (nl, json.dumps({"name": n, "arguments": a}), nl) for n, a in CALLS)
    if fmt == "llama3":
        return "<|python_tag|>" + ";".join(json.dumps({"name": n, "parameters": a}) for n, a in CALLS)
    if fmt == "mistral":
        return "[TOOL_CALLS] " + json.dumps([{"name": n, "arguments": a} for n, a in CALLS])
    if fmt == "deepseekv3":
        return "<｜tool▁calls▁begin｜>" + "".join(
            "<｜tool▁call▁begin｜>function<｜tool▁sep｜>%s\n```json\n%s\n```<｜tool▁call▁end｜>" % (n, j(a)) for n, a in CALLS)
    if fmt == "deepseekv31":
        return "<｜tool▁calls▁begin｜>" + "".join(
            "<｜tool▁call▁begin｜>%s<｜tool▁sep｜>%s<｜tool▁call▁end｜>" % (n, j(a)) for n, a in CALLS)
    if fmt == "kimi_k2":
        return "<|tool_calls_section_begin|>" + "".join(
            "<|tool_call_begin|>functions.%s:%d<|tool_call_argument_begin|>%s<|tool_call_end|>" % (n, i, j(a))
            for i, (n, a) in enumerate(CALLS))
    raise SystemExit("no sample output for %r" % fmt)


def output(fmt: str, chunks: int) -> List[str]:
    answer = (WORDS * (chunks * 4 // len(WORDS) + 1))[: chunks * 4]
    text = "<think>" + WORDS * 4 + "</think>" + answer + render(fmt)
    return [text[i:i + 4] for i in range(0, len(text), 4)]


def run_stream(fmt: str, reasoning: str, pieces: List[str]) -> Any:
    rstream = make_reasoning_parser(reasoning).stream()
    tstream = make_tool_parser(fmt, TOOLS).stream()
    deltas = []
    for piece in pieces:
        _, content = rstream.feed(piece)
        deltas += tstream.feed(content)
    _, content = rstream.finish()
    deltas += tstream.feed(content) + tstream.finish()
    return collect(deltas)


def run_oneshot(fmt: str, reasoning: str, text: str) -> Any:
    _, content = make_reasoning_parser(reasoning).parse(text)
    return make_tool_parser(fmt, TOOLS).parse(content)


def best(fn, repeat: int) -> float:
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return min(times)


def measure(fmt: str, reasoning: str, chunks: int, repeat: int) -> Dict[str, Any]:
    pieces = output(fmt, chunks)
    text = "".join(pieces)
    streamed = run_stream(fmt, reasoning, pieces)
    same = streamed == run_oneshot(fmt, reasoning, text) and len(streamed[1]) == len(CALLS)
    stream_s = best(lambda: run_stream(fmt, reasoning, pieces), repeat)
    oneshot_s = best(lambda: run_oneshot(fmt, reasoning, text), repeat)
    return {"tool_parser": fmt, "reasoning_parser": reasoning, "chunks": len(pieces),
            "stream_ms": round(1000 * stream_s, 3), "one_shot_ms": round(1000 * oneshot_s, 3),
            "us_per_chunk": round(1e6 * stream_s / len(pieces), 2), "same_result": same}


COLUMNS = [("tool parser", "tool_parser"), ("reasoning", "reasoning_parser"), ("chunks", "chunks"),
           ("streamed ms", "stream_ms"), ("one-shot ms", "one_shot_ms"), ("us/chunk", "us_per_chunk"),
           ("same result", "same_result")]


def main(argv: Optional[List[str]] = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m mtok.bench parsers", description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--chunks", default="256,2048", help="answer pieces before the calls (default 256,2048)")
    parser.add_argument("--tool-parsers", default="hermes,qwen25,llama3,mistral,deepseekv3,deepseekv31,kimi_k2")
    parser.add_argument("--reasoning-parser", default="deepseek-r1")
    parser.add_argument("--repeat", type=int, default=3, help="runs; the fastest counts (default 3)")
    parser.add_argument("--json", metavar="OUT")
    args = parser.parse_args(argv)
    rows = [measure(f, args.reasoning_parser, int(n), max(1, args.repeat))
            for f in args.tool_parsers.split(",") for n in args.chunks.split(",")]
    print(table(rows, COLUMNS))
    write_json(args.json, "parsers", vars(args), rows)
    return 0 if all(r["same_result"] for r in rows) else 1
