"""Tokenizer throughput: mtok's pure-Python runtime beside ``tokenizers`` (and ``tiktoken``).

    python -m mtok.bench tokenizer [FILES...] [--docs N] [--repeat R] [--json out.json]

For each ``tokenizer.json`` (default: mtok's built-in one and every file in
``../shared/tokenizers`` when that folder exists) it reports the load time (mtok's
parsing the file, its prepared-table cache off; and for a file large enough to be
cached, ``load cached s``, a load that reads the tables an earlier one left), and
encode and decode throughput over single calls on ~2 KB documents of natural
text, one thread.  ``--repeat`` R sets of ``--docs`` documents each are measured,
and the best set counts:

- encode cold: each set on a fresh load (the load time is the best of those loads);
- encode warm: one more load, warmed on ``--warm`` *other* documents, the way
  earlier traffic warms a server, then each set once.  No set is measured on a
  tokenizer that has seen it: a second pass over the same text would time the
  caches, not the tokenizer.

Both backends are imported before any clock starts.  The text is the docstrings
of the running Python's standard library (PSF License), read from its sources;
``--text multi`` puts into each document, after ~3/4 of docstrings, a window of
the Chinese, Japanese and Korean prose of the stdlib's codec tests
(``test/cjkencodings``, PSF), when this Python has them.  That prose is only
~2 KB, so it repeats across documents: the warm figure flatters it, the cold one
much less.

Only the standard library is needed; ``tokenizers`` and ``tiktoken`` are
measured when importable.
"""

from __future__ import annotations

import argparse
import glob
import os
import sys
import sysconfig
import tempfile
import time
from typing import Callable, Dict, List, Optional, Sequence, Tuple

from . import report, stdlib_text

os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SHARED = os.path.join(ROOT, "..", "shared", "tokenizers")
DOC_SIZE = 2000

# The clock every figure is read on: wall time, or with --clock cpu this process's CPU
# time, which other work on a shared machine disturbs far less (both backends run in
# one thread here, so the two agree on an idle machine).
clock = time.perf_counter

Encode = Callable[[str], List[int]]
Decode = Callable[[List[int]], str]


# -- text --------------------------------------------------------------------------

def stdlib_docstrings() -> List[str]:
    """Docstrings of the standard library's modules, classes and functions, in file order."""
    out: List[str] = []
    for path in stdlib_text.sources():
        source = stdlib_text.read(path)
        if source is not None:
            out += stdlib_text.docstrings(source) or []
    return out


def cjk_prose() -> str:
    """The distinct texts of the stdlib's CJK codec tests, joined ("" when this Python lacks them)."""
    folder = os.path.join(sysconfig.get_paths()["stdlib"], "test", "cjkencodings")
    texts: List[str] = []
    for path in sorted(glob.glob(os.path.join(folder, "*-utf8.txt"))):
        text = stdlib_text.read(path)
        if text and len(text) > 100 and text not in texts:
            texts.append(text)
    return "\n".join(texts)


def multi_script(docs: List[str], prose: str, salt: int) -> List[str]:
    """Each document's last quarter replaced by a window of ``prose`` at a document-dependent offset."""
    if not prose:
        return docs
    out = []
    for i, doc in enumerate(docs):
        n = len(doc) // 4
        start = (i * 7919 + salt) % len(prose)
        window = (prose[start:] + "\n" + prose)[:n]
        out.append(doc[: len(doc) - n] + window)
    return out


def documents(count: int, warm: int, size: int = DOC_SIZE, text: str = "docstrings",
              sets: int = 1) -> Tuple[List[str], List[str]]:
    """``count * sets`` documents to measure (``sets`` runs of ``count``), spread over the
    whole library, and up to ``warm`` *other* documents to warm caches with, as a
    server's earlier traffic would."""
    docs: List[str] = []
    current = ""
    for doc in stdlib_docstrings():
        current = f"{current}\n\n{doc}" if current else doc
        if len(current) >= size:
            docs.append(current[:size])
            current = ""
    wanted = count * sets
    if len(docs) < 2 * wanted:
        raise SystemExit(f"only {len(docs)} documents in this Python's stdlib; ask for at most "
                         f"{len(docs) // 2} in all (--docs times --repeat)")
    step = len(docs) // wanted
    measured = list(range(0, step * wanted, step))
    order = [i for r in range(sets) for i in measured[r::sets]]  # each set spread over the library too
    chosen = [docs[i] for i in order]
    taken = set(measured)
    others = [d for i, d in enumerate(docs) if i not in taken][:warm]
    if text == "multi":
        prose = cjk_prose()
        return multi_script(chosen, prose, 0), multi_script(others, prose, 1000)
    return chosen, others


