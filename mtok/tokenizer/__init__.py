"""Tokenizer backends behind one small interface.

:func:`mtok.tokenizer.load.load_tokenizer` returns a :class:`Tokenizer`: the
``tokenizers`` library when it is importable (``hf``), mtok's own pure-Python
``tokenizer.json`` runtime otherwise (``python``).  Both give the same ids and
the same text; everything else in mtok sees only this interface.  This module
is the interface and the files it reads; the backends (``hf``, ``python`` over
``pyrt``) build on it, and ``load`` picks one, so the imports point one way.
"""

from __future__ import annotations

import functools
import json
import os
from dataclasses import dataclass, field
from typing import Any, Dict, FrozenSet, List, Optional, Sequence

from .bytelevel import token_bytes

DEFAULT_TOKENIZER_DIR = os.path.join(os.path.dirname(os.path.dirname(__file__)), "data", "default")

# Used only when no tokenizer_config.json names the eos token: the first of
# these that is a special added token, else the first in the vocabulary (Gemma 3
# has both "<eos>", special, and "</s>", an ordinary token).
_EOS_GUESSES = ("<|endoftext|>", "</s>", "<|end_of_text|>", "<eos>", "<|eot_id|>", "<|im_end|>")


class TokenizerError(Exception):
    """A tokenizer could not be found, parsed or supported."""


@dataclass
class TokenizerFiles:
    """Where a tokenizer lives and what its side files say about it."""

    json_path: str
    eos_tokens: List[str] = field(default_factory=list)
    bos_token: Optional[str] = None
    model_max_length: Optional[int] = None
    directory: Optional[str] = None  # set when the path was a directory: its side files were read
    config: Dict[str, Any] = field(default_factory=dict)  # special_tokens_map.json, then tokenizer_config.json

    @classmethod
    def locate(cls, path: Optional[str]) -> "TokenizerFiles":
        """Accept a ``tokenizer.json`` file or a directory holding one."""
        path = path or DEFAULT_TOKENIZER_DIR
        if os.path.isdir(path):
            directory, json_path = path, os.path.join(path, "tokenizer.json")
        else:
            directory, json_path = os.path.dirname(path) or ".", path
        if not os.path.isfile(json_path):
            raise TokenizerError(f"no tokenizer.json at {path!r}")
        files = cls(json_path)
        if os.path.isdir(path):
            files.directory = directory
            files._read_side_files(directory)
        return files

    def _read_side_files(self, directory: str) -> None:
        config: Dict = {}
        for name in ("special_tokens_map.json", "tokenizer_config.json"):
            try:
                with open(os.path.join(directory, name), encoding="utf-8") as f:
                    loaded = json.load(f)
            except (OSError, ValueError):
                continue
            if isinstance(loaded, dict):
                config.update(loaded)
        self.config = config
        eos = _token_content(config.get("eos_token"))
        if eos:
            self.eos_tokens = [eos]
        self.bos_token = _token_content(config.get("bos_token"))
        max_len = config.get("model_max_length")
        # HF writes 1e30 for "no limit"; treat anything absurd as unknown.
        if isinstance(max_len, (int, float)) and 0 < max_len < 1 << 40:
            self.model_max_length = int(max_len)


def _is_byte_token(token: Optional[str]) -> bool:
    return token is not None and len(token) == 6 and token.startswith("<0x") and token.endswith(">")


def _token_content(value) -> Optional[str]:
    if isinstance(value, dict):
        value = value.get("content")
    return value if isinstance(value, str) and value else None


