"""``--engine sglang:http://HOST:PORT``: an SGLang server started with
``--skip-tokenizer-init``, behind mtok.

mtok tokenizes, renders chat templates, parses tools and detokenizes; the
upstream gets ``input_ids`` on its native ``/generate`` and streams token ids
back.  What SGLang 0.5.23 sends in that mode (``sglang/srt``):

- ``managers/tokenizer_manager.py`` ``_handle_batch_output``, the
  ``BatchTokenIDOutput`` branch (around lines 2675-2712): with no tokenizer the
  detokenizer is bypassed, so events carry ``output_ids`` and ``meta_info`` and
  **no** ``text`` key.  Streamed ``output_ids`` are **cumulative** (the whole
  list so far) unless the server runs with ``--incremental-streaming-output``,
  when each event has only the new ids.  Both are read right here by counting:
  ``meta_info["completion_tokens"]`` is always the running total (it is filled
  from ``recv_obj.completion_tokens[i]`` around line 2560), so the new ids are
  the last ``completion_tokens - seen`` of the event's list, whichever mode.
- ``meta_info["finish_reason"]`` (line ~2510) is None until the end, then
  ``{"type": "stop", "matched": id-or-str}``, ``{"type": "length", "length": n}``
  or ``{"type": "abort", "message": ..., "status_code": ...}``.
- Logprobs (``return_logprob``) come in ``meta_info`` as
  ``output_token_logprobs`` ``[[logprob, id, None], ...]`` -- the text is None
  because ``return_text_in_logprobs and not self.skip_tokenizer_init`` is false
  (line ~2526) -- plus ``output_top_logprobs`` / ``output_token_ids_logprobs``
  (per position a list of such triples) and the ``input_*`` lists for the
  prompt from ``logprob_start_len``; cumulative like the ids, sliced the same way.
- A text prompt is refused ("cannot accept text prompts", line ~1123); mtok
  always sends ids.  An error inside a stream is an event ``{"error":
  {"message", "code"}}`` (``entrypoints/http_server.py`` ~line 965); one before
  it is an HTTP error with ``{"error": {"message"}}`` (``_create_error_response``).
- The seed is ``sampling_seed`` (``sampling/sampling_params.py`` line 179).

Constraints (``regex``, ``json_schema``, ``ebnf``, ``structural_tag``; and with
them ``response_format`` and a forced ``tool_choice``, which mtok's API turns
into a ``json_schema``) go in ``sampling_params`` under SGLang's own names.
SGLang builds no grammar backend when it runs with ``--skip-tokenizer-init``
(``constrained/grammar_manager.py``: ``grammar_backend = None``), and then
aborts every constrained request with a 400 ("Grammar-based generation ... is
not supported"), which mtok passes on; an upstream that should constrain runs
with its tokenizer.  It still takes ``input_ids`` and sends ``output_ids`` and
``meta_info`` beside its own ``text``, which is ignored, so this adapter serves
both modes.

Stop strings are not sent: mtok matches them on its own detokenized text and
cuts the stream, which SGLang sees as a disconnect and aborts.  ``n`` is
expanded by mtok into single requests, so the upstream always gets ``n = 1``.
No ``rid`` is sent (SGLang makes its own), so two frontends never collide.
"""

from __future__ import annotations

from typing import Any, Dict, List, Optional, Tuple

from .upstream import Flight, UpstreamEngine, error_event_abort, upstream_abort
from ..wire.finish import FinishReason, as_finish

# mtok's SamplingParams fields that go upstream under the same name when not at their default
FORWARDED = ("max_new_tokens", "min_new_tokens", "temperature", "top_p", "top_k", "min_p", "frequency_penalty",
             "presence_penalty", "repetition_penalty", "ignore_eos", "regex", "json_schema", "ebnf",
             "structural_tag", "logit_bias", "custom_params")


