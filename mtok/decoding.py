"""Incremental detokenization and stop strings, shared by the scheduler and the detokenizer.

Each step decodes only a short window: the ids since the last committed
boundary (``surr``) with and without the new ones, and the difference is the
new text.  Text whose last character is U+FFFD is held back, because it is
usually a code point split across tokens; the next step completes it.  So is
text that ends in a SentencePiece byte token, because the run of byte tokens
it belongs to is decoded as a whole.  Both
processes run the same code on the same ids, so the scheduler's stop-string
decision and the detokenizer's trimmed text always agree.
"""

from __future__ import annotations

from typing import Dict, List, Optional, Sequence, Tuple

REPLACEMENT = "\ufffd"

# A window of ids that decodes to nothing (skipped special tokens) is committed
# once it is this long, so the per-step cost stays bounded.
MAX_EMPTY_WINDOW = 32


class DecodeState:
    """One request's decoding progress."""

    __slots__ = ("ids", "text", "pending", "surr", "read", "skip_special_tokens", "spaces_between_special_tokens")

    def __init__(self, skip_special_tokens: bool = True, spaces_between_special_tokens: bool = True):
        self.ids: List[int] = []
        self.text = ""  # committed text
        # Decoded but held back (it ends in a split character); the part before
        # the trailing U+FFFD run cannot change, so stop strings may match in it.
        self.pending = ""
        self.surr = 0  # start of the decode window
        self.read = 0  # ids before this are committed
        self.skip_special_tokens = skip_special_tokens
        self.spaces_between_special_tokens = spaces_between_special_tokens


class IncrementalDecoder:
    """Advances many :class:`DecodeState` at once, batching the tokenizer calls."""

    def __init__(self, tokenizer):
        self.tokenizer = tokenizer
        self.byte_ids = getattr(tokenizer, "byte_token_ids", frozenset())
        self.special_ids = getattr(tokenizer, "special_ids", frozenset())

    def step(self, states: Sequence[DecodeState], final: Sequence[bool]) -> List[str]:
        """Decode the ids appended since the last step; return each state's newly
        committed text.  ``final`` states commit everything, broken tail or not."""
        groups: Dict[Tuple[bool, bool], List[int]] = {}
        for i, st in enumerate(states):
            if len(st.ids) > st.read:
                groups.setdefault((st.skip_special_tokens, st.spaces_between_special_tokens), []).append(i)
        out = [""] * len(states)
        for (skip, spaces), idx in groups.items():
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
                    st.text += new
                    st.pending = ""
                    st.surr, st.read = st.read, len(st.ids)
                    out[i] = new
                else:
                    st.pending = new.rstrip(REPLACEMENT)
        return out


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
    and so must not be streamed yet."""
    hold = 0
    for s in stops:
        for k in range(min(len(s) - 1, len(text)), hold, -1):
            if text.endswith(s[:k]):
                hold = k
                break
    return hold
