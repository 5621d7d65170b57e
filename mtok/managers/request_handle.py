"""One call's requests in flight, from the send to the last piece of text.

:meth:`TokenizerManager.submit <mtok.managers.tokenizer_manager.TokenizerManager.submit>`
sends a call's requests to the scheduler and returns a :class:`RequestHandle`
over them, which the caller must close; the way to hold one is::

    with tm.submit(obj, req.watch) as handle:
        results = handle.results()

Closing aborts whatever has not finished, so a client that hangs up, a route
that raises, and a stream whose writer stops early all end the same way: by
leaving a ``with`` or by the ``finally`` of whoever holds the handle.  A stream
hands its handle to the SSE writer inside the ``EventStream``; the writer
closes it when the stream ends, however it ends.  (``http.server``'s
``send_head`` works the same way: it returns a file that the caller must close.)

:class:`ReqState` is what the HTTP side knows of one request; the receiver
thread writes it and puts it in the call's mailbox.
"""

from __future__ import annotations

import queue
import time
from typing import Any, Dict, List, Optional, Set

from ..api.connections import WATCH_AFTER, ClientDisconnected
from ..api.routes import NOT_YET
from ..validate import APIError
from ..wire.finish import FinishAbort, FinishReason


_DISCONNECTED = object()  # put in a mailbox by the connection watcher


class ReqState:
    """What the HTTP side knows of one request; written by the receiver thread."""

    __slots__ = (
        "rid", "index", "mailbox", "stream", "text", "prompt_ids", "output_ids", "finished_reason",
        "prompt_tokens", "completion_tokens", "created", "first_token_at", "embedding", "queued", "logprobs",
    )

    def __init__(self, rid: str, index: int, mailbox: "queue.SimpleQueue[Any]", stream: bool, prompt_tokens: int,
                 created: Optional[float] = None):
        self.rid = rid
        self.index = index
        self.mailbox = mailbox
        self.stream = stream
        self.text = ""
        self.prompt_ids: List[int] = []  # the prompt's token ids (the request's own list), for return_token_ids
        self.output_ids: List[int] = []
        self.finished_reason: Optional[FinishReason] = None
        self.prompt_tokens = prompt_tokens
        self.completion_tokens = 0
        self.created = time.monotonic() if created is None else created
        self.first_token_at: Optional[float] = None
        self.embedding: Optional[List[float]] = None
        self.queued = False  # in its mailbox already: a reader that lags sees only the latest state
        self.logprobs: Optional[Dict[str, list]] = None  # SGLang's meta_info keys, when asked for

    def notify(self) -> None:
        if not self.queued:
            self.queued = True
            self.mailbox.put(self)

    @property
    def finished(self) -> bool:
        return self.finished_reason is not None

    def error(self) -> Optional[APIError]:
        """The HTTP error a finish stands for (refused, failed), if any."""
        reason = self.finished_reason
        status = reason.http_status() if reason is not None else None
        if status is None:
            return None
        assert isinstance(reason, FinishAbort)
        headers = {"Retry-After": "1"} if status == 503 else None
        return APIError(reason.message, status, reason.param, headers)


