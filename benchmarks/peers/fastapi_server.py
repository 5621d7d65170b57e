"""Start the FastAPI peer: the echo engine process, then uvicorn with N workers.

    python benchmarks/peers/fastapi_server.py --port 0 --workers 2 [--tokenizer-path PATH]
        [--chat-template FILE] [--tool-call-parser qwen25] [--reasoning-parser qwen3]

Takes the flags of ``python -m mtok.serve`` that a benchmark uses, serves mtok's
built-in tokenizer by default (the same file), and prints
``fastapi-peer ready on http://HOST:PORT`` once ``/health`` answers.  SIGTERM
or Ctrl-C stops uvicorn, which stops its workers; the engine goes with them.
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from typing import List, Optional

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from fastapi_chat import REASONING_PARSERS, TOOL_PARSERS  # noqa: E402
ROOT = os.path.dirname(os.path.dirname(HERE))
DEFAULT_TOKENIZER = os.path.join(ROOT, "mtok", "data", "default")
EOS_GUESSES = ("<|endoftext|>", "</s>", "<|end_of_text|>", "<eos>", "<|eot_id|>", "<|im_end|>")


def tokenizer_files(path: str) -> "tuple[str, Optional[str]]":
    """The tokenizer.json to load and the eos token its side files name."""
    if not os.path.isdir(path):
        return path, None
    eos = None
    for name in ("special_tokens_map.json", "tokenizer_config.json"):
        try:
            with open(os.path.join(path, name), encoding="utf-8") as f:
                value = json.load(f).get("eos_token")
        except (OSError, ValueError, AttributeError):
            continue
        eos = value.get("content") if isinstance(value, dict) else value or eos
    return os.path.join(path, "tokenizer.json"), eos


def eos_ids(json_path: str, eos: Optional[str]) -> List[int]:
    from tokenizers import Tokenizer

    tok = Tokenizer.from_file(json_path)
    names = [eos] if eos else list(EOS_GUESSES)
    ids = [tok.token_to_id(n) for n in names]
    return [i for i in ids if i is not None][:1]


def free_port(host: str) -> int:
    with socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET) as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def announce_when_ready(host: str, port: int, workers: int) -> None:
    """Print the ready line once /health answers (uvicorn has no hook for "all workers up")."""
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        conn = http.client.HTTPConnection(host, port, timeout=2)
        try:
            conn.request("GET", "/health")
            if conn.getresponse().status == 200:
                print(f"fastapi-peer ready on http://{host}:{port} (workers={workers})", flush=True)
                return
        except (OSError, http.client.HTTPException):
            pass
        finally:
            conn.close()
        time.sleep(0.05)  # polling a port that is not up yet
    print("fastapi-peer: not ready after 120 s", file=sys.stderr, flush=True)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=30000)
    p.add_argument("--workers", type=int, default=1)
    p.add_argument("--tokenizer-path", default=DEFAULT_TOKENIZER)
    p.add_argument("--engine-step-delay", type=float, default=0.0)
    p.add_argument("--max-running-requests", type=int, default=256)
    p.add_argument("--context-length", type=int, default=65536)
    p.add_argument("--chat-template", help="a .jinja file, or JSON holding chat_template (default: the "
                   "tokenizer directory's tokenizer_config.json)")
    p.add_argument("--tool-call-parser", choices=TOOL_PARSERS)
    p.add_argument("--reasoning-parser", choices=REASONING_PARSERS)
    args = p.parse_args()

    import uvicorn

    json_path, eos = tokenizer_files(args.tokenizer_path)
    port = args.port or free_port(args.host)
    ipc_dir = tempfile.mkdtemp(prefix="fastapi-peer-")
    engine_addr = f"ipc://{ipc_dir}/engine"
    engine = subprocess.Popen([
        sys.executable, os.path.join(HERE, "echo_engine.py"), "--addr", engine_addr,
        "--engine-step-delay", str(args.engine_step_delay), "--max-running-requests", str(args.max_running_requests),
        "--eos-ids", ",".join(map(str, eos_ids(json_path, eos))),
    ])
    os.environ.update(PEER_TOKENIZER=json_path, PEER_ENGINE=engine_addr, PEER_IPC_DIR=ipc_dir,
                      PEER_CONTEXT_LENGTH=str(args.context_length), TOKENIZERS_PARALLELISM="false",
                      PEER_TOKENIZER_DIR=args.tokenizer_path if os.path.isdir(args.tokenizer_path) else "",
                      PEER_CHAT_TEMPLATE=args.chat_template or "", PEER_TOOL_PARSER=args.tool_call_parser or "",
                      PEER_REASONING_PARSER=args.reasoning_parser or "",
                      PEER_MODEL_NAME="mtok-default" if args.tokenizer_path == DEFAULT_TOKENIZER
                      else os.path.basename(args.tokenizer_path.rstrip("/")).replace(".json", ""))
    threading.Thread(target=announce_when_ready, args=(args.host, port, args.workers), daemon=True).start()
    # uvicorn handles SIGTERM itself, then restores the handler it found and raises the
    # signal again; this one turns that into an exit that runs the clean-up below.
    signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(0))
    try:
        uvicorn.run("fastapi_app:app", host=args.host, port=port, workers=args.workers, app_dir=HERE,
                    log_level="warning", access_log=False)
    finally:
        engine.send_signal(signal.SIGTERM)
        try:
            engine.wait(5)
        except subprocess.TimeoutExpired:
            engine.kill()
        shutil.rmtree(ipc_dir, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
