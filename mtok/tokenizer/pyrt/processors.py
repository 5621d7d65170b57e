"""Post-processors: add a model's special tokens around the encoded sequence.

Only ids matter here (mtok needs no offsets or type ids), so an encoding is a
list of ids and a processor maps the list of encodings (one per input
sequence; mtok always has one) to the list of parts that get concatenated.
"""

from __future__ import annotations

from typing import Dict, List, Optional

from .. import TokenizerError
from ._dispatch import build

Encodings = List[List[int]]


class PostProcessor:
    def added_tokens(self, is_pair: bool) -> int:
        return 0

    def process(self, encodings: Encodings, add_special_tokens: bool) -> Encodings:
        return encodings


class ByteLevel(PostProcessor):
    """Only trims offsets in tokenizers; ids pass through."""

    @classmethod
    def from_json(cls, d: dict) -> "ByteLevel":
        return cls()


class _Wrapping(PostProcessor):
    """BERT and RoBERTa: ``cls A sep``, then each further sequence wrapped by ``pair_ends``."""

    def __init__(self, sep: int, cls_id: int):
        self.sep, self.cls = sep, cls_id

    @classmethod
    def from_json(cls, d: dict) -> "_Wrapping":
        return cls(_token_id(d["sep"]), _token_id(d["cls"]))

    def pair_ends(self, ids: List[int]) -> List[int]:
        raise NotImplementedError

    def process(self, encodings: Encodings, add_special_tokens: bool) -> Encodings:
        if not add_special_tokens:
            return encodings
        return [[self.cls, *ids, self.sep] if i == 0 else self.pair_ends(ids) for i, ids in enumerate(encodings)]


class BertProcessing(_Wrapping):
    def added_tokens(self, is_pair: bool) -> int:
        return 3 if is_pair else 2

    def pair_ends(self, ids: List[int]) -> List[int]:
        return [*ids, self.sep]


class RobertaProcessing(_Wrapping):
    def added_tokens(self, is_pair: bool) -> int:
        return 4 if is_pair else 2

    def pair_ends(self, ids: List[int]) -> List[int]:
        return [self.sep, *ids, self.sep]


def _token_id(pair) -> int:
    """``["</s>", 2]`` -> 2."""
    if not (isinstance(pair, list) and len(pair) == 2 and isinstance(pair[1], int)):
        raise TokenizerError(f"expected a [token, id] pair, got {pair!r}")
    return pair[1]


class TemplateProcessing(PostProcessor):
    """Templates of ``Sequence`` (A or B) and ``SpecialToken`` pieces."""

    def __init__(self, single: list, pair: list, special_tokens: Dict[str, List[int]]):
        self.single = [self._piece(p) for p in single]
        self.pair = [self._piece(p) for p in pair]
        self.special_tokens = special_tokens

    @staticmethod
    def _piece(p: dict):
        """("seq", 0 or 1) or ("special", token id string)."""
        if not isinstance(p, dict) or len(p) != 1:
            raise TokenizerError(f"TemplateProcessing: bad template piece {p!r}")
        (kind, body), = p.items()
        if kind == "Sequence" and body.get("id") in ("A", "B"):
            return ("seq", 0 if body["id"] == "A" else 1)
        if kind == "SpecialToken" and isinstance(body.get("id"), str):
            return ("special", body["id"])
        raise TokenizerError(f"TemplateProcessing: bad template piece {p!r}")

    @classmethod
    def from_json(cls, d: dict) -> "TemplateProcessing":
        specials = {}
        for name, tok in d.get("special_tokens", {}).items():
            specials[name] = list(tok["ids"])
        return cls(d["single"], d["pair"], specials)

    def added_tokens(self, is_pair: bool) -> int:
        template = self.pair if is_pair else self.single
        return sum(len(self.special_tokens.get(v, ())) for k, v in template if k == "special")

    def process(self, encodings: Encodings, add_special_tokens: bool) -> Encodings:
        if len(encodings) not in (1, 2):
            raise TokenizerError("TemplateProcessing: needs one or two sequences")
        out: Encodings = []
        for kind, value in self.single if len(encodings) == 1 else self.pair:
            if kind == "seq":
                if value >= len(encodings):
                    raise TokenizerError("TemplateProcessing: the template names sequence B, but there is none")
                out.append(encodings[value])
            elif add_special_tokens:
                ids = self.special_tokens.get(value)
                if ids is None:
                    raise TokenizerError(f"TemplateProcessing: missing special token {value!r}")
                out.append(ids)
        return out


class Sequence(PostProcessor):
    def __init__(self, processors: List[PostProcessor]):
        self.processors = processors

    @classmethod
    def from_json(cls, d: dict) -> "Sequence":
        return cls([p for p in (processor_from_json(x) for x in d["processors"]) if p is not None])

    def added_tokens(self, is_pair: bool) -> int:
        return sum(p.added_tokens(is_pair) for p in self.processors)

    def process(self, encodings: Encodings, add_special_tokens: bool) -> Encodings:
        for p in self.processors:
            encodings = p.process(encodings, add_special_tokens)
        return encodings


PROCESSORS = {
    "BertProcessing": BertProcessing,
    "ByteLevel": ByteLevel,
    "RobertaProcessing": RobertaProcessing,
    "Sequence": Sequence,
    "TemplateProcessing": TemplateProcessing,
}


def processor_from_json(d: Optional[dict]) -> Optional[PostProcessor]:
    return build(PROCESSORS, d, "post_processor")
