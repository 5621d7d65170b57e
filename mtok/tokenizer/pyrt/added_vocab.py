"""Added tokens: ids outside (or on top of) the model, matched before the model runs.

This follows tokenizers' ``AddedVocabulary``: tokens with ``normalized=False``
are cut out of the raw text first; what remains is normalized piece by piece
and tokens with ``normalized=True`` are cut out of that, matched in their
normalized form.  Matching is leftmost-longest; ``single_word``, ``lstrip`` and
``rstrip`` then adjust or reject each match.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Callable, Dict, Iterator, List, Optional, Set, Tuple

from .. import TokenizerError
from ._chars import WHITE_SPACE, is_word

# (text, id, lead): id is None for text still to tokenize; lead: see AddedVocabulary.segments.
Segment = Tuple[str, Optional[int], int]


@dataclass(frozen=True)
class AddedToken:
    content: str
    single_word: bool = False
    lstrip: bool = False
    rstrip: bool = False
    normalized: bool = True
    special: bool = False

    @classmethod
    def from_json(cls, d: dict) -> "AddedToken":
        if not isinstance(d.get("content"), str):
            raise TokenizerError(f"added token without content: {d!r}")
        return cls(
            d["content"],
            bool(d.get("single_word", False)),
            bool(d.get("lstrip", False)),
            bool(d.get("rstrip", False)),
            bool(d.get("normalized", True)),
            bool(d.get("special", False)),
        )


class _Matcher:
    """Leftmost-longest search over a set of literal patterns, each with its token id.

    A one-character class finds where a pattern could start, and a walk over
    the set of the patterns' prefixes, one character at a time, finds the
    longest pattern there.  (An alternation of all the patterns, which ``re``
    tries one by one at each such place, took 0.4 s to compile for Gemma-3's
    6,415 added tokens and ~6,000 steps at each ``<`` of the text.)
    """

    def __init__(self, patterns: Dict[str, int]):
        self.ids = patterns
        self._prefixes = {p[:i] for p in patterns for i in range(1, len(p))}
        self._starts = re.compile(f"[{''.join(map(re.escape, sorted({p[0] for p in patterns})))}]")

    def finditer(self, text: str) -> Iterator[Tuple[int, int, int]]:
        ids, prefixes, search = self.ids, self._prefixes, self._starts.search
        m = search(text)
        while m is not None:
            start = end = m.start()
            found = None
            while end < len(text):
                end += 1
                head = text[start:end]
                tok_id = ids.get(head)
                if tok_id is not None:
                    found = (end, tok_id)
                if head not in prefixes:
                    break
            if found is None:
                m = search(text, start + 1)
            else:
                yield start, found[0], found[1]
                m = search(text, found[0])


class AddedVocabulary:
    def __init__(self, tokens: List[AddedToken], model, normalize: Optional[Callable[[str], str]]):
        self.content_to_id: Dict[str, int] = {}
        self.tokens: Dict[int, AddedToken] = {}
        self.special_contents: Set[str] = set()
        self._decode_form: Dict[int, str] = {}  # normalized content, when that differs
        self._add(tokens, model, normalize)
        raw: Dict[str, int] = {}
        normed: Dict[str, int] = {}
        for i in sorted(self.tokens):
            tok = self.tokens[i]
            pattern = self._decode_form.get(i, tok.content) if tok.normalized else tok.content
            # An empty pattern (a token normalized away) can never be cut out usefully;
            # of duplicate patterns tokenizers keeps an arbitrary one, here the lowest id.
            if pattern:
                (normed if tok.normalized else raw).setdefault(pattern, i)
        self._raw = _Matcher(raw) if raw else None
        self._normed = _Matcher(normed) if normed else None

    def _add(self, tokens: List[AddedToken], model, normalize) -> None:
        """tokenizers' ``add_tokens``: known contents keep their id, new ones follow the model's."""
        model_vocab: Dict[str, int] = model.vocab
        next_id = model.get_vocab_size()
        for tok in tokens:
            if not tok.content:
                continue
            known = self.content_to_id.get(tok.content)
            if known is not None and self.tokens.get(known) == tok:
                continue
            new_id = known if known is not None else model_vocab.get(tok.content)
            if new_id is None:
                new_id, next_id = next_id, next_id + 1
            if tok.normalized and normalize is not None:
                form = normalize(tok.content)
                if form != tok.content:
                    self._decode_form[new_id] = form
            self.content_to_id[tok.content] = new_id
            if tok.special:
                self.special_contents.add(tok.content)
            self.tokens[new_id] = tok

    def __len__(self) -> int:
        return len(self.content_to_id)

    def id_to_token(self, i: int) -> Optional[str]:
        """The string the decoder sees: the normalized form for normalized tokens."""
        tok = self.tokens.get(i)
        if tok is None:
            return None
        return self._decode_form.get(i, tok.content)

    # -- extraction ----------------------------------------------------------------
    def segments(
        self,
        text: str,
        normalize: Optional[Callable[[str], str]],
        lead_of: Optional[Callable[[str], int]] = None,
    ) -> List[Segment]:
        """Cut ``text`` into added tokens and normalized text (tokenizers' ``extract_and_normalize``).

        Each segment carries its *lead*: how many of its leading characters stand
        for the very start of ``text`` (0 for all but the first).  ``lead_of(piece)``
        gives it for a normalized piece; by default only the first character does.
        """
        out: List[Segment] = []
        for piece, tok_id, lead in self._cut(text, self._raw, 1):
            if tok_id is not None:
                out.append((piece, tok_id, 0))
                continue
            if lead and lead_of is not None:
                lead = lead_of(piece)
            if normalize is not None:
                piece = normalize(piece)
            out.extend(self._cut(piece, self._normed, lead))
        return out

    def _cut(self, text: str, matcher: Optional[_Matcher], lead: int) -> List[Segment]:
        if not text:
            return []
        if matcher is None:
            return [(text, None, lead)]
        out: List[Segment] = []
        done = 0
        for start, stop, tok_id in matcher.finditer(text):
            tok = self.tokens[tok_id]
            if tok.single_word and (
                (start and is_word(text[start - 1])) or (stop < len(text) and is_word(text[stop]))
            ):
                continue
            if tok.lstrip:
                s = start
                while s > 0 and text[s - 1] in WHITE_SPACE:
                    s -= 1
                start = max(s, done)
            if tok.rstrip:
                while stop < len(text) and text[stop] in WHITE_SPACE:
                    stop += 1
            if done < start:
                out.append((text[done:start], None, max(0, lead - done)))
            out.append((text[start:stop], tok_id, 0))
            done = stop
        if done < len(text):
            out.append((text[done:], None, max(0, lead - done)))
        return [s for s in out if s[0]]
