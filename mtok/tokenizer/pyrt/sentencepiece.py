"""A fused encode path for the commonest SentencePiece-BPE shape (Llama-2, Mistral, Phi-3, Gemma).

Those files have no pre-tokenizer, a normalizer that only marks spaces
(``Replace(" ", "▁")``, after ``Prepend("▁")`` in the Llama family) and a BPE
model whose text can be cut at each ``▁`` run without changing its tokens (see
``BPE._find_chunker``).  The general pipeline runs the normalizer Sequence step
by step, then the pre-tokenizer dispatch, then the model, which cuts the text.
This path normalizes with one ``str.replace``; a short text seen before is one
lookup in the pipeline's word cache; any other is cut with one regex and goes
straight to the model's chunk cache, in one loop: the same ids with less work.  Any other shape keeps the general pipeline.
"""

from __future__ import annotations

from typing import Callable, List, Optional

from .bpe import BPE
from .normalizers import Prepend, Replace, Sequence

MARK = "\u2581"


def _marks_spaces(n) -> bool:
    return isinstance(n, Replace) and n.literal == " " and n.regex is None and n.content == MARK


def _prepends_mark(n) -> bool:
    return isinstance(n, Prepend) and n.prepend == MARK


def fused_normalizer(normalizer) -> Optional[Callable[[str], str]]:
    """``normalizer`` as one function when it is [Prepend("▁"),] Replace(" ", "▁"); else None."""
    steps = normalizer.normalizers if isinstance(normalizer, Sequence) else [normalizer]
    if len(steps) == 1 and _marks_spaces(steps[0]):
        return _replace_only
    if len(steps) == 2 and _prepends_mark(steps[0]) and _marks_spaces(steps[1]):
        return _prepend_and_replace
    return None


def _replace_only(s: str) -> str:
    return s.replace(" ", MARK)


def _prepend_and_replace(s: str) -> str:
    # Prepend adds nothing to an empty string, as in tokenizers.
    return MARK + s.replace(" ", MARK) if s else s


def sentencepiece_encoder(tokenizer) -> Optional[Callable[[str], List[int]]]:
    """The fused ``text -> ids`` (before post-processing) for ``tokenizer``, if it has the shape."""
    model = tokenizer.model
    if tokenizer.pre_tokenizer is not None or not isinstance(model, BPE):
        return None
    normalize = fused_normalizer(tokenizer.normalizer) if tokenizer.normalizer is not None else None
    if normalize is None:
        return None
    segments = tokenizer.added.segments
    tokenize = model.tokenize  # a vocabulary that joins across "▁" is merged whole, as in the pipeline
    if model._chunker is not None and not model.ignore_merges:  # ignore_merges looks whole texts up first
        cut, tokenize_chunks = model._chunker.findall, model.tokenize_chunks

        def tokenize(piece: str) -> List[int]:
            return tokenize_chunks(cut(piece))

    cache, remember = tokenizer._cache, tokenizer._remember

    def encode(text: str) -> List[int]:
        ids: List[int] = []
        for piece, tok_id, _ in segments(text, normalize):
            if tok_id is not None:
                ids.append(tok_id)
                continue
            hit = cache.get(piece)  # a short text seen before: one lookup, as in the pipeline
            ids += hit if hit is not None else remember(piece, tokenize(piece))
        return ids

    return encode