class Tokenizer:
    """Ids in, text out.  Subclasses provide the ``_``-prefixed primitives.

    The public methods add what every backend shares: special-token facts read
    from the side files, and ``spaces_between_special_tokens=False``, which
    decodes the runs between added tokens separately and joins them with no
    separator (the slow-tokenizer semantics of ``transformers``).
    """

    backend = "?"
    # Whether encode_batch lets other threads run meanwhile (tokenizers releases
    # the GIL): only then is it worth encoding in two threads at once.
    releases_gil = False

    def __init__(self, files: TokenizerFiles):
        self.files = files
        self.path = files.json_path
        self.vocab_size: int = self._vocab_size()
        added = self._added_tokens()  # id -> (content, special)
        self.added_token_ids: FrozenSet[int] = frozenset(added)
        self.special_ids: FrozenSet[int] = frozenset(i for i, (_, special) in added.items() if special)
        self._added_content = {i: content for i, (content, _) in added.items()}
        eos_names = files.eos_tokens or self._guess_eos()
        self.eos_token_ids: FrozenSet[int] = frozenset(
            i for i in (self.token_to_id(t) for t in eos_names) if i is not None
        )
        self.bos_token_id: Optional[int] = self.token_to_id(files.bos_token) if files.bos_token else None
        self.max_model_len: Optional[int] = files.model_max_length

    def _guess_eos(self) -> List[str]:
        known = [t for t in _EOS_GUESSES if self.token_to_id(t) is not None]
        special = [t for t in known if self.token_to_id(t) in self.special_ids]
        return (special or known)[:1]

    @functools.cached_property
    def byte_token_ids(self) -> FrozenSet[int]:
        """SentencePiece byte tokens (<0xE4>): a ByteFallback decoder renders a run
        of them as a whole, so a later one can change how earlier ones read.
        Only decoding needs it, so it is built on first use, not in every worker."""
        return frozenset(i for i in range(self.vocab_size) if _is_byte_token(self.id_to_token(i)))

    def byte_table(self, skip_special_tokens: bool) -> Optional[List[bytes]]:
        """Per token id, the bytes a ByteLevel decoder makes of it (b"" for a
        skipped special token); None unless the decoder is exactly ByteLevel.

        ``decode(ids)`` is then the UTF-8 decoding of the concatenated bytes, so
        an incremental UTF-8 decoder streams the same text at one lookup per token.
        """
        cache = self.__dict__.setdefault("_byte_tables", {})
        if skip_special_tokens not in cache:
            table = None
            if self._byte_level_decoder():
                table = [b""] * self.vocab_size
                for i in range(self.vocab_size):
                    tok = self.id_to_token(i)
                    if tok is not None and not (skip_special_tokens and i in self.special_ids):
                        table[i] = token_bytes(tok)
            cache[skip_special_tokens] = table
        return cache[skip_special_tokens]

    # -- what a backend implements -------------------------------------------------
    def _byte_level_decoder(self) -> bool:
        return False

    def _vocab_size(self) -> int:
        raise NotImplementedError

    def _added_tokens(self) -> Dict[int, tuple]:
        raise NotImplementedError

    def encode_batch(self, texts: Sequence[str], add_special_tokens: bool = True) -> List[List[int]]:
        raise NotImplementedError

    def _decode_batch(self, seqs: Sequence[Sequence[int]], skip_special_tokens: bool) -> List[str]:
        raise NotImplementedError

    def id_to_token(self, token_id: int) -> Optional[str]:
        raise NotImplementedError

    def token_to_id(self, token: str) -> Optional[int]:
        raise NotImplementedError

    # -- shared --------------------------------------------------------------------
    def encode(self, text: str, add_special_tokens: bool = True) -> List[int]:
        return self.encode_batch([text], add_special_tokens)[0]

    def decode(
        self,
        ids: Sequence[int],
        skip_special_tokens: bool = True,
        spaces_between_special_tokens: bool = True,
    ) -> str:
        return self.decode_batch([ids], skip_special_tokens, spaces_between_special_tokens)[0]

    def decode_batch(
        self,
        seqs: Sequence[Sequence[int]],
        skip_special_tokens: bool = True,
        spaces_between_special_tokens: bool = True,
    ) -> List[str]:
        if spaces_between_special_tokens or not self.added_token_ids:
            return self._decode_batch(seqs, skip_special_tokens)
        return [self._decode_joined(ids, skip_special_tokens) for ids in seqs]

    def _decode_joined(self, ids: Sequence[int], skip_special_tokens: bool) -> str:
        parts: List[str] = []
        run: List[int] = []
        for i in ids:
            if i in self.added_token_ids:
                if run:
                    parts.append(self._decode_batch([run], skip_special_tokens)[0])
                    run = []
                if not (skip_special_tokens and i in self.special_ids):
                    parts.append(self._added_content[i])
            else:
                run.append(i)
        if run:
            parts.append(self._decode_batch([run], skip_special_tokens)[0])
        return "".join(parts)

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.path!r} vocab={self.vocab_size}>"


class LibraryTokenizer(Tokenizer):
    """A backend over an object with the ``tokenizers.Tokenizer`` API (``self._tok``):
    the library itself, or mtok's runtime, which mirrors it."""

    _tok: Any

    def _vocab_size(self) -> int:
        return self._tok.get_vocab_size(with_added_tokens=True)

    def _added_tokens(self) -> Dict[int, tuple]:
        return {i: (t.content, t.special) for i, t in self._tok.get_added_tokens_decoder().items()}

    def id_to_token(self, token_id: int) -> Optional[str]:
        return self._tok.id_to_token(token_id)

    def token_to_id(self, token: str) -> Optional[int]:
        return self._tok.token_to_id(token)

