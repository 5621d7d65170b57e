"""Incremental detokenization and stop strings, shared by the scheduler and the detokenizer.

Byte-level tokenizers stream at a table lookup per token (see
:class:`IncrementalDecoder`).  Any other decodes only a short window per step:
the ids since the last committed boundary (``surr``) with and without the new
ones, and the difference is the new text.  Text whose last character is U+FFFD is held back, because it is
usually a code point split across tokens; the next step completes it.  So is
text that ends in a SentencePiece byte token, because the run of byte tokens
it belongs to is decoded as a whole.  Both
processes run the same code on the same ids, so the scheduler's stop-string
decision and the detokenizer's trimmed text always agree.

A request's first window begins with the prompt's last few ids
(:meth:`IncrementalDecoder.context`), as SGLang's and vLLM's detokenizers
begin theirs: decoded alone, a SentencePiece ``▁Good`` loses its space to the
decoder's ``Strip`` and a WordPiece word its separating space, so a completion
of ``"Hello"`` would read ``"Good"`` where the text is ``" Good"``.
"""

from __future__ import annotations

import codecs
from typing import Any, Dict, List, Optional, Sequence, Tuple

REPLACEMENT = "\ufffd"

# A window of ids that decodes to nothing (skipped special tokens) is committed
# once it is this long, so the per-step cost stays bounded.
MAX_EMPTY_WINDOW = 32

# How many of the prompt's last ids a request's text is decoded after: SGLang's
# and vLLM's number (their INIT_INCREMENTAL_DETOKENIZATION_OFFSET).
CONTEXT_IDS = 5


class DecodeState:
    """One request's decoding progress.  The text itself is not kept: each
    step hands back the new text, and the caller keeps what it needs."""

    __slots__ = ("ids", "length", "pending", "surr", "read", "skip_special_tokens",
                 "spaces_between_special_tokens", "utf8")

    def __init__(self, skip_special_tokens: bool = True, spaces_between_special_tokens: bool = True):
        self.ids: List[int] = []
        self.length = 0  # characters committed so far
        # Decoded but held back (it ends in a split character); the part before
        # the trailing U+FFFD run cannot change, so stop strings may match in it.
        self.pending = ""
        self.surr = 0  # start of the decode window
        self.read = 0  # ids before this are committed
        self.skip_special_tokens = skip_special_tokens
        self.spaces_between_special_tokens = spaces_between_special_tokens
        self.utf8: Any = None  # the incremental UTF-8 decoder of the byte-level path

    def start_after(self, context: Optional[Sequence[int]]) -> None:
        """Decode this request's first ids after ``context`` (from
        :meth:`IncrementalDecoder.context`); only before any id is added."""
        if context:
            self.ids = list(context)
            self.surr, self.read = 0, len(self.ids)


_utf8_decoder = codecs.getincrementaldecoder("utf-8")


