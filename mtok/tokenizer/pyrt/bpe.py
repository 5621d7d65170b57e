"""The BPE model: a word in, token ids out.

Merges are kept as one dict from a packed pair of ids ``left * width + right``
to the merge's rank (``width``: one more than the largest id, made odd), and a
list from rank to the merged id, so finding the best merge is an integer ``min``.
Packing by an odd width, not by a power of two, lets both ids reach the low bits
that index the dict (no probe chains for pairs sharing their right part; Gemma-3's
262,144 ids would make the plain width a power of two) and keeps the keys of a
32k vocabulary below 2**30 (one CPython digit).  Ranks as values are small ints,
made by ``range`` at no cost.  The pipeline caches whole words; this module only
runs on cache misses.
"""

from __future__ import annotations

import heapq
import itertools
import operator
import re
from typing import Callable, Dict, List, NamedTuple, Optional, Sequence, Tuple, Union

from .. import TokenizerError
from .bpe_cuts import MARK, Cuts, find_cuts, split_apart

_NONE = 1 << 62  # "no merge": above any rank
# Words with more symbols than this merge with a heap instead of rescans.
_LINEAR_LIMIT = 256
# Long words of SentencePiece-style files are merged in pieces, cached here
# (bpe_cuts.Cuts.min_length says how long).
_CHUNK_CACHE = 1 << 16
BYTE_TOKENS = tuple(f"<0x{b:02X}>" for b in range(256))


class MergeColumns(NamedTuple):
    """Every merge's left part and right part, as two sequences (how ``from_json`` hands them over)."""

    left: Sequence[str]
    right: Sequence[str]


