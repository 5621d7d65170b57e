"""The WordPiece model (BERT): greedy longest-match-first, as ``tokenizers``.

From each position the longest vocabulary entry wins (``continuing_subword_prefix``
in front of every piece but the first); if some position has no entry, or the word
has more than ``max_input_chars_per_word`` characters, the whole word is the
unknown token.
"""

from __future__ import annotations

from typing import Dict, List

from .. import TokenizerError
from .wordlevel import DictVocab, read_vocab


class WordPiece(DictVocab):
    def __init__(
        self,
        vocab: Dict[str, int],
        unk_token: str = "[UNK]",
        continuing_subword_prefix: str = "##",
        max_input_chars_per_word: int = 100,
    ):
        super().__init__(vocab)
        self.unk_token = unk_token
        self.prefix = continuing_subword_prefix
        self.max_input_chars_per_word = max_input_chars_per_word
        # Nothing longer than the longest entry can match, so the search starts there.
        self._longest = max((len(t) for t in vocab), default=0)
        self._longest_next = max(
            (len(t) - len(self.prefix) for t in vocab if t.startswith(self.prefix)), default=0
        )

    @classmethod
    def from_json(cls, d: dict) -> "WordPiece":
        return cls(
            read_vocab(d, "WordPiece"),
            str(d.get("unk_token", "[UNK]")),
            str(d.get("continuing_subword_prefix", "##")),
            int(d.get("max_input_chars_per_word", 100)),
        )

    def tokenize(self, word: str) -> List[int]:
        n = len(word)
        if n > self.max_input_chars_per_word:
            return [self._unk()]
        vocab, prefix = self.vocab, self.prefix
        ids: List[int] = []
        start = 0
        while start < n:
            if start == 0:
                end = min(n, self._longest)
                while end > 0 and word[:end] not in vocab:
                    end -= 1
                found = vocab.get(word[:end]) if end else None
            else:
                end = min(n, start + self._longest_next)
                while end > start and prefix + word[start:end] not in vocab:
                    end -= 1
                found = vocab.get(prefix + word[start:end]) if end > start else None
            if found is None:
                return [self._unk()]
            ids.append(found)
            start = end
        return ids

    def _unk(self) -> int:
        unk = self.vocab.get(self.unk_token)
        if unk is None:
            raise TokenizerError(f"WordPiece: the unknown token {self.unk_token!r} is not in the vocabulary")
        return unk
