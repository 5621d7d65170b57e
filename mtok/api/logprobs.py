"""Logprobs in the shapes clients expect, from what the pipeline carries.

The scheduler asks the engine for (logprob, token id) pairs, the detokenizer
turns each into SGLang's ``[logprob, token_id, text-or-None]`` triple (texts
decoded in one batch per step), and the HTTP side keeps them per request
under SGLang's ``meta_info`` keys (:data:`mtok.wire.io_struct.LOGPROB_KEYS`).  This
module renders those for SGLang (``meta_info``), OpenAI completions
(``tokens`` / ``token_logprobs`` / ``top_logprobs`` / ``text_offset``) and
OpenAI chat (``content[].{token, logprob, bytes, top_logprobs}``).
"""

from __future__ import annotations

from typing import Any, Dict, List

from ..wire.io_struct import LOGPROB_KEYS

OUTPUT_KEYS = tuple(k for k in LOGPROB_KEYS if k.startswith("output_"))


def sglang_meta(got: Dict[str, list]) -> Dict[str, Any]:
    """SGLang's logprob keys of meta_info; an output key exists (empty) as soon
    as its input twin does, so a prefill-only request has both."""
    meta: Dict[str, Any] = dict(got)
    for key in OUTPUT_KEYS:
        if key.replace("output_", "input_") in meta:
            meta.setdefault(key, [])
    return meta


class CompletionLogprobs:
    """OpenAI completions' ``logprobs`` object for one choice, built piece by
    piece so that a stream sends each token's entry once; ``text_offset``
    counts from the start of the choice's text."""

    def __init__(self, offset: int = 0):
        self.offset = offset
        self.sent = {"input": 0, "output": 0}

    def take(self, got: Dict[str, list], side: str) -> Dict[str, list]:
        """The entries of ``side`` (input/output) not taken yet."""
        toks = got.get(f"{side}_token_logprobs", [])
        tops = got.get(f"{side}_top_logprobs")
        start, self.sent[side] = self.sent[side], len(toks)
        out: Dict[str, list] = {"tokens": [], "token_logprobs": [], "top_logprobs": [], "text_offset": []}
        for i in range(start, len(toks)):
            lp, _tid, text = toks[i]
            text = text or ""
            out["tokens"].append(text)
            out["token_logprobs"].append(lp)
            out["text_offset"].append(self.offset)
            self.offset += len(text)
            top = tops[i] if tops is not None and i < len(tops) else None
            if lp is None:  # the prompt's first token: no context, no logprob
                out["top_logprobs"].append(None)
            else:
                entry = {t or "": x for x, _, t in top or ()}
                entry.setdefault(text, lp)  # the sampled token is always listed (as vLLM does)
                out["top_logprobs"].append(entry)
        return out


def merge(a: Dict[str, list], b: Dict[str, list]) -> Dict[str, list]:
    return {k: a[k] + b[k] for k in a}


def chat_content(got: Dict[str, list], start: int = 0) -> List[Dict[str, Any]]:
    """OpenAI chat's ``logprobs.content`` for the output tokens from ``start`` on."""
    toks = got.get("output_token_logprobs", [])
    tops = got.get("output_top_logprobs")
    out = []
    for i in range(start, len(toks)):
        lp, _tid, text = toks[i]
        top = tops[i] if tops is not None and i < len(tops) else None
        out.append({"token": text or "", "logprob": lp, "bytes": list((text or "").encode()),
                    "top_logprobs": [{"token": t or "", "logprob": x, "bytes": list((t or "").encode())}
                                     for x, _, t in (top or ())]})
    return out