class BPE:
    """Byte-pair encoding with tokenizers' options (dropout is ignored, as at inference)."""

    def __init__(
        self,
        vocab: Dict[str, int],
        merges: Union[MergeColumns, Sequence[Tuple[str, str]]],
        unk_token: Optional[str] = None,
        continuing_subword_prefix: Optional[str] = None,
        end_of_word_suffix: Optional[str] = None,
        fuse_unk: bool = False,
        byte_fallback: bool = False,
        ignore_merges: bool = False,
    ):
        self._set_options(vocab, unk_token, continuing_subword_prefix, end_of_word_suffix,
                          fuse_unk, byte_fallback, ignore_merges)
        self._width = (max(vocab.values(), default=0) + 1) | 1
        # With every <0xNN> token present, an unknown character is always its bytes' ids.
        self._bytes_ids: Optional[List[int]] = None
        if byte_fallback and all(t in vocab for t in BYTE_TOKENS):
            self._bytes_ids = [vocab[t] for t in BYTE_TOKENS]
        # set by _build_merges: byte fallback, no affixes, and no merge has a byte token on either side
        self._inert_bytes = False
        self._cuts: Optional[Cuts] = None  # where long words are cut (bpe_cuts): unaffixed files only
        left, right = merges if isinstance(merges, MergeColumns) else _columns(merges)
        # _merges: packed pair -> rank; _merged: rank -> the merged token's id
        if self.prefix:
            self._merges, self._merged = self._build_prefixed_merges(left, right)
        else:
            self._merges, self._merged = self._build_merges(left, right)
            if not self.suffix:
                self._cuts = find_cuts(left, right, vocab, self._inert_bytes)

    def _set_options(self, vocab: Dict[str, int], unk_token: Optional[str], continuing_subword_prefix: Optional[str],
                     end_of_word_suffix: Optional[str], fuse_unk: bool, byte_fallback: bool, ignore_merges: bool) -> None:
        self.vocab = vocab
        self.vocab_r = dict(zip(vocab.values(), vocab.keys()))
        self.unk_token = unk_token
        self.prefix = continuing_subword_prefix
        self.suffix = end_of_word_suffix
        self.fuse_unk = fuse_unk
        self.byte_fallback = byte_fallback
        self.ignore_merges = ignore_merges
        self._chunks: Dict[str, List[int]] = {}

    # -- prepared tables (prepared.py caches them) ----------------------------------
    def prepared(self) -> tuple:
        """What ``from_prepared`` needs besides the JSON's options: marshal's types only."""
        cuts = self._cuts
        if cuts is not None:
            cuts = (cuts.coarse.pattern, cuts.fine and cuts.fine.pattern, cuts.alpha_whole, cuts.junctions,
                    cuts.min_length)
        return (self.vocab, self._merges, self._merged, self._width, self._bytes_ids, self._inert_bytes, cuts)

    @classmethod
    def from_prepared(cls, d: dict, state: tuple) -> "BPE":
        """The model ``prepared()`` described, from its state and its JSON without vocab and merges."""
        self = cls.__new__(cls)
        vocab, self._merges, self._merged, self._width, self._bytes_ids, self._inert_bytes, cuts = state
        self._set_options(vocab, **_options(d))
        self._cuts = None
        if cuts is not None:
            coarse, fine, alpha_whole, junctions, min_length = cuts
            self._cuts = Cuts(re.compile(coarse), fine and re.compile(fine), alpha_whole, junctions, min_length)
        return self

    def _build_merges(self, left: Sequence[str], right: Sequence[str]) -> Tuple[Dict[int, int], List[int]]:
        """The merge table, built with C-level ``map``s: no Python code runs per merge.

        A 262k-entry file has ~260k merges (Gemma-3's 514,906); a Python loop over
        them costs a second.  ``__getitem__`` raises on the first missing token, so
        no pass looks for ``None`` afterwards.
        """
        get = self.vocab.__getitem__
        try:
            a_ids, b_ids = list(map(get, left)), list(map(get, right))
            merged = list(map(get, map(operator.add, left, right)))
        except (KeyError, TypeError):
            _refuse_merges(self.vocab, left, right)
            raise
        if self._bytes_ids is not None and not self.suffix:
            byte_ids = set(self._bytes_ids)
            self._inert_bytes = byte_ids.isdisjoint(a_ids) and byte_ids.isdisjoint(b_ids)
        keys = map(operator.add, map(operator.mul, a_ids, itertools.repeat(self._width)), b_ids)
        # A repeated pair keeps its last rank, as the Rust HashMap does (and as dict() does).
        return dict(zip(keys, range(len(merged)))), merged

    def _build_prefixed_merges(self, left: Sequence[str], right: Sequence[str]) -> Tuple[Dict[int, int], List[int]]:
        """With a continuing-subword prefix the merged token drops the right part's prefix."""
        vocab = self.vocab
        strip = len(self.prefix.encode()) if self.prefix else 0
        table: Dict[int, int] = {}
        merged_ids: List[int] = []
        for rank, (a, b) in enumerate(zip(left, right)):
            a_id, b_id = vocab.get(a), vocab.get(b)
            if a_id is None or b_id is None:
                raise TokenizerError(f"BPE: merge token {a if a_id is None else b!r} is not in the vocabulary")
            merged = a + b.encode()[strip:].decode("utf-8", "replace")
            new_id = vocab.get(merged)
            if new_id is None:
                raise TokenizerError(f"BPE: merged token {merged!r} is not in the vocabulary")
            table[a_id * self._width + b_id] = rank
            merged_ids.append(new_id)
        return table, merged_ids

    @classmethod
    def from_json(cls, d: dict) -> "BPE":
        vocab, merges = d.get("vocab"), d.get("merges")
        if not isinstance(vocab, dict) or not isinstance(merges, list):
            raise TokenizerError("BPE: missing vocab/merges")
        dropout = d.get("dropout")
        if dropout is not None and not 0.0 <= dropout <= 1.0:
            raise TokenizerError("BPE: dropout should be between 0 and 1, inclusive")
        return cls(vocab, _parse_merges(merges), **_options(d))

    # -- the model interface -------------------------------------------------------
    def tokenize(self, word: str) -> List[int]:
        if not word:
            return []
        if self.ignore_merges:
            whole = self.vocab.get(word)
            if whole is not None:
                return [whole]
        if self._cuts is None or len(word) < self._cuts.min_length:
            return self._word(word)
        return self.tokenize_chunks(self._cuts.coarse.findall(word))

    def tokenize_chunks(self, chunks: Sequence[str]) -> List[int]:
        """The ids of text cut where no merge can join (see ``bpe_cuts``), each chunk cached."""
        return self._cached(chunks, self._pieces)

    def _pieces(self, chunk: str) -> List[int]:
        """A coarse chunk's ids: merged whole, or from its fine pieces, each cached."""
        cuts = self._cuts
        if cuts.junctions is not None:  # type: ignore[union-attr]
            pieces = split_apart(chunk, cuts.junctions)  # type: ignore[union-attr]
        elif cuts.fine is None or (cuts.alpha_whole and chunk.lstrip(MARK).isalpha()):  # type: ignore[union-attr]
            return self._word(chunk)
        else:
            pieces = cuts.fine.findall(chunk)  # type: ignore[union-attr]
        return self._word(chunk) if len(pieces) < 2 else self._cached(pieces, self._word)

    def _cached(self, texts: Sequence[str], ids_of: Callable[[str], List[int]]) -> List[int]:
        """The ids of ``texts`` one after another, each from the cache or from ``ids_of`` (then cached)."""
        ids: List[int] = []
        cache = self._chunks
        for text in texts:
            hit = cache.get(text)
            if hit is None:
                hit = ids_of(text)
                if len(text) < 256:
                    if len(cache) >= _CHUNK_CACHE:
                        cache.clear()
                    cache[text] = hit
            ids += hit
        return ids

    def token_to_id(self, token: str) -> Optional[int]:
        return self.vocab.get(token)

    def id_to_token(self, i: int) -> Optional[str]:
        return self.vocab_r.get(i)

    def get_vocab_size(self) -> int:
        return len(self.vocab)

    # -- internals -----------------------------------------------------------------
    def _word(self, word: str) -> List[int]:
        """The ids of one word: its symbols, merged."""
        if self._inert_bytes:
            ids = list(map(self.vocab.get, word))
            if None in ids:
                return self._merge_between_bytes(word, ids)
            return self._merge(ids)  # type: ignore[arg-type]
        return self._merge(self._symbols(word))

    def _merge_between_bytes(self, word: str, ids: List[Optional[int]]) -> List[int]:
        """Each unknown character becomes its bytes' ids, and since no merge has a
        byte token on either side (checked at load), only the runs of known
        characters between them are merged, each on its own: the same result as
        one merge over the whole, in a fraction of the steps (CJK text in a
        Llama-style vocabulary is mostly bytes)."""
        table = self._bytes_ids
        out: List[int] = []
        start = 0
        for end, i in enumerate(ids):
            if i is None:
                if start < end:
                    out += self._merge(ids[start:end])  # type: ignore[arg-type]
                out += [table[b] for b in word[end].encode()]  # type: ignore[index]
                start = end + 1
        if start < len(ids):
            out += self._merge(ids[start:])  # type: ignore[arg-type]
        return out

    def _symbols(self, word: str) -> List[int]:
        """One id per character, before any merge (tokenizers' ``merge_word``)."""
        vocab = self.vocab
        if not self.prefix and not self.suffix:
            ids = list(map(vocab.get, word))
            if None not in ids:
                return ids  # type: ignore[return-value]
            if self._bytes_ids is not None:
                return self._with_bytes(word, ids)
        out: List[int] = []
        unk: Optional[int] = None  # a pending unknown, emitted when a known piece follows
        last = len(word) - 1
        for i, c in enumerate(word):
            if i and self.prefix is not None:
                c = self.prefix + c
            if i == last and self.suffix is not None:
                c += self.suffix
            known = vocab.get(c)
            if known is not None:
                if unk is not None:
                    out.append(unk)
                    unk = None
                out.append(known)
                continue
            if self.byte_fallback:
                byte_ids = [vocab.get(BYTE_TOKENS[b]) for b in c.encode()]
                if None not in byte_ids:
                    out.extend(byte_ids)  # type: ignore[arg-type]
                    continue
            if self.unk_token is None:
                continue
            if unk is not None and self.fuse_unk:
                continue
            if unk is not None:
                out.append(unk)
            unk = vocab.get(self.unk_token)
            if unk is None:
                raise TokenizerError(f"BPE: unk token {self.unk_token!r} is not in the vocabulary")
        if unk is not None:
            out.append(unk)
        return out

    def _with_bytes(self, word: str, ids: List[Optional[int]]) -> List[int]:
        """``ids`` with each unknown character replaced by the ids of its UTF-8 bytes."""
        table = self._bytes_ids
        out: List[int] = []
        for c, i in zip(word, ids):
            if i is None:
                out += [table[b] for b in c.encode()]  # type: ignore[index]
            else:
                out.append(i)
        return out

    def _merge(self, ids: List[int]) -> List[int]:
        """Apply the lowest-ranked merge (leftmost on ties) until none applies."""
        n = len(ids) - 1  # pairs
        if n < 1:
            return ids
        if n >= _LINEAR_LIMIT:
            return self._merge_heap(ids)
        get, width, merged = self._merges.get, self._width, self._merged
        ranks = [get(a * width + b, _NONE) for a, b in zip(ids, ids[1:])]
        best = min(ranks)
        while best != _NONE:
            i = ranks.index(best)
            ids[i] = merged[best]
            del ids[i + 1]
            del ranks[i]
            n -= 1
            if i:
                ranks[i - 1] = get(ids[i - 1] * width + ids[i], _NONE)
            if i < n:
                ranks[i] = get(ids[i] * width + ids[i + 1], _NONE)
            elif not n:
                break
            best = min(ranks)
        return ids

    def _merge_heap(self, ids: List[int]) -> List[int]:
        """The same merges in O(n log n), over a linked list of symbols."""
        get, width, merged_ids = self._merges.get, self._width, self._merged
        n = len(ids)
        syms: List[Optional[int]] = list(ids)
        nxt = list(range(1, n)) + [-1]
        prv = list(range(-1, n - 1))
        heap = [(r, i) for i, r in enumerate(get(a * width + b) for a, b in zip(ids, ids[1:])) if r is not None]
        heapq.heapify(heap)
        while heap:
            rank, i = heapq.heappop(heap)
            j = nxt[i]
            left = syms[i]
            if left is None or j < 0 or get(left * width + syms[j]) != rank:  # type: ignore[operator]
                continue  # stale entry
            syms[i] = merged = merged_ids[rank]
            syms[j] = None
            k = nxt[i] = nxt[j]
            if k >= 0:
                prv[k] = i
                right = get(merged * width + syms[k])  # type: ignore[operator]
                if right is not None:
                    heapq.heappush(heap, (right, i))
            p = prv[i]
            if p >= 0:
                before = get(syms[p] * width + merged)  # type: ignore[operator]
                if before is not None:
                    heapq.heappush(heap, (before, p))
        return [s for s in syms if s is not None]