def sampling_body(sp: Any) -> Dict[str, Any]:
    out: Dict[str, Any] = {k: getattr(sp, k) for k in FORWARDED if getattr(sp, k) is not None}
    if sp.stop_token_ids:
        out["stop_token_ids"] = list(sp.stop_token_ids)
    if sp.seed is not None:
        out["sampling_seed"] = sp.seed
    return out


def row(own: Any, top: Any, ids: Any) -> Tuple[Optional[float], Optional[list], Optional[list]]:
    """SGLang's [logprob, id, text] triples as mtok's (own, [(lp, id)], [(lp, id)]) row."""
    def pairs(xs: Any) -> Optional[list]:
        return None if xs is None else [(t[0], t[1]) for t in xs]
    return (None if own is None else own[0]), pairs(top), pairs(ids)


class SGLangEngine(UpstreamEngine):
    capabilities = frozenset(("logprobs", "top_logprobs", "token_ids_logprob", "n", "flush_cache", "lora",
                              "regex", "json_schema", "ebnf", "structural_tag", "logit_bias"))
    generate_path = "/generate"
    health_path = "/health"

    def request_body(self, req: Any) -> Dict[str, Any]:
        body: Dict[str, Any] = {"input_ids": list(req.input_ids), "sampling_params": sampling_body(req.sampling_params),
                                "stream": True}
        lp = req.logprobs
        if lp is not None:
            # one top_n for both sides upstream: the larger (mtok's chat renders each side's own)
            body.update(return_logprob=True, logprob_start_len=lp.start_len,
                        top_logprobs_num=max(lp.top_n, lp.prompt_top_n or 0))
            if lp.token_ids is not None:
                body["token_ids_logprob"] = list(lp.token_ids)
        if req.lora_path is not None:
            body["lora_path"] = req.lora_path
        return body

    def parse_event(self, flight: Flight, event: Dict[str, Any]) -> Tuple[List[int], List[Any], Optional[list],
                                                                          Optional[Dict[str, Any]]]:
        if "error" in event:
            return [], [], None, error_event_abort(event["error"])
        meta = event.get("meta_info") or {}
        ids = event.get("output_ids") or []
        total = meta.get("completion_tokens", len(ids))  # absent: assume cumulative
        fresh = max(0, total - flight.seen)
        new_ids = list(ids[len(ids) - fresh:]) if fresh else []
        rows: List[Any] = []
        input_rows = None
        if flight.req.logprobs is not None:
            rows = self._rows(meta, "output", fresh)
            if flight.seen == 0 and "input_token_logprobs" in meta:
                input_rows = self._rows(meta, "input", len(meta["input_token_logprobs"]))
        return new_ids, rows, input_rows, self._finish(meta.get("finish_reason"))

    @staticmethod
    def _rows(meta: Dict[str, Any], side: str, last: int) -> List[Any]:
        """The last ``last`` positions' rows of ``side`` (cumulative or incremental lists alike)."""
        if last <= 0:
            return []
        own = meta.get(f"{side}_token_logprobs") or []
        top = meta.get(f"{side}_top_logprobs")
        ids = meta.get(f"{side}_token_ids_logprobs")
        n = len(own)
        return [row(own[i], top[i] if top else None, ids[i] if ids else None) for i in range(max(0, n - last), n)]

    @staticmethod
    def _finish(reason: Any) -> Optional[FinishReason]:
        if reason is None:
            return None
        if not isinstance(reason, dict):
            reason = {"type": str(reason)}
        if reason.get("type") == "abort":
            code = reason.get("status_code")
            status = code if isinstance(code, int) and 400 <= code < 500 and code != 499 else 502
            return upstream_abort(status, str(reason.get("message") or "aborted"))
        try:
            return as_finish(reason)
        except ValueError:
            return upstream_abort(502, f"finished with {reason!r}")

    def flush_cache(self) -> None:
        status, raw = self.post_json("/flush_cache", {})
        if status != 200:
            raise RuntimeError(f"upstream /flush_cache answered {status}: {raw[:200]!r}")
