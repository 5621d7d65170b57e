"""The WordLevel model: one id per whole word, or the unknown token's."""

from __future__ import annotations

from typing import Dict, List, Optional

from .. import TokenizerError


class DictVocab:
    """A vocabulary given as token -> id, with the lookups every model offers."""

    def __init__(self, vocab: Dict[str, int]):
        self.vocab = vocab
        self.vocab_r = {i: t for t, i in vocab.items()}

    def get_vocab_size(self) -> int:
        return len(self.vocab)

    def id_to_token(self, i: int) -> Optional[str]:
        return self.vocab_r.get(i)

    def token_to_id(self, token: str) -> Optional[int]:
        return self.vocab.get(token)


def read_vocab(d: dict, model: str) -> Dict[str, int]:
    vocab = d.get("vocab")
    if not isinstance(vocab, dict):
        raise TokenizerError(f"{model}: vocab must be an object of token -> id")
    return {str(t): int(i) for t, i in vocab.items()}


class WordLevel(DictVocab):
    def __init__(self, vocab: Dict[str, int], unk_token: str = "<unk>"):
        super().__init__(vocab)
        self.unk_token = unk_token

    @classmethod
    def from_json(cls, d: dict) -> "WordLevel":
        return cls(read_vocab(d, "WordLevel"), str(d.get("unk_token", "<unk>")))

    def tokenize(self, word: str) -> List[int]:
        i = self.vocab.get(word)
        if i is None:
            i = self.vocab.get(self.unk_token)
            if i is None:
                raise TokenizerError(f"WordLevel: {word!r} is unknown and so is the unk token {self.unk_token!r}")
        return [i]
