"""What an upstream engine may send, and the reading that holds it to that.

An upstream's reply is untrusted input: a bug, a proxy in between or a hostile
server can send anything.  One endless SSE line once grew mtok's scheduler to
20 GB until the kernel killed it and the server with it (issue 23, finding 3).
So every read from an upstream is bounded, and each bound, once crossed, fails
only the one request with a 502 (a 504 for silence):

- one line -- an SSE line, an error body, a ``/health`` answer --
  ``max_line_bytes``;
- one request's stream: at most ``max_new_tokens + event_margin`` events
  (every line but the blank one that ends an event: comments, ``data:``
  lines, stray blank lines), and ``bytes_per_token`` bytes per event allowed
  (generous, because SGLang's streams are cumulative by default: each event
  repeats every id and logprob row so far);
- time: ``timeout`` to the first event (a long prompt's prefill is slow), then
  ``idle_timeout`` between two events; a stream that sends bytes but no whole
  event within it is a drip, a 502.  The whole request is also bounded by
  mtok's ``--request-timeout``.  Sooner, while the upstream's ``/health``
  fails: a stream silent for ``health_grace`` then is failed with a 503 (a
  vLLM stopped with SIGTERM closes its port at once but may hold its streams
  open and silent while it shuts down; nobody should wait ``idle_timeout`` for it).

What the events say is checked too: an event that is not a JSON object of
the shape expected, token ids that are not ints of the vocabulary, logprob
rows that are not numbers, or ids after the finish reason are a malformed
stream (:class:`Malformed`), a 502.  Nothing of that may reach the scheduler,
where one bad id would fail the whole batch and a bad row the process.

The options ride on the engine URL's query, e.g.
``sglang:http://host:30000?idle_timeout=30&max_line_bytes=1048576``; an
unknown one is refused at start, so a misspelt option never leaves a default
silently in place.
"""

from __future__ import annotations

import dataclasses
import json
import socket
import time
import urllib.parse
from dataclasses import dataclass
from typing import Any, Iterator, List, Optional

MIB = 1 << 20
READ_BYTES = 64 * 1024  # the most one read of a stream asks for


SHAPE_ERRORS = (TypeError, ValueError, KeyError, AttributeError, IndexError)  # reading an event of another shape


class Malformed(Exception):
    """The upstream sent something no correct upstream sends: the request fails with a 502."""


@dataclass(frozen=True)
class Limits:
    """An upstream engine's options (the URL's query), with their defaults."""

    max_connections: int = 64  # streams open at once (the pool)
    timeout: float = 300.0  # s to connect and to the first event (prefill)
    idle_timeout: float = 60.0  # s between two events once the stream has begun
    health_grace: float = 2.0  # s a stream may be silent while the upstream's /health fails
    max_line_bytes: int = 16 * MIB  # one SSE line, error body or /health answer
    bytes_per_token: int = MIB  # a stream's bytes per event allowed
    event_margin: int = 64  # events a stream may carry beyond max_new_tokens

    @classmethod
    def from_query(cls, query: str) -> "Limits":
        known = {f.name: f.type for f in dataclasses.fields(cls)}
        given = {k: v[-1] for k, v in urllib.parse.parse_qs(query, keep_blank_values=True).items()}
        unknown = sorted(set(given) - set(known))
        if unknown:
            raise ValueError(f"unknown upstream option(s) {', '.join(unknown)} (known: {', '.join(known)})")
        values = {}
        for name, raw in given.items():
            kind = float if known[name] in (float, "float") else int
            try:
                values[name] = kind(raw)
            except ValueError:
                raise ValueError(f"upstream option {name}={raw!r} is not a number") from None
            if values[name] <= 0:
                raise ValueError(f"upstream option {name} must be positive, not {raw}")
        return cls(**values)


