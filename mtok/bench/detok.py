"""``python -m mtok.bench detok``: what streaming costs the detokenizer.

    python -m mtok.bench detok [--tokens 512,4096] [--streams 1,64] [--backend auto,python] [--logprobs off,0,5]

Feeds :meth:`mtok.managers.detokenizer.DetokenizerManager.handle_batch_token_id_out`
one token per step, as the scheduler does, for a stream of ``--tokens`` ids of
natural text (the standard library's docstrings), and compares its total time
with one ``tokenizer.decode`` of the same ids.  With ``--streams`` above 1, that
many streams advance together, one batch per step, as under load.  The
scheduler's messages are built before the clock starts: only the detokenizer
is timed, without IPC.  "decoder-only" is the incremental decoding alone
(:class:`mtok.managers.decoding.IncrementalDecoder`), without the message handling; the
per-token cost at two stream lengths shows whether streaming stays linear.
``--logprobs K`` adds, to every token, its logprob and K alternatives with
their texts (``return_text_in_logprobs``, or any OpenAI request with
logprobs): the texts are decoded in the detokenizer, one batch per step, and
the difference from ``off`` is what that costs per token.
"""

from __future__ import annotations

import argparse
import functools
import time
from typing import Any, Dict, List, Optional

from mtok.wire.args import ServerArgs
from mtok.managers.decoding import DecodeState, IncrementalDecoder
from mtok.managers.detokenizer import DetokenizerManager
from mtok.wire.finish import FinishLength
from mtok.wire.io_struct import BatchTokenIDOutput
from mtok.tokenizer.load import hf_available

from .report import table, write_json
from .tokenizer import stdlib_docstrings


@functools.lru_cache(maxsize=1)
def _docstrings() -> List[str]:
    return stdlib_docstrings()  # parses the whole standard library: once is enough


def natural_ids(tokenizer: Any, count: int) -> List[int]:
    ids: List[int] = []
    for doc in _docstrings():
        ids.extend(tokenizer.encode(doc, add_special_tokens=False))
        if len(ids) >= count:
            return ids[:count]
    raise SystemExit(f"only {len(ids)} tokens of text in this Python's stdlib; ask for fewer")


def steps(ids: List[int], streams: int, run: int, top: Optional[int] = None) -> List[BatchTokenIDOutput]:
    """The scheduler's messages: step k carries token k of every stream (and, with
    ``top``, its logprob and ``top`` alternatives: the next ids, as the echo engine's)."""
    rids = [f"r{run}-{j}" for j in range(streams)]
    out = []
    for k, tok in enumerate(ids):
        final = k == len(ids) - 1
        msg = BatchTokenIDOutput(
            rids=rids, finished_reasons=[FinishLength(k + 1) if final else None] * streams,
            decode_ids=[[tok]] * streams, prompt_tokens=[16] * streams, completion_tokens=[k + 1] * streams,
            skip_special_tokens=[True] * streams, spaces_between_special_tokens=[True] * streams,
            no_stop_trim=[False] * streams, stop=[None] * streams, stop_str_offsets=[None] * streams)
        if top is not None:
            lps = {"output_token_logprobs": [(-0.5, tok)]}
            if top:
                lps["output_top_logprobs"] = [[(-0.5 - i, ids[(k + i) % len(ids)]) for i in range(top)]]
            msg.logprobs = [lps] * streams
            msg.logprob_texts = [True] * streams
        out.append(msg)
    return out


def measure(backend: str, tokenizer_path: Optional[str], n_tokens: int, streams: int, repeat: int,
            top: Optional[int] = None) -> Dict[str, Any]:
    args = ServerArgs(tokenizer_path=tokenizer_path, tokenizer_backend=backend)
    detok = DetokenizerManager(args)
    tok = detok.tokenizer
    ids = natural_ids(tok, n_tokens)
    expected = tok.decode(ids)
    stream_s, text = float("inf"), ""
    for run in range(repeat):
        msgs = steps(ids, streams, run, top)
        detok.token_text_cache.clear()  # every run decodes its token texts afresh
        start = time.perf_counter()
        pieces = [detok.handle_batch_token_id_out(m).output_strs[0] for m in msgs]
        stream_s = min(stream_s, time.perf_counter() - start)
        text = "".join(pieces)
    decoder_s = min(_decoder_only(IncrementalDecoder(tok), ids, streams) for _ in range(repeat))
    one_shot_s = float("inf")
    for _ in range(repeat):
        start = time.perf_counter()
        for _ in range(streams):
            tok.decode(ids)
        one_shot_s = min(one_shot_s, time.perf_counter() - start)
    return {
        "backend": tok.backend, "tokens": n_tokens, "streams": streams,
        "logprobs": "off" if top is None else f"top {top}",
        "stream_ms": round(1000 * stream_s, 3), "one_shot_ms": round(1000 * one_shot_s, 3),
        "stream_over_one_shot": round(stream_s / one_shot_s, 2),
        "decoder_ms": round(1000 * decoder_s, 3),
        "us_per_token_streamed": round(1e6 * stream_s / (n_tokens * streams), 3),
        "same_text": text == expected,
    }


def _decoder_only(decoder: IncrementalDecoder, ids: List[int], streams: int) -> float:
    """The incremental decoding alone, without the detokenizer's message handling."""
    states = [DecodeState() for _ in range(streams)]
    final = [False] * streams
    start = time.perf_counter()
    for tok in ids:
        for st in states:
            st.ids.append(tok)
        decoder.step(states, final)
    return time.perf_counter() - start


COLUMNS = [("backend", "backend"), ("streams", "streams"), ("tokens each", "tokens"), ("logprobs", "logprobs"),
           ("streamed ms", "stream_ms"), ("one-shot ms", "one_shot_ms"), ("ratio", "stream_over_one_shot"),
           ("decoder-only ms", "decoder_ms"),
           ("us/token streamed", "us_per_token_streamed"), ("same text", "same_text")]


def main(argv: Optional[List[str]] = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m mtok.bench detok", description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tokens", default="4096", help="tokens per stream, e.g. 512,4096 (default 4096)")
    parser.add_argument("--streams", default="1,64", help="streams advancing together (default 1,64)")
    parser.add_argument("--backend", default="auto,python" if hf_available() else "python",
                        help="tokenizer backends to measure (default: hf and python where installed)")
    parser.add_argument("--tokenizer-path", help="tokenizer.json or a directory (default: built-in)")
    parser.add_argument("--repeat", type=int, default=3, help="runs; the fastest counts (default 3)")
    parser.add_argument("--logprobs", default="off",
                        help="off, or K: each token with its logprob and K alternatives, texts decoded "
                             "(e.g. off,0,5; default off)")
    parser.add_argument("--json", metavar="OUT")
    args = parser.parse_args(argv)
    tops = [None if x == "off" else int(x) for x in args.logprobs.split(",")]
    rows = [measure(b, args.tokenizer_path, int(n), int(s), max(1, args.repeat), top)
            for b in args.backend.split(",") for s in args.streams.split(",") for n in args.tokens.split(",")
            for top in tops]
    print(table(rows, COLUMNS))
    write_json(args.json, "detok", vars(args), rows)
    return 0 if all(r["same_text"] for r in rows) else 1
