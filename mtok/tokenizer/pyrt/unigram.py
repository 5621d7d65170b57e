"""The Unigram model (SentencePiece): the best-scoring segmentation of a piece, as ``tokenizers``.

Viterbi over the characters of the piece, with the rules of tokenizers'
``encode_optimized``: every vocabulary piece starting at a position competes (a
strictly better score replaces, so ties keep the path found first); a character no
one-character piece covers gets the unknown id at ``min score - 10``; consecutive
unknown pieces are fused into one string, which then maps to its vocabulary id if it
has one, to ``<0xXX>`` byte tokens under ``byte_fallback`` if all exist, else to
``unk_id``.
"""

from __future__ import annotations

import math
from typing import Dict, List, Optional, Sequence, Tuple

from .. import TokenizerError

_UNK_PENALTY = 10.0
_U64_MAX = (1 << 64) - 1
_POW10 = tuple(float("1e%d" % i) for i in range(309))
_NO_PATH = float("-inf")
_CACHE_PIECE_LEN = 256
_CACHE_ENTRIES = 1 << 16


class Unigram:
    def __init__(self, pieces: Sequence[Tuple[str, float]], unk_id: Optional[int] = None, byte_fallback: bool = False):
        if unk_id is not None:
            if not pieces:
                raise TokenizerError("Unigram: the vocabulary is empty but at least <unk> is needed")
            if not 0 <= unk_id < len(pieces):
                raise TokenizerError("Unigram: unk_id is larger than the vocabulary")
        self.pieces = [(str(p), float(s)) for p, s in pieces]
        self.unk_id = unk_id
        self.byte_fallback = byte_fallback
        self.vocab: Dict[str, int] = {p: i for i, (p, _) in enumerate(self.pieces)}  # a repeat keeps its last id
        self.min_score = min((s for _, s in self.pieces), default=float("inf"))
        self._unk_score = self.min_score - _UNK_PENALTY
        # Every piece maps to (id, score), every other prefix of a piece to () (false): the
        # walk from a position stops at the first substring that is neither (get: None).
        self._prefixes: Dict[str, Tuple] = {}
        for piece in self.vocab:
            for k in range(1, len(piece)):
                self._prefixes.setdefault(piece[:k], ())
        for piece, i in self.vocab.items():
            if piece:
                self._prefixes[piece] = (i, self.pieces[i][1])
        self._bytes: Optional[List[Optional[int]]] = None
        if byte_fallback:
            self._bytes = [self.vocab.get(f"<0x{b:02X}>") for b in range(256)]
        self._cache: Dict[str, List[int]] = {}

    @classmethod
    def from_json(cls, d: dict) -> "Unigram":
        """From the ``model`` object of a tokenizer.json parsed by Python's ``json``.

        Scores are re-read the way tokenizers' JSON parser reads them (see
        :func:`serde_f64`), assuming each was written in its shortest round-trip form,
        as both tokenizers and Python write floats.
        """
        vocab = d.get("vocab")
        if not isinstance(vocab, list):
            raise TokenizerError("Unigram: vocab must be a list of [piece, score]")
        unk_id = d.get("unk_id")
        pieces = [(p, serde_f64(repr(float(s)))) for p, s in vocab]
        return cls(pieces, None if unk_id is None else int(unk_id), bool(d.get("byte_fallback")))

    def get_vocab_size(self) -> int:
        return len(self.pieces)

    def id_to_token(self, i: int) -> Optional[str]:
        return self.pieces[i][0] if 0 <= i < len(self.pieces) else None

    def token_to_id(self, token: str) -> Optional[int]:
        return self.vocab.get(token)

    def tokenize(self, piece: str) -> List[int]:
        """The ids of ``piece`` (the returned list may be shared: do not mutate it)."""
        ids = self._cache.get(piece)
        if ids is None:
            ids = self._ids_of(piece)
            if len(piece) < _CACHE_PIECE_LEN:
                if len(self._cache) >= _CACHE_ENTRIES:
                    self._cache.clear()
                self._cache[piece] = ids
        return ids

    def segment(self, s: str) -> List[Tuple[str, Optional[int]]]:
        """The best path as ``(text, id)`` pairs, with fused unknown runs given the id None."""
        return self._path(s, *self._viterbi(s)) if s else []

    def _ids_of(self, s: str) -> List[int]:
        """The ids of the best path, read straight off it unless it has an unknown run."""
        if not s:
            return []
        back, ids = self._viterbi(s)
        unk_id = self.unk_id
        out: List[int] = []
        end = len(s)
        while end > 0:
            i = ids[end]
            if i == unk_id:
                return self._ids(self._path(s, back, ids))
            out.append(i)
            end = back[end]
        out.reverse()
        return out

    def _path(self, s: str, back: List[int], ids: List[int]) -> List[Tuple[str, Optional[int]]]:
        """The path ``_viterbi`` found, as ``segment`` returns it."""
        unk_id = self.unk_id
        out: List[Tuple[str, Optional[int]]] = []
        end, unk_end = len(s), -1
        while end > 0:
            start = back[end]
            if ids[end] == unk_id:
                if unk_end < 0:
                    unk_end = end
            else:
                if unk_end >= 0:
                    out.append((s[end:unk_end], None))
                    unk_end = -1
                out.append((s[start:end], ids[end]))
            end = start
        if unk_end >= 0:
            out.append((s[0:unk_end], None))
        out.reverse()
        return out

    def _viterbi(self, s: str) -> Tuple[List[int], List[int]]:
        """For each end position of ``s``, where the best path into it starts and the id
        of its last piece (``unk_id`` for an unknown character)."""
        n = len(s)
        prefixes, unk_id, unk_score = self._prefixes, self.unk_id, self._unk_score
        # -inf marks "no path yet": any real score beats it, and later equal scores do not
        # replace a path (ties keep the one found first).
        score = [_NO_PATH] * (n + 1)
        score[0] = 0.0
        back = [-1] * (n + 1)  # where the best path into each position starts
        ids = [0] * (n + 1)
        get = prefixes.get
        for i in range(n):
            base = score[i]
            hit = get(s[i])
            if not hit:  # no one-character piece: the unknown competes for i + 1 (and only it)
                candidate = unk_score + base
                if candidate > score[i + 1]:
                    if unk_id is None:
                        raise TokenizerError("Unigram: encountered an unknown token but unk_id is missing")
                    score[i + 1], back[i + 1], ids[i + 1] = candidate, i, unk_id
                if hit is None:
                    continue
            k = i + 1
            while True:
                if hit:
                    candidate = hit[1] + base
                    if candidate > score[k]:
                        score[k], back[k], ids[k] = candidate, i, hit[0]
                if k == n:
                    break
                k += 1
                hit = get(s[i:k])
                if hit is None:
                    break
        return back, ids

    def _ids(self, path: List[Tuple[str, Optional[int]]]) -> List[int]:
        ids: List[int] = []
        for text, i in path:
            if i is not None:
                ids.append(i)
                continue
            known = self.vocab.get(text)
            if known is not None:
                ids.append(known)
                continue
            if self._bytes is not None:
                byte_ids = [self._bytes[b] for b in text.encode("utf-8")]
                if None not in byte_ids:
                    ids.extend(byte_ids)  # type: ignore[arg-type]
                    continue
            ids.append(self.unk_id)  # type: ignore[arg-type]
        return ids


