"""``python -m mtok.bench <command> [args...]``: run one of mtok's benchmarks.

Each command is a module with a ``main(argv) -> int``; adding one is one line here.
"""

from __future__ import annotations

import importlib
import sys
from typing import List, Optional

COMMANDS = {
    "tokenizer": ("mtok.bench.tokenizer", "tokenizer encode/decode throughput and load time"),
    "load": ("mtok.bench.load", "drive a server with one workload: req/s, tokens/s, latencies, CPU/request"),
    "sweep": ("mtok.bench.sweep", "throughput for N = 1, 2, 4, ... workers; the scaling curve as SVG"),
    "transport": ("mtok.bench.transport", "IPC hop latency and messages/s: mtok.wire.ipc beside pyzmq PUSH/PULL"),
    "soak": ("mtok.bench.soak", "long mixed load; the server's RSS and open fds over time"),
    "compare": ("mtok.bench.compare", "mtok vs the FastAPI peer, alternately, on one workload; the ratios"),
    "detok": ("mtok.bench.detok", "the detokenizer streaming token by token vs one decode of the same ids"),
    "offline": ("mtok.bench.offline", "one batch through mtok.Engine beside the same prompts over HTTP"),
    "chat": ("mtok.bench.chat", "chat template render time: mtok's Jinja engine beside jinja2"),
    "parsers": ("mtok.bench.parsers", "tool-call and reasoning parsing per streamed chunk vs one parse"),
    "upstream": ("mtok.bench.upstream", "what mtok in front of an upstream engine adds, per request and per streamed token"),
    "vllm-frontend": ("mtok.bench.vllm_frontend", "mtok (N = 1, 2) before vLLM --skip-tokenizer-init vs vLLM's own frontend: CPU/request by process"),
}


def main(argv: Optional[List[str]] = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if not argv or argv[0] in ("-h", "--help") or argv[0] not in COMMANDS:
        print("usage: python -m mtok.bench <command> [args...]\n\ncommands:")
        for name, (_, summary) in COMMANDS.items():
            print(f"  {name:<12} {summary}")
        return 0 if argv and argv[0] in ("-h", "--help") else 2
    module = importlib.import_module(COMMANDS[argv[0]][0])
    return module.main(argv[1:])


if __name__ == "__main__":
    sys.exit(main())
