"""The ``python`` backend: mtok's own pure-Python ``tokenizer.json`` runtime (no dependencies)."""

from __future__ import annotations

from typing import List, Sequence

from . import LibraryTokenizer, TokenizerError, TokenizerFiles
from .pyrt import Tokenizer as Runtime


class PyTokenizer(LibraryTokenizer):
    backend = "python"

    def __init__(self, files: TokenizerFiles):
        try:
            self._tok = Runtime.from_file(files.json_path)
        except TokenizerError as e:
            raise TokenizerError(f"cannot load {files.json_path!r}: {e}") from e
        except (OSError, UnicodeDecodeError) as e:
            raise TokenizerError(f"cannot read {files.json_path!r}: {e}") from e
        self._tok.truncation = self._tok.padding = None  # as hf.py: never truncate or pad prompts
        super().__init__(files)

    def _byte_level_decoder(self) -> bool:
        from .pyrt.decoders import ByteLevel

        return type(self._tok.decoder) is ByteLevel

    def encode_batch(self, texts: Sequence[str], add_special_tokens: bool = True) -> List[List[int]]:
        return self._tok.encode_batch(texts, add_special_tokens)

    def _decode_batch(self, seqs: Sequence[Sequence[int]], skip_special_tokens: bool) -> List[str]:
        return self._tok.decode_batch(seqs, skip_special_tokens)