# -- backends ------------------------------------------------------------------------

class Backend:
    """A loaded tokenizer under test: its name, and encode/decode callables."""

    name = "?"
    module = ""  # imported before the clock starts: an import is the process's cost, not the file's

    def __init__(self, path: str):
        self.path = path
        __import__(self.module)
        start = clock()
        self.encode, self.decode = self.load(path)
        self.load_s = clock() - start

    def load(self, path: str) -> Tuple[Encode, Decode]:
        raise NotImplementedError


class MtokBackend(Backend):
    name = "mtok"
    module = "mtok.tokenizer.pyrt"

    def load(self, path: str) -> Tuple[Encode, Decode]:
        from mtok.tokenizer.pyrt import Tokenizer

        tok = Tokenizer.from_file(path, cache_dir="off")  # the file parsed: load_cached_s has the other figure
        return tok.encode, tok.decode


def cached_load_s(path: str) -> Optional[float]:
    """mtok's load from the tables a first load left in a fresh cache, or None for a
    file too small to be cached."""
    from mtok.tokenizer.pyrt import Tokenizer, prepared

    if os.path.getsize(path) < prepared.MIN_BYTES:
        return None
    with tempfile.TemporaryDirectory() as directory:
        Tokenizer.from_file(path, cache_dir=directory)
        start = clock()
        Tokenizer.from_file(path, cache_dir=directory)
        return round(clock() - start, 4)


class HFBackend(Backend):
    name = "tokenizers"
    module = "tokenizers"

    def load(self, path: str) -> Tuple[Encode, Decode]:
        import tokenizers

        tok = tokenizers.Tokenizer.from_file(path)
        return (lambda text: tok.encode(text).ids), tok.decode


class TiktokenBackend(Backend):
    name = "tiktoken"
    module = "tiktoken"

    def load(self, path: str) -> Tuple[Encode, Decode]:
        import tiktoken

        enc = tiktoken.get_encoding(path)
        return (lambda text: enc.encode(text, allowed_special="all")), enc.decode


def available(module: str) -> bool:
    try:
        __import__(module)
    except ImportError:
        return False
    return True


# -- measuring -----------------------------------------------------------------------

def _encode_all(encode: Encode, docs: Sequence[str]) -> Tuple[float, List[List[int]]]:
    start = clock()
    ids = [encode(d) for d in docs]
    return clock() - start, ids


def _decode_all(decode: Decode, seqs: Sequence[List[int]]) -> float:
    start = clock()
    for ids in seqs:
        decode(ids)
    return clock() - start


