"""A real causal LM in process: any local ``transformers`` model directory on
PyTorch (CPU), behind mtok's engine protocol.

    MTOK_HF_MODEL=/path/to/model python -m mtok.serve \\
        --tokenizer-path /path/to/model/tokenizer.json --engine examples/hf_engine.py:HFEngine

What it does, and how:

- **Continuous batching.** Requests join (``add_request``: the prompt is run
  once, filling the request's KV cache) and leave (``finish_request``: the cache
  is dropped) between steps; each step advances every running request by one
  token.  The forward passes inside a step run one request at a time on its own
  cache -- batching them into one padded forward would be faster and is the
  next step, but the scheduling contract is the same.
- **A KV cache per request** (``past_key_values`` from the model), so a step
  costs one token's forward per request, not the whole sequence's.
- **Greedy** when ``temperature`` is 0 (or ``top_k`` is 1), otherwise
  **sampled** after temperature, top-k and top-p, from a per-request
  ``torch.Generator`` seeded with ``seed`` when given, so seeded runs repeat.
- **Logprobs** are the model's ``log_softmax`` of the raw logits (before any
  sampling transform), for prompt positions and generated ones, with the top-n
  and those of chosen ids; **stop token ids**, eos and ``max_new_tokens`` are
  enforced by mtok's scheduler; **n** works because each sample is its own
  request with its own cache and generator.

Requires ``torch`` and ``transformers`` (not mtok's core).
"""

from __future__ import annotations

import os
from typing import Any, Dict, List, Optional, Sequence

import torch
from transformers import AutoModelForCausalLM

from mtok.engines import Engine, EngineContext, PositionLogprobs


class _State:
    """One request's cache, pending logits, sampler and per-position distributions."""

    def __init__(self, past: Any, logits: torch.Tensor, prompt_logprobs: torch.Tensor, seed: Optional[int]):
        self.past = past
        self.logits = logits  # for the next position
        self.prompt_logprobs = prompt_logprobs  # [len(prompt) - 1, vocab]: position p+1 given the first p+1
        self.output_logprobs: List[torch.Tensor] = []
        self.generator = torch.Generator()
        self.generator.manual_seed(seed if seed is not None else torch.seed())
        self.last: Optional[int] = None  # sampled but not yet fed to the model


class HFEngine(Engine):
    capabilities = frozenset(("logprobs", "top_logprobs", "token_ids_logprob", "n", "prefill_only"))

    def __init__(self, ctx: EngineContext):
        super().__init__(ctx)
        path = (ctx.options or {}).get("model") or os.environ.get("MTOK_HF_MODEL")
        if not path:
            raise ValueError("hf_engine: set MTOK_HF_MODEL to a local transformers model directory")
        torch.set_grad_enabled(False)
        self.model = AutoModelForCausalLM.from_pretrained(path, torch_dtype=torch.float32)
        self.model.eval()
        self.states: Dict[str, _State] = {}

    def _forward(self, ids: List[int], past: Any) -> Any:
        return self.model(input_ids=torch.tensor([ids]), past_key_values=past, use_cache=True)

    def add_request(self, req: Any) -> None:
        out = self._forward(list(req.input_ids), None)
        logits = out.logits[0].float()
        self.states[req.rid] = _State(out.past_key_values, logits[-1], torch.log_softmax(logits[:-1], -1),
                                      req.sampling_params.seed)

    def finish_request(self, req: Any) -> None:
        self.states.pop(req.rid, None)

    def step(self, batch: Sequence[Any]) -> List[int]:
        return [self._advance(req) for req in batch]

    def _advance(self, req: Any) -> int:
        st = self.states[req.rid]
        if st.last is not None:  # feed the token chosen last step
            out = self._forward([st.last], st.past)
            st.past, st.logits = out.past_key_values, out.logits[0, -1].float()
        st.output_logprobs.append(torch.log_softmax(st.logits, -1))
        st.last = self._choose(st.logits, req.sampling_params, st.generator)
        return st.last

    @staticmethod
    def _choose(logits: torch.Tensor, sp: Any, gen: torch.Generator) -> int:
        if sp.temperature == 0 or sp.top_k == 1:
            return int(torch.argmax(logits))
        scores = logits / sp.temperature
        if sp.top_k > 0:
            kth = torch.topk(scores, min(sp.top_k, scores.numel())).values[-1]
            scores = scores.masked_fill(scores < kth, float("-inf"))
        probs = torch.softmax(scores, -1)
        if sp.top_p < 1.0:
            sorted_p, order = torch.sort(probs, descending=True)
            drop = torch.cumsum(sorted_p, -1) - sorted_p > sp.top_p
            sorted_p[drop] = 0.0
            probs = torch.zeros_like(probs).scatter(0, order, sorted_p)
        return int(torch.multinomial(probs, 1, generator=gen))

    def logprobs(self, req: Any, position: int, top_n: int, token_ids: Optional[List[int]]) -> PositionLogprobs:
        st = self.states[req.rid]
        n_in = len(req.input_ids)
        dist = st.prompt_logprobs[position - 1] if position < n_in else st.output_logprobs[position - n_in]
        token = (list(req.input_ids) + list(req.output_ids))[position]
        top = torch.topk(dist, min(top_n, dist.numel())) if top_n else None
        top_rows = [(float(v), int(i)) for v, i in zip(top.values, top.indices)] if top is not None else []
        return float(dist[token]), top_rows, [(float(dist[t]), int(t)) for t in token_ids or ()]