class IncrementalDecoder:
    """Advances many :class:`DecodeState` at once.

    Byte-level tokenizers (a plain ByteLevel decoder: GPT-2, Llama 3, Qwen,
    cl100k and kin) take the fast path: each id is a fixed byte string, and an
    incremental UTF-8 decoder turns the bytes into text, holding a split
    character until its last byte arrives.  Every other tokenizer decodes a
    short window per step, batched in one tokenizer call.
    """

    def __init__(self, tokenizer):
        self.tokenizer = tokenizer
        self.byte_ids = getattr(tokenizer, "byte_token_ids", frozenset())
        self.special_ids = getattr(tokenizer, "special_ids", frozenset())
        self.has_added = bool(getattr(tokenizer, "added_token_ids", ()))
        # Built here, at start-up: a vocabulary-sized loop must not stall the
        # first request that needs it.
        self.byte_tables = {skip: tokenizer.byte_table(skip) for skip in (True, False)}

    def context(self, prompt_ids: Sequence[int], skip: bool, spaces: bool) -> List[int]:
        """The prompt's last ids that a request's first window decodes after;
        empty on the byte-level path (each id its own bytes: nothing to keep).
        A trailing run of byte tokens is left out: it may end inside a
        character, and the window's text must begin with the context's."""
        if self._byte_path(skip, spaces) is not None:
            return []
        tail = list(prompt_ids[-CONTEXT_IDS:])
        while tail and tail[-1] in self.byte_ids:
            tail.pop()
        return tail

    def _byte_path(self, skip: bool, spaces: bool) -> Optional[List[bytes]]:
        # Without spaces between special tokens, added tokens split the text
        # into runs decoded apart: not a plain byte stream.
        return self.byte_tables[skip] if spaces or not self.has_added else None

    def step(self, states: Sequence[DecodeState], final: Sequence[bool]) -> List[str]:
        """Decode the ids appended since the last step; return each state's newly
        committed text.  ``final`` states commit everything, broken tail or not."""
        groups: Dict[Tuple[bool, bool], List[int]] = {}
        for i, st in enumerate(states):
            if len(st.ids) > st.read:
                groups.setdefault((st.skip_special_tokens, st.spaces_between_special_tokens), []).append(i)
        out = [""] * len(states)
        for (skip, spaces), idx in groups.items():
            table = self._byte_path(skip, spaces)
            if table is not None:
                self._step_bytes(table, states, idx, final, out)
            else:
                self._step_windows(skip, spaces, states, idx, final, out)
        return out

    @staticmethod
    def _step_bytes(table: List[bytes], states: Sequence[DecodeState], idx: List[int], final: Sequence[bool],
                    out: List[str]) -> None:
        n = len(table)
        for i in idx:
            st = states[i]
            ids = st.ids
            if len(ids) - st.read == 1 and 0 <= ids[-1] < n:  # the common case: one token a step
                data = table[ids[-1]]
            else:
                data = b"".join([table[t] for t in ids[st.read :] if 0 <= t < n])
            st.surr = st.read = len(ids)
            utf8 = st.utf8
            if utf8 is None:
                utf8 = st.utf8 = _utf8_decoder("replace")
            text = utf8.decode(data, final[i])
            st.length += len(text)
            out[i] = text

    def _step_windows(self, skip: bool, spaces: bool, states: Sequence[DecodeState], idx: List[int],
                      final: Sequence[bool], out: List[str]) -> None:
        windows = []
        for i in idx:
            st = states[i]
            windows.append(st.ids[st.surr : st.read])
            windows.append(st.ids[st.surr :])
        texts = self.tokenizer.decode_batch(windows, skip, spaces)
        for k, i in enumerate(idx):
            st = states[i]
            surr_text, full_text = texts[2 * k], texts[2 * k + 1]
            new = full_text[len(surr_text) :]
            if final[i] or (new and not new.endswith(REPLACEMENT) and not self._in_byte_run(st)) or (
                not new and len(st.ids) - st.surr > MAX_EMPTY_WINDOW
            ):
                st.length += len(new)
                st.pending = ""
                st.surr, st.read = st.read, len(st.ids)
                out[i] = new
            else:
                st.pending = new.rstrip(REPLACEMENT)

    def _in_byte_run(self, st: DecodeState) -> bool:
        """Does the window end in a byte token (skipped special tokens aside)?"""
        if not self.byte_ids:
            return False
        for t in reversed(st.ids[st.surr:]):
            if not (st.skip_special_tokens and t in self.special_ids):
                return t in self.byte_ids
        return False


def find_stop(text: str, stops: Sequence[str], start: int) -> Optional[Tuple[int, str]]:
    """The earliest stop string in ``text`` that ends after ``start``."""
    best: Optional[Tuple[int, str]] = None
    for s in stops:
        pos = text.find(s, max(0, start - len(s) + 1))
        if pos >= 0 and (best is None or pos < best[0]):
            best = (pos, s)
    return best


def stop_holdback(text: str, stops: Sequence[str]) -> int:
    """How many trailing characters of ``text`` could still begin a stop string,
    and so must not be streamed yet.  Only the places where a stop string's
    first character occurs are tried (found by ``str.find``), so the cost is
    about the tail's length per stop string, not its square."""
    hold, n = 0, len(text)
    for s in stops:
        if len(s) < 2:
            continue
        i = text.find(s[0], max(0, n - len(s) + 1))
        while i >= 0 and n - i > hold:
            if s.startswith(text[i:]):
                hold = n - i  # the earliest start is the longest for this stop string
                break
            i = text.find(s[0], i + 1)
    return hold
