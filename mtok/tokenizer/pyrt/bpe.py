"""The BPE model: a word in, token ids out.

Merges are kept as one dict from a packed pair of ids ``left * width + right``
to a packed ``rank * width + merged id`` (``width``: one more than the largest
id), so finding the best merge is an integer ``min``.  Packing by the width, not
by a power of two, lets both ids reach the low bits that index the dict (no probe
chains for pairs sharing their right part) and keeps the keys of a 32k
vocabulary below 2**30 (one CPython digit).  The pipeline caches whole words; this module
only runs on cache misses.
"""

from __future__ import annotations

import heapq
import itertools
import operator
from typing import Callable, Dict, List, Optional, Sequence, Tuple

from .. import TokenizerError
from .bpe_cuts import MARK, Cuts, find_cuts, split_apart

_NONE = 1 << 62  # "no merge": ranks are below 2**30 and ids below 2**32, so this is above any real one
# Words with more symbols than this merge with a heap instead of rescans.
_LINEAR_LIMIT = 256
# Long words of SentencePiece-style files are merged in pieces, cached here
# (bpe_cuts.Cuts.min_length says how long).
_CHUNK_CACHE = 1 << 16
BYTE_TOKENS = tuple(f"<0x{b:02X}>" for b in range(256))


class BPE:
    """Byte-pair encoding with tokenizers' options (dropout is ignored, as at inference)."""

    def __init__(
        self,
        vocab: Dict[str, int],
        merges: Sequence[Tuple[str, str]],
        unk_token: Optional[str] = None,
        continuing_subword_prefix: Optional[str] = None,
        end_of_word_suffix: Optional[str] = None,
        fuse_unk: bool = False,
        byte_fallback: bool = False,
        ignore_merges: bool = False,
    ):
        self.vocab = vocab
        self.vocab_r = dict(zip(vocab.values(), vocab.keys()))
        self.unk_token = unk_token
        self.prefix = continuing_subword_prefix
        self.suffix = end_of_word_suffix
        self.fuse_unk = fuse_unk
        self.byte_fallback = byte_fallback
        self.ignore_merges = ignore_merges
        self._width = max(vocab.values(), default=0) + 1
        # With every <0xNN> token present, an unknown character is always its bytes' ids.
        self._bytes_ids: Optional[List[int]] = None
        if byte_fallback and all(t in vocab for t in BYTE_TOKENS):
            self._bytes_ids = [vocab[t] for t in BYTE_TOKENS]
        # set by _build_merges: byte fallback, no affixes, and no merge has a byte token on either side
        self._inert_bytes = False
        self._cuts: Optional[Cuts] = None  # where long words are cut (bpe_cuts): unaffixed files only
        if self.prefix:
            self._merges = self._build_prefixed_merges(merges)
        else:
            left, right = _columns(merges)
            self._merges = self._build_merges(merges, left, right)
            if not self.suffix:
                self._cuts = find_cuts(left, right, vocab, self._inert_bytes)
        self._chunks: Dict[str, List[int]] = {}

    def _build_merges(self, merges: Sequence[Tuple[str, str]], left: Sequence[str], right: Sequence[str]
                      ) -> Dict[int, int]:
        """The packed merge table, built with C-level ``map``s: no Python code runs per merge.
        ``left`` and ``right``: the merges' parts (``_columns``).

        A 262k-entry file has ~260k merges; a Python loop over them costs a second.
        """
        get = self.vocab.get
        a_ids, b_ids = list(map(get, left)), list(map(get, right))
        new_ids = list(map(get, map(operator.add, left, right)))
        if None in a_ids or None in b_ids or None in new_ids:
            _refuse_merges(self.vocab, merges)
        if self._bytes_ids is not None and not self.suffix:
            byte_ids = set(self._bytes_ids)
            self._inert_bytes = byte_ids.isdisjoint(a_ids) and byte_ids.isdisjoint(b_ids)
        width = itertools.repeat(self._width)
        keys = map(operator.add, map(operator.mul, a_ids, width), b_ids)
        values = map(operator.add, map(operator.mul, range(len(new_ids)), width), new_ids)
        # A repeated pair keeps its last rank, as the Rust HashMap does (and as dict() does).
        return dict(zip(keys, values))

    def _build_prefixed_merges(self, merges: Sequence[Tuple[str, str]]) -> Dict[int, int]:
        """With a continuing-subword prefix the merged token drops the right part's prefix."""
        vocab = self.vocab
        strip = len(self.prefix.encode()) if self.prefix else 0
        table: Dict[int, int] = {}
        for rank, (a, b) in enumerate(merges):
            a_id, b_id = vocab.get(a), vocab.get(b)
            if a_id is None or b_id is None:
                raise TokenizerError(f"BPE: merge token {a if a_id is None else b!r} is not in the vocabulary")
            merged = a + b.encode()[strip:].decode("utf-8", "replace")
            new_id = vocab.get(merged)
            if new_id is None:
                raise TokenizerError(f"BPE: merged token {merged!r} is not in the vocabulary")
            table[a_id * self._width + b_id] = rank * self._width + new_id
        return table

    @classmethod
    def from_json(cls, d: dict) -> "BPE":
        vocab, merges = d.get("vocab"), d.get("merges")
        if not isinstance(vocab, dict) or not isinstance(merges, list):
            raise TokenizerError("BPE: missing vocab/merges")
        dropout = d.get("dropout")
        if dropout is not None and not 0.0 <= dropout <= 1.0:
            raise TokenizerError("BPE: dropout should be between 0 and 1, inclusive")
        return cls(
            vocab,
            _parse_merges(merges),
            unk_token=d.get("unk_token"),
            continuing_subword_prefix=d.get("continuing_subword_prefix"),
            end_of_word_suffix=d.get("end_of_word_suffix"),
            fuse_unk=bool(d.get("fuse_unk")),
            byte_fallback=bool(d.get("byte_fallback")),
            ignore_merges=bool(d.get("ignore_merges")),
        )

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
        get, width = self._merges.get, self._width
        ranks = [get(a * width + b, _NONE) for a, b in zip(ids, ids[1:])]
        best = min(ranks)
        while best != _NONE:
            i = ranks.index(best)
            ids[i] = best % width
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
        get, width = self._merges.get, self._width
        n = len(ids)
        syms: List[Optional[int]] = list(ids)
        nxt = list(range(1, n)) + [-1]
        prv = list(range(-1, n - 1))
        heap = [(r, i) for i, r in enumerate(get(a * width + b) for a, b in zip(ids, ids[1:])) if r is not None]
        heapq.heapify(heap)
        while heap:
            packed, i = heapq.heappop(heap)
            j = nxt[i]
            left = syms[i]
            if left is None or j < 0 or get(left * width + syms[j]) != packed:  # type: ignore[operator]
                continue  # stale entry
            syms[i] = merged = packed % width
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


