"""What a route is: the marks on an app's methods, the request they are given,
and the shapes they may return.

Kept apart from :mod:`mtok.api.server` (which re-exports these names) so
that the transport holds only the transport.

The marks are how a route tells the transports what it may do to them
(:func:`route`): ``inline`` routes never wait, so the event loop may run them
in its own thread; ``offload`` ones never wait either but may compute long
(render a chat template, parse a model's output), so the loop runs them, and
the render of their answer, on its pool (:mod:`mtok.api.offload`); a new
route that does such work marks itself so, and the loop keeps it off the
thread every other request and the worker's heartbeat depend on.

A route that generates works in two phases: it reads and checks its request
and returns a :class:`Job`; the transport submits the jobs of a turn together
and gives each its outcome, from which the route makes its answer.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Dict, Iterator, List, Optional, Union

from .connections import ConnectionWatch
from ..validate import APIError, parse_json


@dataclass
class Response:
    body: Any
    status: int = 200
    headers: Dict[str, str] = field(default_factory=dict)


class _NotYet:
    """The type of :data:`NOT_YET`."""

    __slots__ = ()

    def __repr__(self) -> str:
        return "NOT_YET"


NOT_YET = _NotYet()  # an event stream's "nothing more until the handle's mailbox fills"


@dataclass
class EventStream:
    """Server-sent events: each item is a JSON value or a raw string such as '[DONE]'.

    ``handle`` is the request handle the events come from (see
    :mod:`mtok.managers.request_handle`).  The writer waits for its first update
    before it writes the head (``handle.wait_first()`` in a handler thread,
    ``handle.poll_first()`` in the event loop), so that a refusal (503 at
    capacity, say) is still an HTTP status.  Whoever writes the stream must call
    :meth:`close` when it ends, however it ends: that aborts what has not
    finished when the client left.

    A handle whose watch does not block (the event loop's) hands out
    :data:`NOT_YET` when its mailbox is empty; the events pass it on, as an
    item of their own, and the loop resumes them when the mailbox fills.  So
    the loop's thread never waits inside a stream.
    """

    events: Iterator[Any]
    headers: Dict[str, str] = field(default_factory=dict)
    handle: Any = None

    def close(self) -> None:
        if self.handle is not None:
            self.handle.close()
        close = getattr(self.events, "close", None)
        if close is not None:
            close()


@dataclass
class Pending:
    """A route's answer still in flight: ``render`` makes the body from the final
    states of ``handle``'s requests (``handle.results()``).

    A route that returns one does not wait; the transport waits in its own way.
    A handler thread blocks in :meth:`wait`; the event loop
    (:mod:`mtok.api.loop`) is woken when the handle's mailbox fills.  Either way
    the transport owns the handle from here on and closes it.
    """

    handle: Any
    render: Callable[[List[Any]], Any]

    def wait(self) -> Any:
        with self.handle:
            return self.render(self.handle.results())

    def finish(self) -> Any:
        """The body, once the handle has all its states (the loop drained it); the handle is closed."""
        try:
            return self.render(self.handle.states)
        finally:
            self.handle.close()


@dataclass
class Job:
    """A route's request made ready (read, validated, its template rendered) but
    not yet submitted: phase one of a route.  The transport submits the jobs of
    a turn together, through its app's ``submit_all`` (each job's ``request``,
    opaque to the transport, in; an outcome each out: a handle, or the exception
    that refused it); then :meth:`answer` gives what the route answers, phase
    two: a :class:`Pending`, an :class:`EventStream` or a value.  So the prompts
    of a turn are tokenized together and sent in one write."""

    request: Any
    then: Callable[[Any], Any]

    def answer(self, outcome: Any) -> Any:
        """``then(outcome)``; a refusal is raised; a handle ``then`` failed on is closed."""
        if isinstance(outcome, BaseException):
            raise outcome
        try:
            return self.then(outcome)
        except BaseException:
            outcome.close()
            raise


def settle_blocking(result: Any, submit_all: Callable[[List[Any]], List[Any]]) -> Any:
    """What a caller that may wait (a handler thread, ``mtok.Engine``) makes of a
    route's result: a :class:`Job` submitted alone and answered, a
    :class:`Pending` waited for, an :class:`EventStream` whose first update is in
    (its refusal raised, the stream closed); anything else as it is."""
    if isinstance(result, Job):
        result = result.answer(submit_all([result.request])[0])
    if isinstance(result, Pending):
        return result.wait()
    if isinstance(result, EventStream) and result.handle is not None:
        try:
            result.handle.wait_first()
        except BaseException:
            result.close()
            raise
    return result


def route(method: str, *paths: str, inline: bool = False,
          offload: Union[bool, Callable[[Dict[str, Any]], bool]] = False) -> Callable:
    """Mark an app method as the handler of ``method`` on ``paths``.

    ``inline=True`` promises that the handler never blocks: it answers at once
    or returns a :class:`Pending`, unless the request asks for a stream (its
    JSON body has a true ``"stream"``).  Such handlers may run in the event
    loop's thread; the others always run in a thread of their own.

    An inline handler may return a :class:`Job` (phase one), which the
    transport submits with the turn's others.

    ``offload``, for an inline handler that may compute long (True, or a test of
    the request's JSON object: ``/tokenize`` renders only with ``messages``),
    makes the loop run it, and its :class:`Pending`'s render, on its pool."""
    def mark(fn: Callable) -> Callable:
        fn.__dict__.setdefault("routes", []).extend((method, p) for p in paths)
        if inline:
            fn.inline = True
        if offload:
            fn.offload = offload
        return fn

    return mark


def offloads(handler: Callable, body: Any) -> bool:
    """Whether ``handler``, given this JSON body, is to run off the loop's thread (its ``offload`` mark)."""
    mark = getattr(handler, "offload", False)
    return bool(mark(body) if isinstance(body, dict) else False) if callable(mark) else bool(mark)


def collect_routes(app: Any) -> Dict[str, Dict[str, Callable]]:
    """path -> method -> bound handler, from the @route marks on the app's methods.
    A path ending in ``{name}`` matches any last segment, one ending in
    ``{name:path}`` any rest of the path, slashes and all (see :func:`find_route`)."""
    table: Dict[str, Dict[str, Callable]] = {}
    for name in dir(type(app)):
        for method, path in getattr(getattr(type(app), name), "routes", ()):
            table.setdefault(path, {})[method] = getattr(app, name)
    return table


def find_route(routes: Dict[str, Dict[str, Callable]], path: str) -> Optional[Dict[str, Callable]]:
    methods = routes.get(path)
    if methods is None and path.count("/") > 1:
        head, _, last = path.rpartition("/")
        if last:
            methods = next((m for p, m in routes.items() if p.startswith(head + "/{") and p.endswith("}")), None)
    if methods is None:
        methods = next((m for p, m in routes.items() if p.endswith(":path}")
                        and path.startswith(p[:p.index("{")]) and len(path) > p.index("{")), None)
    return methods


# What needs no API key, as in SGLang: probes and scrapes.
OPEN_PATHS = frozenset(("/health", "/health_generate", "/ready", "/ping", "/metrics"))


@dataclass
class Request:
    method: str
    path: str
    query: str
    headers: Any
    raw: bytes
    watch: "ConnectionWatch"
    _json: Any = None

    def json(self) -> Any:
        if self._json is None:
            if not self.raw.strip():
                raise APIError("request body is empty; a JSON object is expected")
            self._json = parse_json(self.raw)
        return self._json
