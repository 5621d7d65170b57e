"""The echo engine: it generates the prompt back, token by token.

For a prompt P and ``max_new_tokens`` M it emits P[0], P[1], ... cycling
through P, so a request with M = len(P) gets its own prompt as text.  Any
misrouted or mixed-up response is therefore visible, and benchmarks measure
the frontend rather than a model.  It also embeds (``/v1/embeddings``,
``/encode``): a deterministic bag-of-tokens vector, cheap enough for tests and
benchmarks.
"""

from __future__ import annotations

import functools
import math
from typing import Any, List, Sequence, Tuple

from . import Engine


class EchoEngine(Engine):
    def step(self, batch: Sequence[Any]) -> List[int]:
        return [r.input_ids[len(r.output_ids) % len(r.input_ids)] for r in batch]

    def embed(self, batch: Sequence[Any]) -> List[List[float]]:
        return [echo_embedding(r.input_ids) for r in batch]


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
