"""Servers under test: mtok, or a peer, started here or already running.

A server started here is a subprocess whose first "... ready on http://HOST:PORT"
line on stdout says where it listens; it is stopped with SIGTERM at the end.
Either way the benchmark needs the server's root pid (for CPU time) and which
tokenizer it serves (to make prompts of an exact length).
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import queue
import re
import signal
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional

from .http_client import Target
from .procstat import ProcessTree, parent_of, proc_available

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PEERS_DIR = os.path.join(ROOT, "benchmarks", "peers")
READY = re.compile(r"ready on (http://\S+?)[\s,)]")
BOOT_TIMEOUT = 120.0

SERVERS = ("mtok", "fastapi")


@dataclass
class ServerConfig:
    """How to start a server: which one, its interpreter, and the flags both kinds take."""

    kind: str = "mtok"
    python: str = sys.executable
    workers: int = 1
    engine_step_delay: float = 0.0
    tokenizer_path: Optional[str] = None
    tokenizer_backend: str = "auto"
    chat_template: Optional[str] = None
    tool_call_parser: Optional[str] = None
    reasoning_parser: Optional[str] = None
    extra: List[str] = field(default_factory=list)

    def command(self) -> List[str]:
        common = ["--host", "127.0.0.1", "--port", "0", "--engine-step-delay", str(self.engine_step_delay)]
        if self.tokenizer_path:
            common += ["--tokenizer-path", self.tokenizer_path]
        for flag, value in (("--chat-template", self.chat_template), ("--tool-call-parser", self.tool_call_parser),
                            ("--reasoning-parser", self.reasoning_parser)):
            if value:
                common += [flag, value]
        if self.kind == "mtok":
            return [self.python, "-m", "mtok.serve", *common, "--tokenizer-worker-num", str(self.workers),
                    "--tokenizer-backend", self.tokenizer_backend, "--log-level", "warning", *self.extra]
        if self.kind == "fastapi":
            return [self.python, os.path.join(PEERS_DIR, "fastapi_server.py"), *common, "--workers",
                    str(self.workers), *self.extra]
        raise ValueError(f"unknown server {self.kind!r}; choose from {', '.join(SERVERS)}")

    def describe(self) -> Dict[str, Any]:
        return {"kind": self.kind, "python": self.python, "workers": self.workers,
                "engine_step_delay": self.engine_step_delay, "tokenizer_path": self.tokenizer_path,
                "tokenizer_backend": self.tokenizer_backend, "chat_template": self.chat_template,
                "tool_call_parser": self.tool_call_parser, "reasoning_parser": self.reasoning_parser,
                "extra": self.extra}


def missing_peer(python: str, kind: str = "fastapi") -> Optional[str]:
    """Why the peer ``kind`` cannot run under ``python``, or None if it can."""
    if not os.path.isfile(os.path.join(PEERS_DIR, "fastapi_server.py")):
        return f"{PEERS_DIR} is absent (the peers live in a checkout of mtok, not in the installed package)"
    modules = ["fastapi", "uvicorn", "tokenizers", "zmq", "jinja2"]
    probe = "import importlib.util,sys; print(' '.join(m for m in sys.argv[1:] if importlib.util.find_spec(m) is None))"
    try:
        out = subprocess.run([python, "-c", probe, *modules], capture_output=True, text=True, timeout=60)
    except OSError as e:
        return f"cannot run {python}: {e}"
    missing = out.stdout.split()
    if out.returncode or missing:
        return (f"{python} lacks {', '.join(missing) or 'a working interpreter'}; install "
                f"benchmarks/peers/requirements.txt into it (see docs/benchmarks.md)")
    return None


class ReadyProcess:
    """A child that says where it listens on a stdout line; its stderr goes to a log
    file.  The tests start their servers with it too."""

    def __init__(self, command: List[str], env: Dict[str, str], log_prefix: str):
        self.log = tempfile.NamedTemporaryFile(prefix=log_prefix, suffix=".log", delete=False)
        self.proc = subprocess.Popen(command, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=self.log, text=True)
        self._lines: "queue.Queue[Optional[str]]" = queue.Queue()
        threading.Thread(target=self._pump, daemon=True).start()

    def _pump(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self._lines.put(line)
        self._lines.put(None)

    def wait_ready(self, pattern: "re.Pattern[str]", timeout: float = BOOT_TIMEOUT) -> "Optional[re.Match[str]]":
        """The first stdout line's match of ``pattern``; None if the child's stdout
        ends or the time runs out first."""
        deadline = time.monotonic() + timeout
        while True:
            try:
                line = self._lines.get(timeout=max(0.01, deadline - time.monotonic()))
            except queue.Empty:
                return None
            if line is None:
                return None
            m = pattern.search(line + " ")
            if m:
                return m

    @property
    def pid(self) -> int:
        return self.proc.pid

    def stderr(self) -> str:
        with open(self.log.name, errors="replace") as f:
            return f.read()

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 30.0) -> Optional[int]:
        """Signal the child and wait; kill it at the deadline.  Its exit status,
        or None if it had to be killed."""
        if self.proc.poll() is None:
            try:
                self.proc.send_signal(sig)
            except ProcessLookupError:
                pass
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            return None


class ServerProcess(ReadyProcess):
    """A server started for the benchmark, stopped when the ``with`` block ends."""

    def __init__(self, config: ServerConfig):
        self.config = config
        env = dict(os.environ, PYTHONUNBUFFERED="1", TOKENIZERS_PARALLELISM="false")
        env["PYTHONPATH"] = os.pathsep.join(p for p in (ROOT, env.get("PYTHONPATH")) if p)
        super().__init__(config.command(), env, f"mtok-bench-{config.kind}-")
        m = self.wait_ready(READY)
        if m is None:
            self.stop(signal.SIGKILL)
            raise RuntimeError(f"the {config.kind} server did not start; its log:\n{self.stderr()[-3000:]}")
        self.target = Target.from_url(m.group(1))

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 30.0) -> Optional[int]:
        code = super().stop(sig, timeout)
        try:
            os.unlink(self.log.name)
        except OSError:
            pass
        return code

    def __enter__(self) -> "ServerProcess":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.stop()


def get_json(target: Target, path: str, timeout: float = 10.0) -> Any:
    conn = http.client.HTTPConnection(target.host, target.port, timeout=timeout)
    try:
        conn.request("GET", path)
        resp = conn.getresponse()
        body = resp.read()
        return json.loads(body) if resp.status == 200 else None
    except (OSError, ValueError, http.client.HTTPException):
        return None
    finally:
        conn.close()


def discover_root_pid(target: Target) -> Optional[int]:
    """The root of a running mtok's process tree, from /get_server_info and /proc."""
    info = get_json(target, "/get_server_info")
    if not isinstance(info, dict) or not proc_available():
        return None
    pid = info.get("pid")  # the supervisor, where the server reports it
    if not isinstance(pid, int):
        pid = info.get("this_worker_pid")
        if isinstance(pid, int) and info.get("tokenizer_worker_num", 1) > 1:
            pid = parent_of(pid)  # workers are children of the supervisor
    if not isinstance(pid, int) or not os.path.exists(f"/proc/{pid}"):
        return None  # not on this machine
    return pid


