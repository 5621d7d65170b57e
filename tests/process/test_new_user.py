"""What a new user meets first (issue 25, "tried as a new user would"): the
command line's error messages, said once and saying what to type instead, and
test runs that leave no server logs behind."""

from __future__ import annotations

import configparser
import gc
import os
import re
import subprocess
import sys

import pytest

from support import ROOT, Server

pytestmark = pytest.mark.fast


def serve(*args: str) -> subprocess.CompletedProcess:
    """``python -m mtok.serve ARGS`` to its exit."""
    return subprocess.run([sys.executable, "-m", "mtok.serve", "--port", "0", *args], cwd=ROOT,
                          capture_output=True, text=True, timeout=60)


def test_a_malformed_model_flag_is_said_once():
    out = serve("--model", "foo")
    assert out.returncode == 2, out.stderr
    assert out.stderr.count("--model wants NAME=PATH[:ENGINE], not 'foo'") == 1, out.stderr


@pytest.mark.parametrize("flags", [["--engine", "sglang:localhost:1234"],
                                   ["--model", "m=mtok/data/default:sglang:localhost:1234"]], ids=["engine", "model"])
def test_an_upstream_url_without_scheme_says_how_to_write_it(flags):
    out = serve(*flags)
    assert out.returncode != 0
    assert "No module named" not in out.stderr, out.stderr
    assert out.stderr.count("'sglang:http://localhost:1234'") == 1, out.stderr


def test_a_bad_detokenize_key_is_refused_at_startup_naming_the_choices():
    out = serve("--detokenize-key", "json")
    assert out.returncode == 2, out.stderr
    line = out.stderr.strip().splitlines()[-1]
    assert "argument --detokenize-key: invalid choice: 'json'" in line, out.stderr
    assert all(choice in line for choice in ("both", "text", "prompt")), out.stderr


def test_a_boot_failure_is_said_once():
    out = serve("--engine", "no_such_module_here:Engine")
    assert out.returncode == 3, out.stderr
    assert out.stderr.count("No module named 'no_such_module_here'") == 1, out.stderr


def test_a_servers_log_file_goes_with_it():
    """Issue 25: every test server left its /tmp/mtok-test-*.log behind."""
    srv = Server("--model", "foo", expect_ready=False)
    assert srv.proc.wait(60) == 2
    path = srv.log.name
    assert "--model wants" in srv.stderr()
    del srv
    gc.collect()
    assert not os.path.exists(path)


def test_install_lines_work_from_a_checkout():
    """Issue 25: the README said ``pip install mtok[chat]``; PyPI's ``mtok`` is
    another project, so every install line names the checkout or the package."""
    wrong = re.compile(r"pip install [\"']?mtok\[")
    found = []
    for folder, _, names in os.walk(ROOT):
        if any(part in folder for part in (".git", "node_modules", ".tox", "venv")):
            continue
        for name in names:
            if name.endswith((".md", ".py", ".cfg", ".txt")):
                path = os.path.join(folder, name)
                with open(path, encoding="utf-8", errors="replace") as f:
                    found += [f"{os.path.relpath(path, ROOT)}: {m.group(0)}" for m in wrong.finditer(f.read())]
    found = [f for f in found if not f.startswith(os.path.join("tests", "process", "test_new_user.py"))]
    assert not found, found


def test_the_test_extra_installs_the_chat_reference():
    """Without transformers about 250 chat differential tests skip on a fresh clone."""
    config = configparser.ConfigParser()
    config.read(os.path.join(ROOT, "setup.cfg"))
    extra = [line.split("#")[0].strip() for line in config["options.extras_require"]["test"].splitlines()]
    assert "transformers" in extra
