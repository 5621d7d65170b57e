"""``python -m mtok.bench tokenizer`` runs and writes its JSON (no timing is asserted)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

from support import ROOT

from mtok.tokenizer import DEFAULT_TOKENIZER_DIR


def test_tokenizer_bench_writes_rows(tmp_path):
    out = tmp_path / "tok.json"
    path = os.path.join(DEFAULT_TOKENIZER_DIR, "tokenizer.json")
    proc = subprocess.run(
        [sys.executable, "-m", "mtok.bench", "tokenizer", path, "--docs", "4", "--warm", "4", "--repeat", "1",
         "--json", str(out)],
        cwd=ROOT, capture_output=True, text=True, timeout=120,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    doc = json.loads(out.read_text())
    assert doc["command"] == "tokenizer" and doc["params"]["documents"] == 4
    mine = [r for r in doc["results"] if r["backend"] == "mtok"]
    assert len(mine) == 1 and "note" not in mine[0], mine
    row = mine[0]
    for key in ("load_s", "encode_cold_mb_s", "encode_warm_mb_s", "encode_warm_tokens_s", "decode_mb_s"):
        assert row[key] > 0, key
    assert "enc warm MB/s" in proc.stdout


def test_tokenizer_bench_multi_script_text_on_the_cpu_clock(tmp_path):
    from mtok.bench.tokenizer import cjk_prose, documents

    measured, warm = documents(4, 4, text="multi")
    prose = cjk_prose()
    if prose:  # this Python ships test/cjkencodings
        assert all(any("\u3040" <= c <= "\u9fff" or "\uac00" <= c <= "\ud7a3" for c in d) for d in measured + warm)
    out = tmp_path / "tok.json"
    path = os.path.join(DEFAULT_TOKENIZER_DIR, "tokenizer.json")
    proc = subprocess.run(
        [sys.executable, "-m", "mtok.bench", "tokenizer", path, "--docs", "4", "--warm", "4", "--repeat", "1",
         "--text", "multi", "--clock", "cpu", "--json", str(out)],
        cwd=ROOT, capture_output=True, text=True, timeout=120,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    doc = json.loads(out.read_text())
    assert doc["params"]["text"] == "multi" and doc["params"]["clock"] == "cpu"
    mine = [r for r in doc["results"] if r["backend"] == "mtok"]
    assert len(mine) == 1 and "note" not in mine[0] and mine[0]["encode_cold_mb_s"] > 0, mine


def test_measured_sets_are_disjoint_and_never_among_the_warm_documents():
    """A warm figure timed on text the tokenizer has already seen would time its caches."""
    from mtok.bench.tokenizer import documents

    measured, warm = documents(5, 20, sets=3)
    assert len(measured) == 15 and len(set(measured)) == 15
    assert not set(measured) & set(warm) and len(warm) == 20


def test_each_set_is_timed_cold_on_a_fresh_load_and_warm_on_first_sight():
    from mtok.bench import tokenizer as bench

    seen = []  # what each loaded instance encoded, in order

    class Recording(bench.Backend):
        name, module = "recording", "json"

        def load(self, path):
            mine = []
            seen.append(mine)
            return (lambda text: mine.append(text) or [len(text)]), (lambda ids: "x" * sum(ids))

    sets, warm = [["a1", "a2"], ["b1"], ["c1", "c2"]], ["w1", "w2"]
    row = bench.measure(lambda: Recording("f"), sets, warm, repeat=2)
    assert seen[:3] == sets  # a fresh load per set for the cold figure
    assert seen[3] == warm + [d for s in sets for d in s]  # warmed on others, then each set once
    assert len(seen) == 4 and row["tokens"] == 5
