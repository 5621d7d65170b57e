"""scripts/train_default_tokenizer.py reproduces the committed built-in tokenizer."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from support import ROOT, import_real

tokenizers = import_real("tokenizers")

pytestmark = pytest.mark.slow

SCRIPT = os.path.join(ROOT, "scripts", "train_default_tokenizer.py")


def test_training_script_reproduces_the_committed_files():
    sys.path.insert(0, os.path.dirname(SCRIPT))
    try:
        import train_default_tokenizer as script
    finally:
        sys.path.pop(0)
    here = {"python": "%d.%d.%d" % sys.version_info[:3], "tokenizers": tokenizers.__version__}
    if here != script.MADE_WITH:
        pytest.skip(f"the files were made with {script.MADE_WITH}; this is {here} (another stdlib)")
    proc = subprocess.run([sys.executable, SCRIPT, "--check"], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
