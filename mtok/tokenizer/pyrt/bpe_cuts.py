"""Where a SentencePiece-style text can be cut before BPE without changing its tokens.

Files without a pre-tokenizer (Llama-2, Mistral, Phi-3, Gemma) hand the BPE
model whole texts, and a merge over 2 KB is slow and uncacheable.  But a
symbol can only span two adjacent characters if some merge joined them: every
multi-character symbol is a merge's result, and each pair of neighbours in it
was the junction of one merge (the left part's last character, the right
part's first).  So wherever no merge's junction holds a transition, the text
can be cut there, and each piece merged (and cached) on its own, with the
same ids as the whole.  A merge whose parts no merge makes never applies; its
junction only costs a cut.

The transitions are checked on character classes, one regular-expression
search over all distinct junctions for each:

- the mark ``▁``: no junction with ``▁`` after another character means every
  ``▁`` run starts a piece; a few characters that some junction puts before
  ``▁`` (Gemma-3's one merge ``>`` + ``▁</``) only keep the ``▁`` run after
  them in their piece; every other cut needs this one;
- with inert byte fallback (no merge touches a byte token), a character below
  U+0100 outside the vocabulary (``\\n``, ``\\t`` in Llama's) becomes bytes no
  merge joins: both its sides are cuts;
- digits, letters and the rest (punctuation, symbols, ``_``): SentencePiece's
  trainer never merges across Unicode scripts nor digits, so in Llama's file
  ``▁self.name()`` is ``▁self``, ``.``, ``name``, ``()``.  Classes that some
  junction joins count as one.

Two patterns come out: ``coarse`` (the mark rule alone: cheap to find, and a
cache of its pieces keeps a warm server fast) and ``fine`` (all three, for the
coarse pieces not cached yet; ``None`` where it cuts nothing more).

Where the classes do not hold (Gemma-3's merges join letters to digits and
punctuation to letters, and ``>`` to ``▁``), the coarse pieces not cached yet are
cut exactly instead: between every two neighbours that no junction holds
(``split_apart``, a set lookup per character, Python-level but only on a
cache miss).  Gemma-3 has 33,695 distinct junctions, yet ``s.``, ``.\n``,
``99`` and most pairs of CJK ideographs are none of them: its docstrings fall
into pieces of ~3 characters, most of them seen before.
"""

from __future__ import annotations

import itertools
import operator
import re
from typing import Container, FrozenSet, List, NamedTuple, Optional, Sequence, Tuple

MARK = "\u2581"
# A separator for joining the junctions: the first character none holds.
_SEPARATORS = "\x00\uffff\U0010ffff" + "".join(map(chr, range(1, 32)))
# More characters joined across letters and the rest than this: one class.
_MAX_MOVED = 32


class Cuts(NamedTuple):
    coarse: "re.Pattern[str]"
    fine: Optional["re.Pattern[str]"]
    # True where letters are one class: a piece that is ``▁``s and then only
    # ``str.isalpha`` characters (most words) is one fine piece, no search needed.
    alpha_whole: bool = False
    # Where ``fine`` is None: every junction, for ``split_apart`` (None: no finer cut).
    junctions: Optional[FrozenSet[str]] = None
    # Words shorter than this are merged whole: with the classes, cutting a short
    # word costs more than it saves; cut at the pairs, even a short line of text
    # falls into pieces seen before.
    min_length: int = 32


def find_cuts(left: Sequence[str], right: Sequence[str], vocab: Container[str],
              inert_bytes: bool) -> Optional[Cuts]:
    """Where texts can be cut, or ``None``; ``left``, ``right``: every merge's
    parts; ``vocab``: the tokens."""
    if MARK not in vocab:
        return None
    joined = _junctions(left, right)
    if joined is None:
        return None
    text, sep, pairs = joined
    before_mark = set(re.findall(f"([^{MARK}{re.escape(sep)}]){MARK}", text))
    if len(before_mark) > _MAX_MOVED:
        return None
    coarse = _coarse(before_mark)
    if not inert_bytes:
        return Cuts(coarse, None)
    if before_mark:  # the classes below cut before every ``▁`` run: not here
        return Cuts(coarse, None, junctions=pairs, min_length=2)
    unknown = "".join(c for c in map(chr, range(256)) if c not in vocab)
    tail = f"|[{re.escape(unknown)}]+" if unknown else ""
    to_rest, to_letters = _moved(unknown + sep, text)  # when searching, the separator is in no class
    groups = _groups(_classes(unknown, to_rest, to_letters), _classes(unknown + sep, to_rest, to_letters), text)
    if len(groups) == 1:  # digits, letters and the rest all joined: cut at each pair no junction holds
        return Cuts(coarse, None, junctions=pairs, min_length=2)
    fine = re.compile(f"{MARK}*(?:{'|'.join(groups)})|{MARK}+{tail}")
    return Cuts(coarse, fine, alpha_whole=not any(map(str.isalpha, to_rest)))


