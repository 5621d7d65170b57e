"""The echo engine: it generates the prompt back, token by token.

For a prompt P and ``max_new_tokens`` M it emits P[0], P[1], ... cycling
through P, so a request with M = len(P) gets its own prompt as text.  Any
misrouted or mixed-up response is therefore visible, and benchmarks measure
the frontend rather than a model.

Its logprobs are deterministic, so tests can check them exactly: at every
position, prompt or output, the engine "predicts" the token that is there
(``c``), and a token ``t`` has probability ``2 ** -(1 + (t - c) mod V)`` for a
vocabulary of V ids.  So the token itself has logprob ``-ln 2``, the top-n
are ``c, c+1, ..., c+n-1`` (mod V) with logprobs ``-ln 2, -2 ln 2, ...``, and
any id's logprob follows from the same formula.  It serves ``n`` (every sample
is the same echo), ``max_new_tokens: 0`` (prompt scoring) and ``/flush_cache``
(it caches nothing), ``logit_bias`` (added to those logits, it picks the
greedy token: a bias can make it say another token; its logprobs stay the
unbiased ones, as vLLM's raw logprobs) and refuses constraints (regex, JSON
schema, grammar) and LoRA adapters, which it cannot honour.  It also embeds (``/v1/embeddings``,
``/encode``): a deterministic bag-of-tokens vector, cheap enough for tests and
benchmarks.

Its scores follow (``/v1/score``, :mod:`mtok.api.scoring`): the next token after a
prompt P is P[0], so label ``t`` gets probability ``2 ** -(1 + (t - P[0]) mod V)``
(P = query + item, or item + query with ``item_first``); its reranking
(``/v1/rerank``) is the cosine of the two texts' embeddings.
"""

from __future__ import annotations

import functools
import math
from typing import Any, Dict, List, Optional, Sequence, Tuple

from . import Engine, PositionLogprobs


LN2 = math.log(2.0)


class EchoEngine(Engine):
    capabilities = frozenset(("logprobs", "top_logprobs", "token_ids_logprob", "prefill_only", "n", "flush_cache",
                              "logit_bias"))

    def logprobs(self, req: Any, position: int, top_n: int, token_ids: Optional[List[int]]) -> PositionLogprobs:
        vocab = self.ctx.tokenizer.vocab_size
        n_in = len(req.input_ids)
        c = req.input_ids[position] if position < n_in else req.output_ids[position - n_in]
        top = [(-(1 + i) * LN2, (c + i) % vocab) for i in range(min(top_n, vocab))]
        ids = [(echo_logprob(c, t, vocab), t) for t in token_ids or ()]
        return -LN2, top, ids

    def flush_cache(self) -> None:
        pass

    def step(self, batch: Sequence[Any]) -> List[int]:
        vocab = self.ctx.tokenizer.vocab_size
        out = []
        for r in batch:
            c = r.input_ids[len(r.output_ids) % len(r.input_ids)]
            bias = r.sampling_params.logit_bias
            out.append(biased_choice(c, bias, vocab) if bias else c)
        return out

    def embed(self, batch: Sequence[Any]) -> List[List[float]]:
        return [echo_embedding(r.input_ids) for r in batch]


def echo_logprob(predicted: int, token: int, vocab: int) -> float:
    """The echo engine's logprob of ``token`` where it predicts ``predicted``."""
    return -(1 + (token - predicted) % vocab) * LN2


def biased_choice(predicted: int, bias: Dict[str, float], vocab: int) -> int:
    """The greedy token once ``bias`` (token id as a decimal string -> a value
    in [-100, 100], as mtok.managers.prepare spells it) is added to the echo
    logits ``-(1 + d) ln 2`` (``d``: distance after ``predicted``); ties go to
    the nearer.  Only tokens up to 100 / ln 2 (145) places past the first
    unbiased one can win, so that window is all it looks at: its cost is the
    bias's size at most, not the vocabulary's."""
    best, best_logit, d, end = predicted, -math.inf, 0, vocab - 1
    while d <= end:
        t = (predicted + d) % vocab
        b = bias.get(str(t))
        logit = -(1 + d) * LN2 + (b or 0.0)
        if logit > best_logit:
            best, best_logit = t, logit
        if b is None:  # unbiased: no token past d + _REACH beats it, even by the largest bias
            end = min(end, d + _REACH)
        d += 1
    return best


_REACH = math.ceil(100 / LN2)


EMBEDDING_DIM = 64


@functools.lru_cache(maxsize=65536)
def _token_vector(token: int) -> Tuple[float, ...]:
    """A fixed pseudo-random direction per token id (xorshift; no RNG state)."""
    x = (token * 2654435761 + 0x9E3779B9) & 0xFFFFFFFF or 1
    out = []
    for _ in range(EMBEDDING_DIM):
        x ^= (x << 13) & 0xFFFFFFFF
        x ^= x >> 17
        x ^= (x << 5) & 0xFFFFFFFF
        out.append(x / 0x7FFFFFFF - 1.0)
    return tuple(out)


def echo_embedding(ids: Sequence[int]) -> List[float]:
    """The built-in embedding: deterministic, cheap, unit length.  The mean of
    per-token directions, so texts that share tokens point the same way."""
    acc = [0.0] * EMBEDDING_DIM
    for tok in ids:
        for i, v in enumerate(_token_vector(tok)):
            acc[i] += v
    norm = math.sqrt(sum(v * v for v in acc)) or 1.0
    return [v / norm for v in acc]