def measure(make: Callable[[], Backend], sets: List[List[str]], warm: List[str], repeat: int) -> Dict:
    """The best of ``sets`` (each a list of documents): encode cold on a fresh load each,
    encode warm on one load warmed on ``warm`` and not on the set, decode best of ``repeat``."""
    sizes = list(map(_size, sets))
    loads, cold, ids = [], [], []
    for docs, size in zip(sets, sizes):
        backend = make()
        loads.append(backend.load_s)
        seconds, got = _encode_all(backend.encode, docs)
        cold.append(size / seconds)
        ids += got
        del backend  # freed before the next load, which would otherwise load beside it
    backend = make()
    _encode_all(backend.encode, warm)
    warm_rates = []
    for docs, size in zip(sets, sizes):  # each set once: its first sight for this tokenizer
        seconds, got = _encode_all(backend.encode, docs)
        warm_rates.append((size / seconds, sum(map(len, got)) / seconds))
    first = ids[: len(ids) // len(sets)]
    decode_s = min(_decode_all(backend.decode, first) for _ in range(repeat))
    decoded = sum(len(backend.decode(i).encode("utf-8")) for i in first)
    ntok = sum(map(len, first))
    best_warm = max(warm_rates)
    return {
        "file": os.path.basename(backend.path),
        "backend": backend.name,
        "load_s": round(min(loads), 4),
        "tokens": sum(map(len, ids)),
        "encode_cold_mb_s": round(max(cold) / 1e6, 3),
        "encode_warm_mb_s": round(best_warm[0] / 1e6, 3),
        "encode_warm_tokens_s": round(best_warm[1]),
        "decode_mb_s": round(decoded / decode_s / 1e6, 3),
        "decode_tokens_s": round(ntok / decode_s),
        "_ids": ids,
    }


def _size(docs: Sequence[str]) -> int:
    return sum(len(d.encode("utf-8")) for d in docs)


def default_files() -> List[str]:
    from mtok.tokenizer import DEFAULT_TOKENIZER_DIR

    files = [os.path.join(DEFAULT_TOKENIZER_DIR, "tokenizer.json")]
    return files + sorted(glob.glob(os.path.join(SHARED, "*.json")))


COLUMNS = [
    ("file", "file"), ("backend", "backend"), ("load s", "load_s"), ("load cached s", "load_cached_s"),
    ("enc cold MB/s", "encode_cold_mb_s"),
    ("enc warm MB/s", "encode_warm_mb_s"), ("enc tokens/s", "encode_warm_tokens_s"), ("dec MB/s", "decode_mb_s"),
    ("dec tokens/s", "decode_tokens_s"), ("vs tokenizers", "vs_tokenizers"), ("cold vs", "cold_vs_tokenizers"),
    ("note", "note"),
]


def run(files: List[str], count: int, warm_count: int, repeat: int, text: str = "docstrings") -> List[Dict]:
    docs, warm = documents(count, warm_count, text=text, sets=repeat)
    sets = [docs[i:i + count] for i in range(0, len(docs), count)]
    what = "stdlib docstrings" + (" and CJK prose" if text == "multi" else "")
    print(f"{repeat} set(s) of {count} documents of ~{DOC_SIZE} characters ({_size(sets[0]) / 1e6:.2f} MB each) "
          f"of {what}, one encode/decode call each; encode cold on a fresh load per set, warm on one load "
          f"warmed on {len(warm)} other documents; the best set counts")
    rows: List[Dict] = []
    have_hf = available("tokenizers")
    for path in files:
        name = os.path.basename(path)
        print(f"  {name} ...", file=sys.stderr, flush=True)
        try:
            mine = measure(lambda: MtokBackend(path), sets, warm, repeat)
        except Exception as e:  # report the file and go on with the others
            rows.append({"file": name, "backend": "mtok", "note": f"cannot run it: {type(e).__name__}: {e}"})
            continue
        mine["load_cached_s"] = cached_load_s(path)
        rows.append(mine)
        if have_hf:
            hf = measure(lambda: HFBackend(path), sets, warm, repeat)
            mine["vs_tokenizers"] = round(mine["encode_warm_mb_s"] / hf["encode_warm_mb_s"], 2)
            mine["cold_vs_tokenizers"] = round(mine["encode_cold_mb_s"] / hf["encode_cold_mb_s"], 2)
            if mine["_ids"] != hf["_ids"]:
                mine["note"] = "ids differ from tokenizers"  # a conformance bug, whatever the speed
            rows.append(hf)
    if available("tiktoken"):
        try:
            rows.append(measure(lambda: TiktokenBackend("cl100k_base"), sets, warm, repeat))
        except Exception as e:  # tiktoken fetches its files on first use; offline that fails
            rows.append({"file": "cl100k_base", "backend": "tiktoken", "note": f"skipped: {type(e).__name__}: {e}"})
    for row in rows:
        row.pop("_ids", None)
    print(report.table(rows, COLUMNS))
    return rows


def main(argv: Optional[List[str]] = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m mtok.bench tokenizer", description=__doc__.split("\n\n")[0])
    parser.add_argument("files", nargs="*", help="tokenizer.json files (default: built-in + ../shared/tokenizers)")
    parser.add_argument("--docs", type=int, default=100, help="documents in each measured set (default 100)")
    parser.add_argument("--warm", type=int, default=1000, help="other documents that warm the caches (default 1000, or all the stdlib has)")
    parser.add_argument("--repeat", type=int, default=3, help="sets of --docs documents measured; the best counts (default 3)")
    parser.add_argument("--text", choices=("docstrings", "multi"), default="docstrings",
                        help="docstrings only, or with CJK prose in each document (default docstrings)")
    parser.add_argument("--clock", choices=("wall", "cpu"), default="wall",
                        help="wall time, or this process's CPU time (steadier on a shared machine)")
    parser.add_argument("--make-262k", metavar="OUT",
                        help="write a Gemma-3-sized (262,144) SentencePiece-BPE tokenizer.json trained on this "
                             "Python's stdlib (needs tokenizers) to OUT, then measure the files given")
    parser.add_argument("--json", metavar="OUT", help="also write the results as JSON")
    args = parser.parse_args(argv)
    global clock
    clock = time.process_time if args.clock == "cpu" else time.perf_counter
    if args.make_262k:
        from .tokenizer_262k import write_262k

        write_262k(args.make_262k)
    files = args.files or default_files()
    rows = run(files, args.docs, args.warm, max(1, args.repeat), args.text)
    versions = {m: getattr(sys.modules.get(m), "__version__", None) for m in ("tokenizers", "tiktoken")}
    params = {"files": files, "text": args.text, "clock": args.clock, "documents": args.docs, "warm_documents": args.warm, "doc_chars": DOC_SIZE,
              "repeat": args.repeat, **versions}
    report.write_json(args.json, "tokenizer", params, rows)
    return 0