def serde_f64(text: str) -> float:
    """A JSON number read as serde_json reads it into an f64 (without ``float_roundtrip``).

    serde_json accumulates up to 19-20 significant digits in a u64, converts that to
    f64 and then multiplies or divides by a power of ten: two roundings, so about a
    quarter of SentencePiece scores come out one ulp away from Python's correctly
    rounded ``float()``.  Unigram breaks ties between equal-looking paths on exactly
    those bits.
    """
    s = text.strip()
    positive = s[:1] != "-"
    mantissa, _, exp_text = s.lower().partition("e")
    whole, _, fraction = mantissa.lstrip("+-").partition(".")
    significand = int(whole + fraction)
    exponent = int(exp_text or 0) - len(fraction)
    if significand > _U64_MAX:
        significand, exponent = _long_significand(whole, fraction, int(exp_text or 0))
    value = float(significand)
    while value and exponent < -308:
        value /= 1e308
        exponent += 308
    if value and exponent > 308:
        raise TokenizerError(f"number out of range: {text!r}")
    value = value * _POW10[exponent] if exponent >= 0 else value / _POW10[-exponent]
    if math.isinf(value):
        raise TokenizerError(f"number out of range: {text!r}")
    return value if positive else -value


def _long_significand(whole: str, fraction: str, exponent: int) -> Tuple[int, int]:
    """serde_json's u64 significand and decimal exponent for digits that overflow a u64."""
    significand = 0
    for k, ch in enumerate(whole):
        digit = ord(ch) - 48
        if significand * 10 + digit > _U64_MAX:  # the remaining integer digits only scale
            exponent += len(whole) - k
            break
        significand = significand * 10 + digit
    for ch in fraction:  # (after an overflow above, a small enough digit is still taken)
        digit = ord(ch) - 48
        if significand * 10 + digit > _U64_MAX:  # this and all further digits are ignored
            break
        significand = significand * 10 + digit
        exponent -= 1
    return significand, exponent
