"""Several models behind one frontend: what each process knows of them.

``--model NAME=PATH[:ENGINE]`` (repeatable) names a tokenizer and, optionally,
the engine that serves it; without ``--model`` there is one model, made of
``--tokenizer-path``, ``--served-model-name`` and ``--engine``.  The first model
is the default for requests that name none.  Every process loads each distinct
tokenizer once.

The registry (this module and :mod:`mtok.chat_templates`, each model's
template) sits low in the package, on the tokenizer and chat libraries: the
settings check (:mod:`mtok.wire.args`) names the models, and every layer above
serves them.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Dict, List, Optional

from .chat_templates import ModelChat
from .validate import bad, show
from .tokenizer import Tokenizer
from .tokenizer.load import load_tokenizer


@dataclass(frozen=True)
class ModelSpec:
    name: str
    tokenizer_path: Optional[str]
    engine: str

    @classmethod
    def parse(cls, text: str, default_engine: str) -> "ModelSpec":
        """``NAME=PATH`` or ``NAME=PATH:ENGINE``.  An engine spec has colons of its
        own (``module:attr``), so the path is the longest prefix that exists."""
        name, sep, rest = text.partition("=")
        if not sep or not name or not rest:
            raise ValueError(f"--model wants NAME=PATH[:ENGINE], not {text!r}")
        path, engine = rest, default_engine
        cut = rest.find(":")
        while cut != -1:
            if os.path.exists(rest[:cut]):
                path, engine = rest[:cut], rest[cut + 1:] or default_engine
                break
            cut = rest.find(":", cut + 1)
        return cls(name, path, engine)


def load_tokenizers(specs: List[ModelSpec], backend: str) -> Dict[str, Tokenizer]:
    """name -> tokenizer, sharing one instance between models with the same path."""
    by_path: Dict[Optional[str], Tokenizer] = {}
    out = {}
    for spec in specs:
        if spec.tokenizer_path not in by_path:
            by_path[spec.tokenizer_path] = load_tokenizer(spec.tokenizer_path, backend)
        out[spec.name] = by_path[spec.tokenizer_path]
    return out


@dataclass
class ModelEntry:
    """One served model as the HTTP side knows it: tokenizer, context length, chat template(s)."""

    name: str
    tokenizer: Tokenizer
    context_length: int  # the limit in force: the configured one, or the engine's when that is smaller
    chat: ModelChat = field(default_factory=lambda: ModelChat(None))  # its chat template(s), if any
    configured_length: int = 0  # --context-length, else the tokenizer's (0: context_length as given)

    def __post_init__(self) -> None:
        self.configured_length = self.configured_length or self.context_length

    def check_ids(self, seqs: List[List[int]], param: str) -> None:
        n = self.tokenizer.vocab_size
        for ids in seqs:
            for t in ids:
                if not 0 <= t < n:
                    raise bad(f"token id {show(t)} is out of range for a vocabulary of {n}", param)

