"""The few threads the event loop (:mod:`mtok.api.loop`) runs its blocking
routes on.

Why.  The loop's thread serves every connection of its worker, and writes the
worker's heartbeat (``service_actions``).  A route that renders a chat
template or parses a model's output (marked ``route(offload=...)``,
:mod:`mtok.api.routes`) may compute for seconds: while it ran in that thread
no other request of the worker was answered, and past ``--worker-timeout``
the supervisor killed the worker with every request on it.  So such a route,
and the render of its answer, run here.  The loop keeps the connection
(waiting) meanwhile; what the work returns or raises is handed back through
the loop's wake-up and settled in the loop's thread, so the socket never
changes hands and the loop's state is only ever touched by the loop.

Bounds: :data:`THREADS` threads (the GIL runs one at a time, but a short job
is not held up behind a long one: they take turns); each connection has at
most one job here, so what waits for a thread is bounded by
``--max-connections``; a job still here past ``--request-timeout`` is answered
504 by the loop, and what it returns later is dropped (a request it submitted
is aborted by closing its handle).
"""

from __future__ import annotations

import collections
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Callable, Deque, Iterator, Optional, Tuple

from .routes import EventStream, Pending

THREADS = 4


class Offload:
    """Run jobs on the pool; each one's outcome (what it returned, or the
    exception it raised) waits in :meth:`settled` under the key it was given,
    and ``wake_loop`` (callable from any thread) is called after it is put there."""

    def __init__(self, wake_loop: Callable[[], None], threads: int = THREADS, name: str = "mtok-offload"):
        self._wake_loop, self._threads, self._name = wake_loop, threads, name
        self._pool: Optional[ThreadPoolExecutor] = None  # started on first use
        self.done: Deque[Tuple[Any, Any]] = collections.deque()  # (key, outcome): pool threads put, the loop takes

    def submit(self, key: Any, fn: Callable[..., Any], *args: Any) -> None:
        if self._pool is None:
            self._pool = ThreadPoolExecutor(self._threads, thread_name_prefix=self._name)
        self._pool.submit(self._run, key, fn, args)

    def _run(self, key: Any, fn: Callable[..., Any], args: Tuple[Any, ...]) -> None:
        outcome: Any = RuntimeError("the offloaded work did not return")  # settled, whatever happens
        try:
            outcome = fn(*args)
        except Exception as e:  # noqa: BLE001 (a refusal or a bug: the loop answers it as the route's)
            outcome = e
        finally:
            self.done.append((key, outcome))
            self._wake_loop()

    def settled(self) -> Iterator[Tuple[Any, Any]]:
        """The (key, outcome) of each job done since the last call (the loop's thread)."""
        while self.done:
            yield self.done.popleft()


def drop(outcome: Any) -> None:
    """Close what an outcome nobody will write holds: its request's handle,
    which aborts what has not finished."""
    if isinstance(outcome, EventStream):
        outcome.close()
    elif isinstance(outcome, Pending):
        outcome.handle.close()
