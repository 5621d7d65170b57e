"""Per-request limits and request ids: what one client may ask of the server.

Each limit bounds work that one request could otherwise make every other
request pay for: stop strings are matched on every step of every request
that has them, and a batch is tokenized and de-duplicated on the handler's
thread.  The limits are flags (see :mod:`mtok.wire.args`) and the README's
Operations section lists them.

Request ids: a generated id is ``mtok-`` and 128 random bits, so nobody can
guess the next one to claim it or abort it; a client-supplied ``rid`` may not
begin with that prefix, so it can never collide with a generated one.
"""

from __future__ import annotations

import os
from typing import Any, List, Optional, Sequence

from .validate import bad

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


def check_batch_size(n: int, limit: int, param: str) -> None:
    if n > limit:
        raise bad(f"{n} prompts in one request; at most {limit} are allowed (--max-prompts-per-request)", param)
