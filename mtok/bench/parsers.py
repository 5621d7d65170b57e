"""``python -m mtok.bench parsers``: what tool-call and reasoning parsing costs per token, streamed and one-shot.

    python -m mtok.bench parsers [--sizes 1000,10000,100000] [--tool-parsers hermes,...] [--reasoning-parsers ...]

For every parser and each size, a model output of that many characters -- an
answer, then two tool calls in the format's syntax (a tool-call parser), or a
reasoning block then the answer (a reasoning parser) -- is parsed as a worker
parses a streamed chat request, fed one token (4 characters) at a time and then
finished, and once as a whole.  "us/token" is the time divided by the tokens;
flat across the sizes means linear (the parsers keep their place in the text:
nothing settled is read again).  "scan ratio" is the characters the stream's
scans examined over the one-shot parse's (``Meter.scanned``): the work, without
the per-call overhead of 4-character chunks that the time ratio includes.
"""

from __future__ import annotations

import argparse
import json
import time
from typing import Any, Callable, Dict, List, Optional

from mtok.parsers import collect, make_reasoning_parser, make_tool_parser, reasoning_parser_names

from .report import table, write_json

TOOLS = [{"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object"}}},
         {"type": "function", "function": {"name": "search", "parameters": {"type": "object"}}}]
CALLS = [("get_weather", {"city": "Paris", "days": 3}), ("search", {"query": "parsers", "filters": {"k": [1, 2]}})]
WORDS = "The parser reads each piece of the answer as it arrives and keeps only what it must. "
TOKEN = 4  # characters per streamed piece
TOOL_PARSERS = "hermes,qwen25,llama3,mistral,deepseekv3,deepseekv31,kimi_k2,glm45,qwen3_coder,pythonic"


def _dumps(value: Any) -> str:
    return json.dumps(value)


SYNTAX: Dict[str, Callable[[str, Dict[str, Any], int], str]] = {
    "hermes": lambda n, a, i: "<tool_call>%s</tool_call>\n" % _dumps({"name": n, "arguments": a}),
    "qwen25": lambda n, a, i: "<tool_call>\n%s\n</tool_call>\n" % _dumps({"name": n, "arguments": a}),
    "llama3": lambda n, a, i: ("<|python_tag|>" if i == 0 else ";") + _dumps({"name": n, "parameters": a}),
    "mistral": lambda n, a, i: "[TOOL_CALLS]%s[ARGS]%s" % (n, _dumps(a)),
    "deepseekv3": lambda n, a, i: ("<｜tool▁calls▁begin｜>" if i == 0 else "")
    + "<｜tool▁call▁begin｜>function<｜tool▁sep｜>%s\n```json\n%s\n```<｜tool▁call▁end｜>" % (n, _dumps(a)),
    "deepseekv31": lambda n, a, i: ("<｜tool▁calls▁begin｜>" if i == 0 else "")
    + "<｜tool▁call▁begin｜>%s<｜tool▁sep｜>%s<｜tool▁call▁end｜>" % (n, _dumps(a)),
    "kimi_k2": lambda n, a, i: ("<|tool_calls_section_begin|>" if i == 0 else "")
    + "<|tool_call_begin|>functions.%s:%d<|tool_call_argument_begin|>%s<|tool_call_end|>" % (n, i, _dumps(a)),
    "glm45": lambda n, a, i: "<tool_call>%s\n%s</tool_call>\n" % (n, "".join(
        "<arg_key>%s</arg_key>\n<arg_value>%s</arg_value>\n" % (k, _dumps(v)) for k, v in a.items())),
    "qwen3_coder": lambda n, a, i: "<tool_call>\n<function=%s>\n%s</function>\n</tool_call>\n" % (n, "".join(
        "<parameter=%s>\n%s\n</parameter>\n" % (k, _dumps(v)) for k, v in a.items())),
    "pythonic": lambda n, a, i: ("[" if i == 0 else ", ") + "%s(%s)" % (n, ", ".join(
        "%s=%r" % (k, v) for k, v in a.items())) + ("]" if i == len(CALLS) - 1 else ""),
}


