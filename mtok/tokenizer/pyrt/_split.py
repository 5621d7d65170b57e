"""Splitting a string the way tokenizers' ``NormalizedString::split`` does.

A *pattern* cuts a string into contiguous spans ``(start, end, is_match)`` that
cover it; a *behavior* then decides what happens to the matched spans.  Offsets
are character indices (tokenizers uses bytes; every cut falls on a character
boundary, so the pieces are the same).
"""

from __future__ import annotations

from typing import List, Pattern, Tuple

from .. import TokenizerError
from .onig import find_spans

Span = Tuple[int, int, bool]

BEHAVIORS = ("Removed", "Isolated", "MergedWithPrevious", "MergedWithNext", "Contiguous")


def regex_spans(regex: Pattern[str], text: str, invert: bool = False) -> List[Span]:
    """Cover ``text`` with the regex matches (found as rust-onig finds them) and the gaps."""
    if not text:
        return [(0, 0, invert)]
    spans: List[Span] = []
    prev = 0
    for s, e in find_spans(regex, text):
        if prev != s:
            spans.append((prev, s, invert))
        spans.append((s, e, not invert))
        prev = e
    if prev != len(text):
        spans.append((prev, len(text), invert))
    return spans


def apply_behavior(spans: List[Span], behavior: str) -> List[Tuple[int, int]]:
    """The ranges kept once ``behavior`` has dealt with the matches."""
    if behavior == "Isolated":
        return [(s, e) for s, e, _ in spans]
    if behavior == "Removed":
        return [(s, e) for s, e, m in spans if not m]
    out: List[List[int]] = []
    previous = False
    if behavior == "Contiguous":
        for s, e, m in spans:
            if m == previous and out:
                out[-1][1] = e
            else:
                out.append([s, e])
            previous = m
    elif behavior == "MergedWithPrevious":
        for s, e, m in spans:
            if m and not previous and out:
                out[-1][1] = e
            else:
                out.append([s, e])
            previous = m
    elif behavior == "MergedWithNext":
        for s, e, m in reversed(spans):
            if m and not previous and out:
                out[-1][0] = s
            else:
                out.append([s, e])
            previous = m
        out.reverse()
    else:
        raise TokenizerError(f"unknown split behavior {behavior!r}")
    return [(s, e) for s, e in out]


def split(text: str, spans: List[Span], behavior: str) -> List[str]:
    """The non-empty pieces of ``text`` (empty ones are dropped, as tokenizers does)."""
    return [text[s:e] for s, e in apply_behavior(spans, behavior) if s != e]


def check_behavior(behavior: str, component: str) -> str:
    if behavior not in BEHAVIORS:
        raise TokenizerError(f"{component}: unknown behavior {behavior!r}")
    return behavior
