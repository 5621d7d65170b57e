"""The launch shared by the SGLang and vLLM stand-ins: a peer's model name and
server arguments in, an mtok server with the echo engine out.

- :func:`model_dir` maps a model name to a directory made by ``build_models.py``
  (the root is ``$MTOK_PEER_MODELS``, default ``/tmp/mtok-peer-models``).
- :func:`mtok_args` turns the peer's server arguments into mtok flags (the table
  in ``scripts/peer_suites.md``, "Server arguments"); one it does not know is
  passed on as it is, so mtok refuses it out loud.
- :func:`launch` starts ``$MTOK_PYTHON -m mtok.serve`` (default: this Python) in
  a process group of its own, with ``$MTOK_PEER_ARGS`` (split as a shell would)
  added, and waits for ``/health``; :func:`kill` ends the group.

Each server's output goes to ``$MTOK_PEER_LOGS`` (default ``/tmp/mtok-peer-logs``)
unless the test hands its own files.
"""

import itertools
import os
import re
import shlex
import signal
import subprocess
import sys
import time
import urllib.request
from typing import Dict, Iterable, List, Optional

HERE = os.path.dirname(os.path.abspath(__file__))

# name -> directory under $MTOK_PEER_MODELS, first match wins
MODEL_DIRS = [
    (r"meta-llama/", "llama3"),
    (r"Qwen/", "qwen3"),
    (r"deepseek-ai/.*Qwen", "qwen3"),
    (r"mistralai/", "mistral"),
    (r"HuggingFaceH4/zephyr-7b-beta$", "zephyr"),
    (r"cross-encoder/", "bert"),
]

RENAMED = {  # peer flag -> mtok flag (both take a value)
    "--context-length": "--context-length",
    "--context-len": "--context-length",
    "--max-model-len": "--context-length",
    "--max-payload-size": "--max-request-bytes",
    "--max-num-seqs": "--max-running-requests",
}
# GPU-runtime tuning, dropped with its value (--max-total-token: SGLang's argparse
# takes that prefix of --max-total-tokens, and test_large_max_new_tokens spells it so)
DROPPED_WITH_VALUE = {"--dtype", "--max-total-tokens", "--max-total-token", "--attention-backend",
                      "--chunked-prefill-size", "--decode-log-interval", "--device"}
# switches for what mtok always does, or GPU tuning without a value
DROPPED = {"--enforce-eager", "--disable-radix-cache", "--is-embedding", "--enable-metrics",
           "--enable-tokenizer-info-endpoint", "--disable-cuda-graph"}

_procs: Dict[int, subprocess.Popen] = {}
_serial = itertools.count(1)


def models_root() -> str:
    return os.environ.get("MTOK_PEER_MODELS", "/tmp/mtok-peer-models")


def model_dir(name: str) -> str:
    """The tokenizer directory standing in for model ``name``."""
    if os.path.isdir(name):
        return name
    for pattern, sub in MODEL_DIRS:
        if re.match(pattern, name):
            path = os.path.join(models_root(), sub)
            if not os.path.isfile(os.path.join(path, "tokenizer.json")):
                raise FileNotFoundError(f"{path}: no tokenizer.json (run scripts/peer_suites/build_models.py)")
            return path
    raise KeyError(f"no model directory for {name!r} (scripts/peer_suites/mtok_peer.py MODEL_DIRS)")


def mtok_args(args: Optional[Iterable]) -> List[str]:
    """The peer's server arguments as mtok flags."""
    args, out, i = [str(a) for a in (args or ())], [], 0
    while i < len(args):
        a = args[i]
        if a in RENAMED:
            out += [RENAMED[a], args[i + 1]]
            i += 2
        elif a in DROPPED_WITH_VALUE:
            i += 2
        elif a in DROPPED:
            i += 1
        else:
            out.append(a)
            i += 1
    return out


def _server_env(env: Optional[dict]) -> dict:
    """The test's environment less the stand-ins on PYTHONPATH (mtok must not see them)."""
    env = dict(os.environ if env is None else env)
    keep = [p for p in env.get("PYTHONPATH", "").split(os.pathsep)
            if p and os.path.abspath(p) != HERE]
    if keep:
        env["PYTHONPATH"] = os.pathsep.join(keep)
    else:
        env.pop("PYTHONPATH", None)
    return env


def launch(model: str, host: str, port: int, args: Optional[Iterable] = None, api_key: Optional[str] = None,
           env: Optional[dict] = None, stdout=None, stderr=None, timeout: float = 120.0) -> subprocess.Popen:
    """Start mtok for ``model`` on ``host:port`` and wait until ``/health`` answers 200."""
    cmd = [os.environ.get("MTOK_PYTHON", sys.executable), "-m", "mtok.serve", "--host", host, "--port", str(port),
           "--model-path", model_dir(model), "--served-model-name", model]
    cmd += mtok_args(args)
    if api_key:
        cmd += ["--api-key", api_key]
    cmd += shlex.split(os.environ.get("MTOK_PEER_ARGS", ""))
    log = None
    if stdout is None and stderr is None:
        logs = os.environ.get("MTOK_PEER_LOGS", "/tmp/mtok-peer-logs")
        os.makedirs(logs, exist_ok=True)
        name = "%s-%03d-%s.log" % (os.getpid(), next(_serial), re.sub(r"[^\w.-]", "_", model))
        log = open(os.path.join(logs, name), "w")
        stdout = stderr = log
        log.write(shlex.join(cmd) + "\n")
        log.flush()
    proc = subprocess.Popen(cmd, stdout=stdout, stderr=stderr, env=_server_env(env), start_new_session=True)
    if log is not None:
        log.close()  # the child holds its own copy
        proc.mtok_log = log.name
    _procs[proc.pid] = proc
    url, deadline = f"http://{host}:{port}/health", time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            _procs.pop(proc.pid, None)
            where = getattr(proc, "mtok_log", "the test's own files")
            raise RuntimeError(f"mtok exited with {proc.returncode} before /health: {shlex.join(cmd)} (log: {where})")
        try:
            with urllib.request.urlopen(url, timeout=5) as r:
                if r.status == 200:
                    return proc
        except OSError:
            pass
        time.sleep(0.2)
    kill(proc.pid)
    raise TimeoutError(f"mtok did not answer {url} in {timeout:.0f} s: {shlex.join(cmd)}")


def kill(pid: int, wait: float = 20.0) -> None:
    """SIGTERM to the server's process group, SIGKILL after ``wait`` seconds."""
    proc = _procs.pop(pid, None)
    try:
        os.killpg(pid, signal.SIGTERM)
    except ProcessLookupError:
        return
    deadline = time.monotonic() + wait
    while time.monotonic() < deadline:  # until every process of the group is gone
        if proc is not None:
            proc.poll()  # reaps the leader, which would otherwise linger as a zombie of the group
        try:
            os.killpg(pid, 0)
        except ProcessLookupError:
            return
        time.sleep(0.1)
    try:
        os.killpg(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    if proc is not None:
        proc.wait()
