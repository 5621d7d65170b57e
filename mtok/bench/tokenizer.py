"""Tokenizer throughput: mtok's pure-Python runtime beside ``tokenizers`` (and ``tiktoken``).

    python -m mtok.bench tokenizer [FILES...] [--docs N] [--repeat R] [--json out.json]

For each ``tokenizer.json`` (default: mtok's built-in one and every file in
``../shared/tokenizers`` when that folder exists) it reports the load time, and
encode and decode throughput over single calls on ~2 KB documents of natural
text, one thread: encode with the word cache cold (a fresh load) and warmed on
*other* documents than those measured.  The text is the docstrings of the
running Python's standard library (PSF License), read from its sources.

Only the standard library is needed; ``tokenizers`` and ``tiktoken`` are
measured when importable.
"""

from __future__ import annotations

import argparse
import ast
import glob
import json
import os
import sys
import sysconfig
import time
from typing import Callable, Dict, List, Optional, Sequence, Tuple

os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SHARED = os.path.join(ROOT, "..", "shared", "tokenizers")
DOC_SIZE = 2000

Encode = Callable[[str], List[int]]
Decode = Callable[[List[int]], str]


# -- text --------------------------------------------------------------------------

def stdlib_docstrings(lib_dir: Optional[str] = None) -> List[str]:
    """Docstrings of the standard library's modules, classes and functions, in file order."""
    lib_dir = lib_dir or sysconfig.get_paths()["stdlib"]
    out: List[str] = []
    for path in sorted(glob.glob(os.path.join(lib_dir, "*.py")) + glob.glob(os.path.join(lib_dir, "*", "*.py"))):
        if os.sep + "test" in path[len(lib_dir):] or "site-packages" in path:
            continue
        try:
            with open(path, encoding="utf-8") as f:
                tree = ast.parse(f.read())
        except (OSError, SyntaxError, UnicodeDecodeError, ValueError):
            continue
        for node in ast.walk(tree):
            if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
                doc = ast.get_docstring(node)
                if doc and len(doc) > 80:
                    out.append(doc)
    return out


def documents(count: int, size: int = DOC_SIZE) -> Tuple[List[str], List[str]]:
    """``count`` documents to measure, from the first modules in alphabetical order, and
    ``count`` to warm caches with, from the last ones: different text on the same subject."""
    docs: List[str] = []
    current = ""
    for text in stdlib_docstrings():
        current = f"{current}\n\n{text}" if current else text
        if len(current) >= size:
            docs.append(current[:size])
            current = ""
    if len(docs) < 2 * count:
        raise SystemExit(f"only {len(docs)} documents in this Python's stdlib; ask for at most {len(docs) // 2}")
    return docs[:count], docs[-count:]


# -- backends ------------------------------------------------------------------------

class Backend:
    """A loaded tokenizer under test: its name, and encode/decode callables."""

    name = "?"

    def __init__(self, path: str):
        self.path = path
        start = time.perf_counter()
        self.encode, self.decode = self.load(path)
        self.load_s = time.perf_counter() - start

    def load(self, path: str) -> Tuple[Encode, Decode]:
        raise NotImplementedError


class MtokBackend(Backend):
    name = "mtok"

    def load(self, path: str) -> Tuple[Encode, Decode]:
        from mtok.tokenizer.pyrt import Tokenizer

        tok = Tokenizer.from_file(path)
        return tok.encode, tok.decode


class HFBackend(Backend):
    name = "tokenizers"

    def load(self, path: str) -> Tuple[Encode, Decode]:
        import tokenizers

        tok = tokenizers.Tokenizer.from_file(path)
        return (lambda text: tok.encode(text).ids), tok.decode


class TiktokenBackend(Backend):
    name = "tiktoken"

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
    start = time.perf_counter()
    ids = [encode(d) for d in docs]
    return time.perf_counter() - start, ids


def _decode_all(decode: Decode, seqs: Sequence[List[int]]) -> float:
    start = time.perf_counter()
    for ids in seqs:
        decode(ids)
    return time.perf_counter() - start