def tree_for(pid: Optional[int]) -> Optional[ProcessTree]:
    return ProcessTree(pid) if pid and proc_available() else None


def tokenizer_for(target: Target, path: Optional[str], backend: str = "auto") -> Any:
    """The tokenizer to build prompts with: ``path`` if given, else the one the server reports."""
    from mtok.tokenizer.load import load_tokenizer

    if path is None:
        info = get_json(target, "/get_model_info")
        reported = info.get("tokenizer_path") if isinstance(info, dict) else None
        if reported and os.path.exists(reported):
            path = reported
    return load_tokenizer(path, backend)


def add_server_args(parser: argparse.ArgumentParser, workers: bool = True) -> None:
    """The flags that choose and start a server (shared by every sub-command that needs one)."""
    g = parser.add_argument_group("server")
    g.add_argument("--url", help="drive a running server instead of starting one (e.g. http://127.0.0.1:30000)")
    g.add_argument("--server-pid", type=int, help="with --url: the server's root pid, for its CPU time")
    g.add_argument("--server", choices=SERVERS, default="mtok", help="which server to start (default: mtok)")
    g.add_argument("--python", default=sys.executable, help="interpreter for the started server")
    if workers:
        g.add_argument("--tokenizer-worker-num", "--workers", dest="workers", type=int, default=1,
                       help="HTTP/tokenizer worker processes (uvicorn --workers for the peer)")
    g.add_argument("--engine-step-delay", type=float, default=0.0, help="seconds per engine step")
    g.add_argument("--tokenizer-path", help="tokenizer.json or a directory (default: mtok's built-in)")
    g.add_argument("--tokenizer-backend", choices=("auto", "hf", "python"), default="auto",
                   help="mtok's tokenizer backend")
    g.add_argument("--chat-template", metavar="FILE", help="the chat template both servers render (a .jinja "
                   "file, or JSON holding chat_template); chat-3turn renders it too, to cut the echo to the reply")
    g.add_argument("--tool-call-parser", metavar="NAME", help="the servers' tool-call parser (the peer has qwen25)")
    g.add_argument("--reasoning-parser", metavar="NAME", help="the servers' reasoning parser (the peer has qwen3)")
    g.add_argument("--server-arg", action="append", default=[], metavar="ARG",
                   help="one more flag for the started server (repeatable), e.g. --server-arg=--max-running-requests=512")


def server_config(args: argparse.Namespace, kind: Optional[str] = None, workers: Optional[int] = None) -> ServerConfig:
    return ServerConfig(kind=kind or args.server, python=args.python,
                        workers=workers if workers is not None else getattr(args, "workers", 1),
                        engine_step_delay=args.engine_step_delay, tokenizer_path=args.tokenizer_path,
                        tokenizer_backend=args.tokenizer_backend, chat_template=args.chat_template,
                        tool_call_parser=args.tool_call_parser, reasoning_parser=args.reasoning_parser,
                        extra=list(args.server_arg))