def _junctions(left: Sequence[str], right: Sequence[str]) -> Optional[Tuple[str, str, FrozenSet[str]]]:
    """Every distinct junction, joined by a separator none holds, the separator,
    and the junctions as a set."""
    if not all(left) or not all(right):
        return None  # an empty part: no junction to speak of, so no cut
    pairs = frozenset(map(operator.add, map(operator.itemgetter(-1), left), map(operator.itemgetter(0), right)))
    chars = set("".join(pairs))
    sep = next((c for c in _SEPARATORS if c not in chars), None)
    return None if sep is None else (sep.join(pairs), sep, pairs)


def _coarse(before_mark: Container[str]) -> "re.Pattern[str]":
    """Each ``▁`` run and what follows it up to the next one; after a character of
    ``before_mark``, which some junction joins to ``▁``, the next run stays in the piece."""
    if not before_mark:
        return re.compile(f"{MARK}*[^{MARK}]+|{MARK}+")
    joins = re.escape("".join(sorted(before_mark)))
    return re.compile(f"{MARK}*[^{MARK}]+(?:(?<=[{joins}]){MARK}+[^{MARK}]*)*|{MARK}+")


def split_apart(text: str, junctions: Container[str]) -> List[str]:
    """``text`` cut between every two neighbours that no junction holds."""
    apart = map(operator.not_, map(junctions.__contains__, map(operator.add, text, text[1:])))
    cuts = list(itertools.compress(range(1, len(text)), apart))
    if not cuts:
        return [text]
    return list(map(text.__getitem__, map(slice, [0] + cuts, cuts + [len(text)])))


def _classes(unknown: str, to_rest: str = "", to_letters: str = "") -> List[List[str]]:
    """Digits, letters, the rest: a partition of what is neither the mark nor an
    unknown character below U+0100, each as a union of character sets (negated
    ones, so that characters can be taken out).  ``to_rest``: word characters
    that count as the rest; ``to_letters``: other characters that count as letters."""
    unknown, to_rest, to_letters = map(re.escape, (unknown, to_rest, to_letters))
    letters = [f"[^\\W\\d_{to_rest}{unknown}]"] + ([f"[{to_letters}]"] if to_letters else [])
    rest = [f"[_{to_rest}]", f"[^\\w{MARK}{to_letters}{unknown}]"]
    return [[f"[^\\D{unknown}]"], letters, rest]


def _one(*classes: List[str]) -> str:
    """A pattern for one character of any of ``classes``."""
    parts = [part for c in classes for part in c]
    return parts[0] if len(parts) == 1 else f"(?:{'|'.join(parts)})"


def _run(*classes: List[str]) -> str:
    """A pattern for a run of characters of ``classes``: a run of each set in turn,
    so that the engine loops over a set, not over an alternation per character."""
    parts = [part for c in classes for part in c]
    return f"{parts[0]}+" if len(parts) == 1 else f"(?:{'+|'.join(parts)}+)+"


def _moved(seen: str, text: str) -> Tuple[str, str]:
    """``to_rest`` and ``to_letters`` for ``_classes``: the few characters that,
    counted with the other class, keep letters and the rest apart (Llama's
    ``²``, a word character joined to ``.``; combining marks, which are no word
    characters, joined to their letters), or nothing."""
    letters, rest = map(_one, _classes(seen)[1:])
    pairs = [m for m in re.findall(letters + rest, text)] + [m[::-1] for m in re.findall(rest + letters, text)]
    letter_side, rest_side = {p[0] for p in pairs}, {p[1] for p in pairs}  # each pair as (letter, rest)
    for chars, index in sorted([(letter_side, 0), (rest_side, 1)], key=lambda o: len(o[0])):
        if len(chars) > _MAX_MOVED:
            break
        moved = ["", ""]
        moved[index] = "".join(sorted(chars))
        letters, rest = map(_one, _classes(seen, *moved)[1:])
        if not re.search(letters + rest, text) and not re.search(rest + letters, text):
            return moved[0], moved[1]
    return "", ""


def _groups(classes: List[List[str]], searched: List[List[str]], text: str) -> List[str]:
    """Classes some merge result joins go in one group, each group one run; a
    class no result repeats (Llama's digits) is a run of one character.
    ``searched``: the same classes without the separator, to search ``text`` with."""
    group = list(range(len(classes)))

    def find(i: int) -> int:
        while group[i] != i:
            i = group[i]
        return i

    def joins(i: int, j: int) -> bool:
        return re.search(_one(searched[i]) + _one(searched[j]), text) is not None

    for i in range(len(classes)):
        for j in range(len(classes)):
            if i != j and find(i) != find(j) and joins(i, j):
                group[find(i)] = find(j)
    out = []
    for root in sorted(set(map(find, range(len(classes))))):
        members = [i for i in range(len(classes)) if find(i) == root]
        if len(members) == 1 and not joins(root, root):
            out.append(_one(classes[root]))
        else:
            out.append(_run(*(classes[i] for i in members)))
    return out
