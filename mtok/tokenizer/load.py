"""Which tokenizer backend serves a model, and loading it.

Kept apart from the interface (:mod:`mtok.tokenizer`), which both backends
build on: this module imports the backends, so no two files import each other.
``auto`` is ``tokenizers`` when it is importable, else mtok's own runtime.
"""

from __future__ import annotations

from typing import Optional

from . import Tokenizer, TokenizerError, TokenizerFiles

BACKENDS = ("auto", "hf", "python")


def hf_available() -> bool:
    try:
        import tokenizers  # noqa: F401
    except ImportError:
        return False
    return True


def load_tokenizer(path: Optional[str] = None, backend: str = "auto") -> Tokenizer:
    """Load the tokenizer at ``path`` (file or directory; None: mtok's built-in default)."""
    if backend not in BACKENDS:
        raise TokenizerError(f"unknown tokenizer backend {backend!r}; choose from {', '.join(BACKENDS)}")
    files = TokenizerFiles.locate(path)
    if backend == "auto":
        backend = "hf" if hf_available() else "python"
    if backend == "hf":
        from .hf import HFTokenizer

        return HFTokenizer(files)
    from .python import PyTokenizer

    return PyTokenizer(files)