class Budget:
    """One request's allowance from its upstream: events, bytes, and when the next event is due.

    The sender thread spends it as lines arrive; the scheduler's step reads
    ``due`` and ``dripped`` to cut a stream that stalls (:meth:`overdue`)."""

    __slots__ = ("limits", "events", "bytes", "due", "heard", "dripped", "begun")

    def __init__(self, limits: Limits, max_new_tokens: int):
        self.limits = limits
        self.events = max_new_tokens + limits.event_margin
        self.bytes = self.events * limits.bytes_per_token
        self.heard = time.monotonic()  # the start, then the last whole event
        self.due = self.heard + limits.timeout
        self.dripped = False  # bytes came since the last event, but no whole event yet
        self.begun = False

    def line_cap(self) -> int:
        return min(self.limits.max_line_bytes, self.bytes)

    def spend(self, line: bytes, ends_event: bool) -> None:
        """Account for one line read (``ends_event``: the blank line closing an event)."""
        if len(line) > self.line_cap():
            raise Malformed(f"a line over {self.line_cap()} bytes")
        self.bytes -= len(line)
        if not ends_event:
            self.events -= 1
        else:
            self.dripped = False
        if self.bytes < 0 or self.events < 0:
            what = "bytes" if self.bytes < 0 else "events"
            raise Malformed(f"more {what} than a request of max_new_tokens tokens can need "
                            f"(event_margin={self.limits.event_margin}, bytes_per_token={self.limits.bytes_per_token})")

    def event(self) -> None:
        """A whole event arrived: the next is due within ``idle_timeout``."""
        self.begun, self.dripped = True, False
        self.heard = time.monotonic()
        self.due = self.heard + self.limits.idle_timeout

    def overdue(self, now: float, url: str, unhealthy: Optional[str] = None) -> Optional[tuple]:
        """(status, message) once the next event is late, or the stream has been
        silent for ``health_grace`` while the upstream is ``unhealthy`` (why, as
        the health probe says); None while neither."""
        if unhealthy is not None and now - self.heard >= self.limits.health_grace:
            return 503, (f"the stream from {url} has been silent for {now - self.heard:.0f} s and the upstream "
                         f"fails its health check ({unhealthy}): it is going away or gone")
        if now < self.due:
            return None
        if self.dripped:
            return 502, f"{url} sent bytes but no whole event for {self._wait():g} s"
        if not self.begun:
            return 504, f"no answer from {url} within {self.limits.timeout:g} s"
        return 504, f"no event for {self.limits.idle_timeout:g} s from {url}"

    def _wait(self) -> float:
        return self.limits.idle_timeout if self.begun else self.limits.timeout


def sse_events(resp: Any, budget: Budget) -> Iterator[Optional[Any]]:
    """Each ``data:`` line's JSON, within ``budget``; None for ``[DONE]``."""
    after_line = False
    for line in lines(resp, budget):
        blank = len(line) <= 2 and not line.strip()
        budget.spend(line, blank and after_line)
        after_line = not blank
        line = line.strip()
        if not line.startswith(b"data:"):
            continue
        budget.event()
        data = line[5:].strip()
        if data == b"[DONE]":
            yield None
            return
        try:
            yield json.loads(data)
        except (ValueError, RecursionError):  # RecursionError: nested too deep
            raise Malformed(f"a malformed event: {data[:80]!r}") from None


def lines(resp: Any, budget: Budget) -> Iterator[bytes]:
    """The body's lines, each at most ``budget.line_cap()`` bytes, read as the
    bytes come (``read1``), so that bytes without a whole line count as a drip."""
    parts: List[bytes] = []  # the line so far, when it spans reads
    size = 0
    while True:
        budget.dripped = budget.dripped or size > 0
        piece = resp.read1(READ_BYTES)
        if not piece:
            if parts:
                yield b"".join(parts)
            return
        budget.dripped = True
        start, end = 0, piece.find(b"\n")
        while end >= 0:
            if parts:
                parts.append(piece[start:end + 1])
                yield b"".join(parts)
                parts, size = [], 0
            else:
                yield piece[start:end + 1]
            start, end = end + 1, piece.find(b"\n", end + 1)
        if start < len(piece):
            parts.append(piece[start:])
            size += len(piece) - start
            if size > budget.line_cap():
                raise Malformed(f"a line over {budget.line_cap()} bytes")


