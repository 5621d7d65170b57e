"""The flag table (mtok/flags.py): docs/operations.md's, --help, ServerArgs and check() all come from it."""

from __future__ import annotations

import argparse
import dataclasses
import os
import subprocess
import sys

import pytest

from mtok import flags
from mtok.wire.args import ServerArgs
from support import ROOT

pytestmark = [pytest.mark.fast, pytest.mark.unit]


def docs_flag_table() -> str:
    with open(os.path.join(ROOT, "docs", "operations.md"), encoding="utf-8") as f:
        text = f.read()
    section = text[text.index("\n## Flags\n"):]
    start = section.index(flags.TABLE_HEADER[0])
    end = section.index("\n\n", start)
    return section[start:end + 1]


def test_the_docs_flag_table_is_generated_from_the_table():
    assert docs_flag_table() == flags.markdown(), \
        "run python -m mtok.flags and paste it into docs/operations.md's Flags"


def test_every_flag_is_in_help_and_every_carried_setting_is_a_field():
    out = subprocess.run([sys.executable, "-m", "mtok.serve", "--help"], cwd=ROOT, capture_output=True, text=True,
                         timeout=60, env=dict(os.environ, COLUMNS="200"))
    assert out.returncode == 0, out.stderr
    for s in flags.SETTINGS:
        for flag in s.flags:
            assert flag in out.stdout, flag
        assert s.help.split(" (default")[0].split(";")[0] in out.stdout, s.flags[0]
    names = [f.name for f in dataclasses.fields(ServerArgs)]
    assert names == [s.name for s in flags.SETTINGS if s.carried]
    assert "api_key_file" not in names  # read once at startup; the key itself travels


def test_the_dataclass_defaults_are_the_command_lines():
    parser = argparse.ArgumentParser()
    ServerArgs.add_cli_args(parser)
    assert ServerArgs.from_cli_args(parser.parse_args([])) == ServerArgs()
    a, b = ServerArgs(), ServerArgs()
    a.models.append("x=y")
    model = next(s for s in flags.SETTINGS if s.name == "models")
    assert b.models == [] and model.default == []  # list defaults are fresh each time


@pytest.mark.parametrize("field, value, message", [
    ("port", 65536, "--port must be in 0..65535"),
    ("port", -1, "--port must be in 0..65535"),
    ("tokenizer_worker_num", 0, "--tokenizer-worker-num must be at least 1"),
    ("max_running_requests", 0, "--max-running-requests must be positive"),
    ("max_stop_chars", -5, "--max-stop-chars must be positive"),
    ("worker_timeout", 0.0, "--worker-timeout must be positive"),
    ("request_timeout", -1.0, "--request-timeout must be positive"),
    ("engine_step_delay", -0.5, "--engine-step-delay must not be negative"),
    ("context_length", 1, "--context-length must be at least 2"),
])
def test_each_flag_is_checked_by_its_row(field, value, message):
    with pytest.raises(ValueError, match=message):
        ServerArgs(**{field: value}).check()


def test_edge_values_pass_and_cross_flag_checks_stay():
    ServerArgs(port=0, engine_step_delay=0.0, context_length=2).check()
    ServerArgs(port=65535, context_length=None).check()
    with pytest.raises(ValueError, match="--model replaces --tokenizer-path"):
        ServerArgs(models=["a=x"], tokenizer_path="y").check()
    with pytest.raises(ValueError, match="give --api-key or --api-key-file, not both"):
        parser = argparse.ArgumentParser()
        ServerArgs.add_cli_args(parser)
        ServerArgs.from_cli_args(parser.parse_args(["--api-key", "k", "--api-key-file", __file__]))


def test_several_problems_are_reported_together():
    with pytest.raises(ValueError) as e:
        ServerArgs(port=-1, max_connections=0).check()
    assert "--port must be in 0..65535" in str(e.value) and "--max-connections must be positive" in str(e.value)
