"""The core imports nothing outside the standard library."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from support import ROOT

pytestmark = pytest.mark.fast

SCRIPT = r"""
import importlib, json, os, pkgutil, sys, sysconfig
sys.modules["tokenizers"] = None   # hide the optional dependency, even where it is installed
sys.modules["tiktoken"] = None
sys.modules["jinja2"] = None       # the chat template engine's optional backend
before = set(sys.modules)
import mtok
names = sorted(m.name for m in pkgutil.walk_packages(mtok.__path__, "mtok."))
for name in names:
    importlib.import_module(name)
from mtok.tokenizer.load import load_tokenizer
tok = load_tokenizer(None)
assert tok.backend == "python", tok.backend
assert tok.decode(tok.encode("héllo wörld 👋")) == "héllo wörld 👋"
from mtok.chat import ChatTemplate
chat = ChatTemplate("{% for m in messages %}{{ m.content|upper }}{% endfor %}")
assert chat.backend == "python" and chat.render(messages=[{"content": "hi"}]) == "HI", chat.backend
stdlib = {os.path.realpath(sysconfig.get_paths()[k]) for k in ("stdlib", "platstdlib")}
outside = []
for name in set(sys.modules) - before:
    mod = sys.modules[name]
    top = name.split(".")[0]
    if mod is None or top == "mtok" or name.startswith("__"):
        continue
    if hasattr(sys, "stdlib_module_names"):
        ok = top in sys.stdlib_module_names or top.startswith("_")
    else:
        path = getattr(mod, "__file__", None)
        path = os.path.realpath(path) if path else ""
        ok = not path or (any(path.startswith(p) for p in stdlib) and "site-packages" not in path)
    if not ok:
        outside.append(name)
print(json.dumps({"modules": names, "outside": sorted(outside)}))
"""


def test_core_imports_only_the_standard_library():
    out = subprocess.run([sys.executable, "-c", SCRIPT], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    result = json.loads(out.stdout.strip().splitlines()[-1])
    assert "mtok.serve" in result["modules"] and "mtok.tokenizer.pyrt" in result["modules"]
    assert "mtok.chat.engine" in result["modules"]
    assert result["outside"] == [], f"non-stdlib imports: {result['outside']}"


def test_serve_starts_from_a_checkout_without_installing(tmp_path):
    """`python -m mtok.serve --help` works with only the checkout on the path."""
    out = subprocess.run([sys.executable, "-S", "-m", "mtok.serve", "--help"], cwd=ROOT, capture_output=True,
                         text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert "--tokenizer-worker-num" in out.stdout
