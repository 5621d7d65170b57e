"""Natural text that every Python has offline, under a clear licence (PSF): its own stdlib's
docstrings and comments.  Used to train the built-in tokenizer and to benchmark tokenizers."""

from __future__ import annotations

import ast
import io
import os
import sysconfig
import tokenize
from typing import Iterator, List, Optional

SKIP_DIRS = {"test", "tests", "idle_test", "site-packages", "dist-packages", "__pycache__"}


def sources(lib_dir: Optional[str] = None) -> Iterator[str]:
    """The paths of the standard library's modules (tests excluded), in a fixed order."""
    lib_dir = lib_dir or sysconfig.get_paths()["stdlib"]
    for dirpath, dirnames, filenames in os.walk(lib_dir):
        dirnames[:] = sorted(d for d in dirnames if d not in SKIP_DIRS)
        for name in sorted(filenames):
            if name.endswith(".py"):
                yield os.path.join(dirpath, name)


def read(path: str) -> Optional[str]:
    try:
        with open(path, encoding="utf-8") as f:
            return f.read()
    except (OSError, UnicodeDecodeError):
        return None


def docstrings(source: str) -> Optional[List[str]]:
    """The docstrings of a module, its classes and functions; None if it does not parse."""
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError):
        return None
    out = []
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            doc = ast.get_docstring(node)
            if doc:
                out.append(doc)
    return out


def comments(source: str) -> List[str]:
    out = []
    try:
        for tok in tokenize.generate_tokens(io.StringIO(source).readline):
            if tok.type == tokenize.COMMENT:
                text = tok.string.lstrip("#").strip()
                if text:
                    out.append(text)
    except (SyntaxError, tokenize.TokenError):
        pass
    return out