def words(chars: int) -> str:
    return (WORDS * (chars // len(WORDS) + 1))[:max(0, chars)]


def tool_output(fmt: str, chars: int) -> str:
    if fmt not in SYNTAX:
        raise SystemExit("no sample output for %r" % fmt)
    calls = "".join(SYNTAX[fmt](n, a, i) for i, (n, a) in enumerate(CALLS))
    return words(chars - len(calls)) + calls


def reasoning_output(name: str, chars: int) -> str:
    parser = make_reasoning_parser(name)
    body = chars - len(parser.start) - len(parser.end)
    return parser.start + words(body // 2) + parser.end + words(body - body // 2)


def pieces(text: str) -> List[str]:
    return [text[i:i + TOKEN] for i in range(0, len(text), TOKEN)]


def tool_runs(fmt: str, text: str):
    def streamed():
        parser = make_tool_parser(fmt, TOOLS)
        stream, deltas = parser.stream(), []
        for piece in pieces(text):
            deltas += stream.feed(piece)
        return collect(deltas + stream.finish()), parser.scanned

    def one_shot():
        parser = make_tool_parser(fmt, TOOLS)
        return parser.parse(text), parser.scanned
    return streamed, one_shot


def reasoning_runs(name: str, text: str):
    def streamed():
        parser = make_reasoning_parser(name)
        stream, got = parser.stream(), []
        for piece in pieces(text):
            got.append(stream.feed(piece))
        got.append(stream.finish())
        return ("".join(r for r, _ in got), "".join(c for _, c in got)), parser.scanned

    def one_shot():
        parser = make_reasoning_parser(name)
        return parser.parse(text), parser.scanned
    return streamed, one_shot


def best(fn, repeat: int) -> float:
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return min(times)


def measure(kind: str, name: str, text: str, runs, repeat: int) -> Dict[str, Any]:
    streamed, one_shot = runs
    (got, stream_scan), (want, once_scan) = streamed(), one_shot()
    tokens = len(pieces(text))
    stream_s, once_s = best(streamed, repeat), best(one_shot, repeat)
    return {"kind": kind, "parser": name, "chars": len(text), "tokens": tokens,
            "stream_us_per_token": round(1e6 * stream_s / tokens, 3),
            "one_shot_us_per_token": round(1e6 * once_s / tokens, 4),
            "time_ratio": round(stream_s / once_s, 1),
            "scan_ratio": round(stream_scan / max(1, once_scan), 2), "same_result": got == want}


COLUMNS = [("parser", "parser"), ("kind", "kind"), ("chars", "chars"), ("tokens", "tokens"),
           ("streamed us/token", "stream_us_per_token"), ("one-shot us/token", "one_shot_us_per_token"),
           ("time ratio", "time_ratio"), ("scan ratio", "scan_ratio"), ("same result", "same")]


def main(argv: Optional[List[str]] = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m mtok.bench parsers", description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", default="1000,10000,100000", help="output lengths in characters")
    parser.add_argument("--tool-parsers", default=TOOL_PARSERS)
    parser.add_argument("--reasoning-parsers", default=",".join(reasoning_parser_names()))
    parser.add_argument("--repeat", type=int, default=3, help="runs; the fastest counts (default 3)")
    parser.add_argument("--json", metavar="OUT")
    args = parser.parse_args(argv)
    sizes, repeat = [int(n) for n in args.sizes.split(",")], max(1, args.repeat)
    rows = [measure("tool", f, text, tool_runs(f, text), repeat)
            for f in filter(None, args.tool_parsers.split(",")) for text in (tool_output(f, n) for n in sizes)]
    rows += [measure("reasoning", r, text, reasoning_runs(r, text), repeat)
             for r in filter(None, args.reasoning_parsers.split(","))
             for text in (reasoning_output(r, n) for n in sizes)]
    print(table([dict(r, same="yes" if r["same_result"] else "NO") for r in rows], COLUMNS))
    write_json(args.json, "parsers", vars(args), rows)
    return 0 if all(r["same_result"] for r in rows) else 1