def _options(d: dict) -> dict:
    """The model's options from its JSON, as keyword arguments of ``BPE``."""
    return {
        "unk_token": d.get("unk_token"),
        "continuing_subword_prefix": d.get("continuing_subword_prefix"),
        "end_of_word_suffix": d.get("end_of_word_suffix"),
        "fuse_unk": bool(d.get("fuse_unk")),
        "byte_fallback": bool(d.get("byte_fallback")),
        "ignore_merges": bool(d.get("ignore_merges")),
    }


def _columns(merges: Sequence[Tuple[str, str]]) -> Tuple[Sequence[str], Sequence[str]]:
    """The left and the right parts of every merge, as two sequences."""
    return list(map(operator.itemgetter(0), merges)), list(map(operator.itemgetter(1), merges))


def _refuse_merges(vocab: Dict[str, int], left: Sequence[str], right: Sequence[str]) -> None:
    """Name the first merge whose parts or result the vocabulary lacks."""
    for a, b in zip(left, right):
        if not isinstance(a, str) or not isinstance(b, str):
            raise TokenizerError("BPE: merges must be all 'a b' strings or all [a, b] pairs")
        for token, what in ((a, "merge token"), (b, "merge token"), (a + b, "merged token")):
            if token not in vocab:
                raise TokenizerError(f"BPE: {what} {token!r} is not in the vocabulary")


def _parse_merges(merges: list) -> MergeColumns:
    """Both serialised forms, ``"a b"`` strings (legacy) and ``["a", "b"]`` pairs, as
    columns, checked with C-level ``map``s.  The parts' types are checked by the
    vocabulary lookups that follow (``_refuse_merges`` names the culprit)."""
    if not merges:
        return MergeColumns([], [])
    kinds = set(map(type, merges))
    if kinds == {str}:
        if any(map(operator.methodcaller("startswith", "#version"), merges)):
            merges = [m for m in merges if not m.startswith("#version")]
        spaces = list(map(operator.methodcaller("count", " "), merges))
        if set(spaces) - {1}:
            n = next(i for i, k in enumerate(spaces) if k != 1)
            raise TokenizerError(f"BPE: merges invalid at line {n + 1}")
        parts = " ".join(merges).split(" ") if merges else []  # one space in each: parts alternate left, right
        return MergeColumns(parts[0::2], parts[1::2])
    if kinds == {list} and set(map(len, merges)) == {2}:
        return MergeColumns(*_columns(merges))
    raise TokenizerError("BPE: merges must be all 'a b' strings or all [a, b] pairs")