def _columns(merges: Sequence[Tuple[str, str]]) -> Tuple[Sequence[str], Sequence[str]]:
    """The left and the right parts of every merge, as two sequences."""
    return list(map(operator.itemgetter(0), merges)), list(map(operator.itemgetter(1), merges))


def _refuse_merges(vocab: Dict[str, int], merges: Sequence[Tuple[str, str]]) -> None:
    """Name the first merge whose parts or result the vocabulary lacks."""
    for a, b in merges:
        for token, what in ((a, "merge token"), (b, "merge token"), (a + b, "merged token")):
            if token not in vocab:
                raise TokenizerError(f"BPE: {what} {token!r} is not in the vocabulary")


def _parse_merges(merges: list) -> List[Tuple[str, str]]:
    """Both serialised forms: ``"a b"`` strings (legacy) and ``["a", "b"]`` pairs; checked with C-level ``map``s."""
    kinds = set(map(type, merges))
    if kinds <= {str}:
        if any(map(operator.methodcaller("startswith", "#version"), merges)):
            merges = [m for m in merges if not m.startswith("#version")]
        pairs = list(map(operator.methodcaller("split", " "), merges))
        if set(map(len, pairs)) - {2}:
            n = next(i for i, p in enumerate(pairs) if len(p) != 2)
            raise TokenizerError(f"BPE: merges invalid at line {n + 1}")
        return pairs  # type: ignore[return-value]
    if kinds == {list} and set(map(len, merges)) == {2}:
        left, right = _columns(merges)
        if set(map(type, left)) | set(map(type, right)) == {str}:
            return merges
    raise TokenizerError("BPE: merges must be all 'a b' strings or all [a, b] pairs")
