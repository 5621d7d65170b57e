"""A custom engine: a bigram model learned from each prompt.

Run it with::

    python -m mtok.serve --engine examples/custom_engine.py:BigramEngine

For every request it builds a table of which token followed which in the
prompt, then generates by walking that table (picking among successors with
the request's seed), so the output reads like a remix of the prompt.  It keeps
per-request state between steps, which is what add_request / finish_request
are for in a real engine (think KV cache).
"""

from __future__ import annotations

import random
from typing import Any, Dict, List, Sequence

from mtok.engines import Engine, EngineContext


class BigramEngine(Engine):
    def __init__(self, ctx: EngineContext):
        super().__init__(ctx)
        self.tables: Dict[str, Dict[int, List[int]]] = {}
        self.rngs: Dict[str, random.Random] = {}

    def add_request(self, req: Any) -> None:
        table: Dict[int, List[int]] = {}
        ids = req.input_ids
        for a, b in zip(ids, ids[1:] + ids[:1]):
            table.setdefault(a, []).append(b)
        self.tables[req.rid] = table
        self.rngs[req.rid] = random.Random(req.sampling_params.seed or 0)

    def finish_request(self, req: Any) -> None:
        self.tables.pop(req.rid, None)
        self.rngs.pop(req.rid, None)

    def step(self, batch: Sequence[Any]) -> List[int]:
        out = []
        for req in batch:
            if not req.output_ids:
                out.append(req.input_ids[0])
                continue
            choices = self.tables[req.rid].get(req.output_ids[-1]) or req.input_ids
            out.append(self.rngs[req.rid].choice(choices))
        return out