def read_capped(resp: Any, cap: int, deadline: float, sock: Any) -> bytes:
    """A whole body of at most ``cap`` bytes, by ``deadline`` (time.monotonic());
    Malformed when it is longer, socket.timeout when it is late.  ``sock``
    (a connection used once) gets its timeout cut to what is left."""
    out = bytearray()
    while len(out) <= cap:
        left = deadline - time.monotonic()
        if left <= 0:
            raise socket.timeout("the body did not arrive in time")
        if sock is not None:
            sock.settimeout(left)
        piece = resp.read1(cap + 1 - len(out))
        if not piece:
            resp.read()  # nothing is left: this marks the response done, so the connection can be reused
            return bytes(out)
        out += piece
    raise Malformed(f"a body over {cap} bytes")


def error_message(raw: bytes) -> str:
    """The upstream's own words from an error body (SGLang/OpenAI/FastAPI shapes), cut to 500 characters."""
    try:
        body = json.loads(raw)
    except (ValueError, RecursionError):
        return raw.decode("utf-8", "replace").strip()[:500] or "(empty body)"
    if isinstance(body, dict):
        err = body.get("error", body)
        if isinstance(err, dict):
            return str(err.get("message") or err.get("detail") or body.get("detail") or body)[:500]
        return str(err)[:500]
    return str(body)[:500]


def checked(parsed: tuple, room: int, vocab_size: Optional[int]) -> tuple:
    """An adapter's ``(ids, rows, prompt rows, finish)`` for one event, with ids
    of the vocabulary, logprob rows of numbers and at most ``room`` prompt rows;
    Malformed otherwise."""
    ids, rows, input_rows, finish = parsed
    ids, rows = check_ids(ids, vocab_size), check_rows(rows, vocab_size)
    if input_rows is not None:
        input_rows = check_rows(input_rows, vocab_size)
        if len(input_rows) > room:
            raise Malformed(f"a malformed event: {len(input_rows)} prompt logprob rows for {room} positions")
    return ids, rows, input_rows, finish


def check_ids(ids: Any, vocab_size: Optional[int]) -> List[int]:
    """``ids`` as a list of token ids of the vocabulary, or Malformed."""
    if not isinstance(ids, list) or not all(type(t) is int for t in ids):
        raise Malformed(f"a malformed event: token ids {str(ids)[:80]}")
    bad = [t for t in ids if t < 0 or (vocab_size is not None and t >= vocab_size)]
    if bad:
        raise Malformed(f"token ids outside the vocabulary ({vocab_size}): {bad[:5]}")
    return ids


def check_rows(rows: Any, vocab_size: Optional[int]) -> List[Any]:
    """Logprob rows ``(own, top pairs or None, chosen pairs or None)`` whose numbers are numbers."""
    out = []
    for row in rows:
        if row is None:
            out.append(None)
            continue
        own, top, chosen = row
        out.append((_logprob(own, none_ok=True), _pairs(top, vocab_size), _pairs(chosen, vocab_size)))
    return out


def _logprob(x: Any, none_ok: bool = False) -> Optional[float]:
    if x is None and none_ok:
        return None
    if type(x) not in (int, float):
        raise Malformed(f"a malformed event: a logprob {str(x)[:40]}")
    return float(x)


def _pairs(pairs: Any, vocab_size: Optional[int]) -> Optional[list]:
    if pairs is None:
        return None
    ids = check_ids([t for _, t in pairs], vocab_size)
    return [(_logprob(lp), t) for (lp, _), t in zip(pairs, ids)]

