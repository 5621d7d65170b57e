"""The ``tokenizers`` backend (the optional ``hf`` extra)."""

from __future__ import annotations

import os
from typing import List, Sequence

from . import LibraryTokenizer, TokenizerError, TokenizerFiles

# encode() holds the GIL for the whole call; encode_batch_fast releases it, and
# without parallelism it does so without spawning a Rayon pool per process.
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


class HFTokenizer(LibraryTokenizer):
    backend = "hf"
    releases_gil = True  # encode_batch_fast

    def __init__(self, files: TokenizerFiles):
        try:
            import tokenizers
        except ImportError as e:  # pragma: no cover - guarded by load_tokenizer
            raise TokenizerError("the 'hf' backend needs the tokenizers package "
                                 "(pip install tokenizers; from a checkout, pip install -e '.[hf]')") from e
        try:
            self._tok = tokenizers.Tokenizer.from_file(files.json_path)
        except Exception as e:
            raise TokenizerError(f"cannot load {files.json_path!r}: {e}") from e
        # A file's truncation and padding are settings for training pipelines; a
        # server limits prompts by context length and never pads them.
        self._tok.no_truncation()
        self._tok.no_padding()
        self._encode_batch = getattr(self._tok, "encode_batch_fast", self._tok.encode_batch)
        super().__init__(files)

    def _byte_level_decoder(self) -> bool:
        import tokenizers

        return isinstance(self._tok.decoder, tokenizers.decoders.ByteLevel)

    def encode_batch(self, texts: Sequence[str], add_special_tokens: bool = True) -> List[List[int]]:
        return [e.ids for e in self._encode_batch(list(texts), add_special_tokens=add_special_tokens)]

    def _decode_batch(self, seqs: Sequence[Sequence[int]], skip_special_tokens: bool) -> List[str]:
        if len(seqs) == 1:
            return [self._tok.decode(list(seqs[0]), skip_special_tokens=skip_special_tokens)]
        return self._tok.decode_batch([list(s) for s in seqs], skip_special_tokens=skip_special_tokens)