def measure(make: Callable[[], Backend], docs: List[str], warm: List[str], repeat: int) -> Dict:
    nbytes = sum(len(d.encode("utf-8")) for d in docs)
    cold_backend = make()
    cold_s, ids = _encode_all(cold_backend.encode, docs)
    backend = make()
    _encode_all(backend.encode, warm)
    warm_s = min(_encode_all(backend.encode, docs)[0] for _ in range(repeat))
    ntok = sum(map(len, ids))
    decode_s = min(_decode_all(backend.decode, ids) for _ in range(repeat))
    decoded = sum(len(backend.decode(i).encode("utf-8")) for i in ids)
    return {
        "file": os.path.basename(backend.path),
        "backend": backend.name,
        "load_s": round(cold_backend.load_s, 4),
        "tokens": ntok,
        "encode_cold_mb_s": round(nbytes / cold_s / 1e6, 3),
        "encode_warm_mb_s": round(nbytes / warm_s / 1e6, 3),
        "encode_warm_tokens_s": round(ntok / warm_s),
        "decode_mb_s": round(decoded / decode_s / 1e6, 3),
        "decode_tokens_s": round(ntok / decode_s),
        "_ids": ids,
    }


def default_files() -> List[str]:
    from mtok.tokenizer import DEFAULT_TOKENIZER_DIR

    files = [os.path.join(DEFAULT_TOKENIZER_DIR, "tokenizer.json")]
    return files + sorted(glob.glob(os.path.join(SHARED, "*.json")))


COLUMNS = [
    ("file", "{:<22}"), ("backend", "{:<10}"), ("load_s", "{:>7.3f}"), ("encode_cold_mb_s", "{:>9.2f}"),
    ("encode_warm_mb_s", "{:>9.2f}"), ("encode_warm_tokens_s", "{:>10,}"), ("decode_mb_s", "{:>9.2f}"),
    ("decode_tokens_s", "{:>11,}"), ("vs_tokenizers", "{:>8}"),
]
HEADER = "file                   backend     load s   enc cold  enc warm   tokens/s   dec MB/s  dec tok/s  vs hf"


def run(files: List[str], count: int, repeat: int, out=sys.stdout) -> List[Dict]:
    docs, warm = documents(count)
    nbytes = sum(len(d.encode("utf-8")) for d in docs)
    print(f"{len(docs)} documents of ~{DOC_SIZE} characters ({nbytes / 1e6:.2f} MB) of stdlib docstrings; "
          f"encode MB/s cold and warmed on {len(warm)} other documents; best of {repeat}", file=out)
    print(HEADER, file=out)
    rows: List[Dict] = []
    have_hf = available("tokenizers")
    for path in files:
        try:
            mine = measure(lambda: MtokBackend(path), docs, warm, repeat)
        except Exception as e:  # report the file and go on with the others
            print(f"{os.path.basename(path):<22} mtok       cannot run it: {type(e).__name__}: {e}", file=out)
            continue
        group = [mine]
        if have_hf:
            hf = measure(lambda: HFBackend(path), docs, warm, repeat)
            mine["vs_tokenizers"] = f"{hf['encode_warm_mb_s'] and mine['encode_warm_mb_s'] / hf['encode_warm_mb_s']:.2f}x"
            mine["same_ids"] = mine["_ids"] == hf["_ids"]
            if not mine["same_ids"]:
                mine["vs_tokenizers"] += "!"  # the ids differ: a conformance bug, not a speed
            group.append(hf)
        for row in group:
            row.pop("_ids")
            print(" ".join(fmt.format(row.get(key, "")) for key, fmt in COLUMNS), file=out)
        rows.extend(group)
    if available("tiktoken"):
        try:
            row = measure(lambda: TiktokenBackend("cl100k_base"), docs, warm, repeat)
        except Exception as e:  # tiktoken fetches its files on first use; offline that fails
            print(f"tiktoken: skipped ({type(e).__name__}: {e})", file=out)
        else:
            row.pop("_ids")
            print(" ".join(fmt.format(row.get(key, "")) for key, fmt in COLUMNS), file=out)
            rows.append(row)
    return rows


def main(argv: Optional[List[str]] = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m mtok.bench tokenizer", description=__doc__.split("\n\n")[0])
    parser.add_argument("files", nargs="*", help="tokenizer.json files (default: built-in + ../shared/tokenizers)")
    parser.add_argument("--docs", type=int, default=150, help="documents to measure (default 150)")
    parser.add_argument("--repeat", type=int, default=3, help="warm runs; the best counts (default 3)")
    parser.add_argument("--json", metavar="OUT", help="also write the results as JSON")
    args = parser.parse_args(argv)
    rows = run(args.files or default_files(), args.docs, max(1, args.repeat))
    if args.json:
        import platform

        meta = {"python": platform.python_version(), "documents": args.docs, "doc_chars": DOC_SIZE}
        if available("tokenizers"):
            import tokenizers

            meta["tokenizers"] = tokenizers.__version__
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump({"meta": meta, "results": rows}, f, indent=2)
    return 0