class RequestHandle:
    """The requests of one call, sent; iterate it for their states as they
    change (every step when streaming, else once at the end) until all have
    finished.  The caller must close it (``with`` does): closing aborts what
    has not finished; closing twice does nothing.

    ``owner`` is the TokenizerManager: its ``rid_to_state`` holds the states
    still waiting for pieces, its ``abort_request`` tells the scheduler.
    """

    def __init__(self, owner: Any, states: List[ReqState], watch: Optional[Any], timeout: float):
        self.owner = owner
        self.blocking = getattr(watch, "blocking", True)  # False: the event loop's; iteration hands out NOT_YET
        self.states = states
        self.mailbox = states[0].mailbox if states else queue.SimpleQueue()
        self.watch = watch
        self.watching = False
        self.deadline = time.monotonic() + timeout
        self.timeout = timeout
        self.done: Set[str] = set()
        self.seen: Dict[str, tuple] = {}
        self.first: Optional[ReqState] = None  # taken by wait_first, handed out first by __next__
        self.closed = False

    def __enter__(self) -> "RequestHandle":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __iter__(self) -> "RequestHandle":
        return self

    def __next__(self) -> Any:
        if self.first is not None:
            st, self.first = self.first, None
            return st
        done, total = self.done, len(self.states)
        while len(done) < total and not self.closed:
            if not self.blocking:
                if self.mailbox.empty():
                    return NOT_YET  # the loop resumes the reader when the mailbox fills
                st = self.mailbox.get_nowait()
            else:
                st = self._wait()
            if st is None:  # the wait ended empty: the deadline, or time to watch the connection
                self.check_deadline()
                continue
            st = self._take(st)
            if st is not None:
                return st
        raise StopIteration

    def _take(self, st: Any) -> Optional[ReqState]:
        """One item from the mailbox: the state if it is news, else None."""
        if st is _DISCONNECTED:
            raise ClientDisconnected()
        st.queued = False
        rid = st.rid
        if rid in self.done:
            return None
        if st.finished_reason is not None:
            self.done.add(rid)
            return st
        mark = (len(st.text), len(st.output_ids))
        if self.seen.get(rid) != mark:  # else notified again before it changed (a benign race)
            self.seen[rid] = mark
            return st
        return None

    def drain(self) -> bool:
        """Take in, without waiting, whatever the mailbox holds; True once every
        request has finished.  A refused or failed request raises its APIError, as
        :meth:`results` does.  For a caller told when the mailbox fills (the event
        loop, whose watch makes the mailbox) rather than one that waits on it;
        after True, ``states`` are the results, in request order."""
        mailbox = self.mailbox
        while not mailbox.empty():
            st = self._take(mailbox.get_nowait())
            if st is not None:
                _raise_failure(st)
        return self.finished

    def check_deadline(self) -> None:
        """Past the server-side deadline, fail what is unfinished (504)."""
        if time.monotonic() >= self.deadline:
            self._expire()

    @property
    def finished(self) -> bool:
        return len(self.done) == len(self.states)

    def _wait(self) -> Any:
        """Most requests are answered within milliseconds; only those still
        waiting after WATCH_AFTER are worth watching for a client hang-up."""
        wait = self.deadline - time.monotonic()
        watch = self.watch
        if watch is not None and not self.watching:
            wait = min(wait, WATCH_AFTER)
        try:
            return self.mailbox.get(timeout=None if wait == float("inf") else max(0.0, wait))
        except queue.Empty:
            if watch is not None and not self.watching and time.monotonic() < self.deadline:
                mailbox = self.mailbox
                watch.start(lambda: mailbox.put(_DISCONNECTED))
                self.watching = True
            return None

    def _expire(self) -> None:
        """The server-side deadline passed: what is unfinished fails with 504."""
        reason = FinishAbort(f"the request did not finish within {self.timeout:g} s (--request-timeout)", 504)
        for st in self.states:
            if st.rid not in self.done and self.owner.rid_to_state.pop(st.rid, None) is not None:
                self.owner.abort_request(st.rid)
                st.finished_reason = reason
                st.notify()
        self.deadline = float("inf")

    def wait_first(self) -> None:
        """Wait for the first update and raise the error it carries, if any, so
        that a refusal (503 at capacity, say) is still an HTTP status rather
        than an event of a stream.  Iteration hands that update out first."""
        st = next(self, None)
        if st is not None:
            _raise_failure(st)
        self.first = st

    def poll_first(self) -> bool:
        """:meth:`wait_first` without waiting, for the event loop: True once the
        first update is in (iteration hands it out first), False while the mailbox
        is empty; the error it carries is raised."""
        if self.first is not None:
            return True
        st = next(self, None)
        if st is NOT_YET:
            return False
        if st is not None:
            _raise_failure(st)
        self.first = st
        return True

    def results(self) -> List[ReqState]:
        """Every request's final state, in request order; a refused or failed
        one fails the call (its APIError is raised)."""
        out: List[Optional[ReqState]] = [None] * len(self.states)
        for st in self:
            _raise_failure(st)
            out[st.index] = st
        return out  # type: ignore[return-value]

    def close(self) -> None:
        """Stop watching the connection and abort whatever has not finished."""
        if self.closed:
            return
        self.closed = True
        if self.watching:
            self.watch.stop()
        for st in self.states:
            if self.owner.rid_to_state.pop(st.rid, None) is not None and st.rid not in self.done:
                self.owner.abort_request(st.rid)


def _raise_failure(st: ReqState) -> None:
    """Raise the APIError a refused or failed request stands for (none while it runs)."""
    err = st.error()
    if err is not None:
        raise err
