"""Per-request limits and request ids: what one client may ask of the server.

Each limit bounds work that one request could otherwise make every other
request pay for: stop strings and regexes are matched on every step of every
request that has them (regexes in linear time, :mod:`mtok.managers.stop_regex`),
a batch is tokenized and de-duplicated on the handler's thread, and every
logprob value is computed in the scheduler's one thread, carried through the
detokenizer and rendered as JSON by the worker (about 7 us each at N = 1 on
two cores: a million take 7 s and 35 MB, and every other request waits ~6 s
behind them, since a prompt's are computed in one scheduler step).
So logprobs have two bounds: per token (``--max-logprobs``, vLLM's flag and
default, OpenAI's cap), and per request (``--max-logprob-entries``: prompts
x ``n`` x (scored prompt tokens + max new tokens) x (1 + top-k + ids asked
by id), what it asks for, not what it happens to generate; a chat request
without ``max_tokens``, whose budget is the rest of the context, gets the
new tokens that fit instead, :func:`mtok.managers.prepare.fit_budget_to_logprobs`,
so no request a peer serves with its defaults is refused for it).  Plain
generation needs no such bound: each sample is a request of its own, held
to the context length and counted against the queue limits.  The limits are
flags (see :mod:`mtok.wire.args`) and docs/operations.md lists them.

Request ids: a generated id is ``mtok-`` and 128 random bits, so nobody can
guess the next one to claim it or abort it; a client-supplied ``rid`` may not
begin with that prefix, so it can never collide with a generated one.
"""

from __future__ import annotations

import os
from typing import Any, List, Optional, Sequence

from .stop_regex import PatternError, compile_patterns
from ..validate import bad

RID_PREFIX = "mtok-"
_RID_BATCH = 256
_rids: List[str] = []  # ids drawn ahead; list.pop and list.extend are atomic, so threads share it safely


def new_rid() -> str:
    """``mtok-`` and 128 bits of ``os.urandom``.  The bits are drawn 256 ids at a
    time: ``os.urandom`` lets go of the GIL, and under load each let-go is a
    context switch to another handler thread; once per 256 requests, not once
    per request."""
    try:
        return _rids.pop()
    except IndexError:
        raw = os.urandom(16 * _RID_BATCH).hex()
        _rids.extend(RID_PREFIX + raw[i : i + 32] for i in range(0, len(raw), 32))
        return _rids.pop()


os.register_at_fork(after_in_child=_rids.clear)  # a forked child must not hand out its parent's ids


def check_client_rids(rids: Optional[Sequence[Any]]) -> None:
    for rid in rids or ():
        if isinstance(rid, str) and rid.startswith(RID_PREFIX):
            raise bad(f"request ids beginning with {RID_PREFIX!r} are reserved for the server's own", "rid")


def check_stops(stops: Optional[List[str]], max_count: int, max_chars: int) -> None:
    if not stops:
        return
    if len(stops) > max_count:
        raise bad(f"{len(stops)} stop strings; at most {max_count} are allowed (--max-stop-strings)", "stop")
    total = sum(map(len, stops))
    if total > max_chars:
        raise bad(f"the stop strings hold {total} characters; at most {max_chars} are allowed "
                  "(--max-stop-chars)", "stop")


def check_stop_regexes(patterns: Optional[List[str]], max_count: int, max_len: int) -> None:
    """Few and short enough (``--max-stop-regexes``, ``--max-stop-regex-length``), then
    compiled: what :mod:`mtok.managers.stop_regex` cannot run is a 400 here, not in the scheduler."""
    if not patterns:
        return
    if len(patterns) > max_count:
        raise bad(f"{len(patterns)} stop_regex patterns; at most {max_count} are allowed (--max-stop-regexes)",
                  "stop_regex")
    longest = max(map(len, patterns))
    if longest > max_len:
        raise bad(f"a stop_regex pattern of {longest} characters; at most {max_len} are allowed "
                  "(--max-stop-regex-length)", "stop_regex")
    try:
        compile_patterns(patterns)
    except PatternError as e:
        raise bad(f"'stop_regex': {e}", "stop_regex") from None


def check_batch_size(n: int, limit: int, param: str) -> None:
    if n > limit:
        raise bad(f"{n} prompts in one request; at most {limit} are allowed (--max-prompts-per-request)", param)


def check_top_logprobs(top_n: int, limit: int, param: str) -> None:
    if top_n > limit:
        raise bad(f"'{param}' asks for {top_n} top logprobs per token; at most {limit} are allowed "
                  "(--max-logprobs)", param)


DEFAULT_LOGPROB_ENTRIES = 1_000_000  # ~7 s and ~35 MB of one request's logprobs at N = 1 (docs/benchmarks.md)
LOGPROB_TOKENS_AT_MAX = 64  # tokens at --max-logprobs that the derived default always admits


def logprob_entry_limit(max_entries: Optional[int], max_logprobs: int) -> int:
    """``--max-logprob-entries``, or when not given: a million, or 64 tokens at
    ``--max-logprobs`` if that is more (so a server started with the whole
    vocabulary as its top-k can be asked for it)."""
    if max_entries is not None:
        return max_entries
    return max(DEFAULT_LOGPROB_ENTRIES, LOGPROB_TOKENS_AT_MAX * (1 + max_logprobs))


def check_logprob_entries(entries: int, limit: int, param: str) -> None:
    """``entries``: what :func:`mtok.managers.prepare.logprob_entries` counts."""
    if entries > limit:
        raise bad(f"this request asks for {entries} logprob values (prompts x n x (scored prompt tokens + max new "
                  f"tokens, unless only the prompt's are asked) x (1 + top logprobs + token ids asked)); at most "
                  f"{limit} are allowed "
                  "(--max-logprob-entries): ask for fewer tokens (max_tokens), prompt tokens scored, samples (n) or top "
                  "logprobs", param)
