"""The echo engine: it generates the prompt back, token by token.

For a prompt P and ``max_new_tokens`` M it emits P[0], P[1], ... cycling
through P, so a request with M = len(P) gets its own prompt as text.  Any
misrouted or mixed-up response is therefore visible, and benchmarks measure
the frontend rather than a model.
"""

from __future__ import annotations

from typing import Any, List, Sequence

from . import Engine


class EchoEngine(Engine):
    def step(self, batch: Sequence[Any]) -> List[int]:
        return [r.input_ids[len(r.output_ids) % len(r.input_ids)] for r in batch]

    def embed(self, batch: Sequence[Any]) -> List[List[float]]:
        return [_echo_embedding(r.input_ids) for r in batch]


def _echo_embedding(ids: Sequence[int], dim: int = 16) -> List[float]:
    """A cheap, deterministic, unit-length vector of the token ids."""
    vec = [0.0] * dim
    for pos, tok in enumerate(ids):
        vec[(tok * 31 + pos) % dim] += 1.0 + (tok % 7) / 7.0
    norm = sum(v * v for v in vec) ** 0.5 or 1.0
    return [v / norm for v in vec]
