"""``scripts/real_vllm.py`` without vLLM: it ends every process of an engine's
session, the orphans a SIGKILLed parent leaves too, and reads a tokenizer's
facts for the tiny model.  (The real engine is tested by test_real_vllm.py.)"""

from __future__ import annotations

import os
import signal
import subprocess
import sys

import pytest

from support import ROOT, wait_for

sys.path.insert(0, os.path.join(ROOT, "scripts"))
import real_vllm  # noqa: E402

pytestmark = [pytest.mark.fast, pytest.mark.unit, pytest.mark.timeout(60)]

# A parent that starts a child ignoring SIGTERM (an EngineCore stand-in), says
# its pid, and then waits to be killed.
TREE = r"""
import os, signal, subprocess, sys, time
child = subprocess.Popen([sys.executable, "-c",
                          "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(600)"])
print(child.pid, flush=True)
time.sleep(600)
"""


def alive(pid: int) -> bool:
    fields = real_vllm.proc_stat(pid)
    return fields is not None and fields[0] not in ("Z", "X")


def test_end_session_kills_the_orphans_of_a_killed_parent():
    parent = subprocess.Popen([sys.executable, "-c", TREE], stdout=subprocess.PIPE, text=True,
                              start_new_session=True)
    child = int(parent.stdout.readline())
    seen = real_vllm.session_and_descendants(parent.pid, set())
    assert {parent.pid, child} <= seen
    os.kill(parent.pid, signal.SIGKILL)  # as a crash of vLLM's API server: its child lives on
    parent.wait()
    assert alive(child) and child in real_vllm.session_and_descendants(parent.pid, set())
    real_vllm.end_session(parent.pid, seen, grace=0.5)
    wait_for(lambda: not alive(child), 10, what="the orphan to be killed")


def test_tokenizer_facts_and_the_venv_check(tmp_path):
    path, special = real_vllm.pick_tokenizer()
    vocab, ids = real_vllm.token_ids(path, special)
    if path == real_vllm.SHARED_TOKENIZER:
        assert (vocab, ids) == (32000, {"bos_token": 1, "eos_token": 2, "unk_token": 0})
    else:
        assert vocab == 8192 and set(ids) == {"eos_token"}
    assert "MTOK_VLLM_VENV" in real_vllm.why_not_installed(None)
    assert "real_vllm.py install" in real_vllm.why_not_installed(str(tmp_path))
