"""The WordLevel model: one id per whole word, or the unknown token's."""

from __future__ import annotations

from typing import Dict, List, Optional

from .. import TokenizerError


class WordLevel:
    def __init__(self, vocab: Dict[str, int], unk_token: str = "<unk>"):
        self.vocab = vocab
        self.vocab_r = {i: t for t, i in vocab.items()}
        self.unk_token = unk_token

    @classmethod
    def from_json(cls, d: dict) -> "WordLevel":
        vocab = d.get("vocab")
        if not isinstance(vocab, dict):
            raise TokenizerError("WordLevel: vocab must be an object of token -> id")
        return cls({str(t): int(i) for t, i in vocab.items()}, str(d.get("unk_token", "<unk>")))

    def get_vocab_size(self) -> int:
        return len(self.vocab)

    def id_to_token(self, i: int) -> Optional[str]:
        return self.vocab_r.get(i)

    def token_to_id(self, token: str) -> Optional[int]:
        return self.vocab.get(token)

    def tokenize(self, word: str) -> List[int]:
        i = self.vocab.get(word)
        if i is None:
            i = self.vocab.get(self.unk_token)
            if i is None:
                raise TokenizerError(f"WordLevel: {word!r} is unknown and so is the unk token {self.unk_token!r}")
        return [i]
