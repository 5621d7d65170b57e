"""Why a request finished: one type per reason, with the conversions each surface needs.

The Scheduler (or an engine, or the TokenizerManager's deadline) decides that a
request is done; the reason travels with the last piece of output to the
worker that owns the request, where each surface turns it into its own shape:

===================  ==========================  =============================  ===================
reason               SGLang ``meta_info``        OpenAI ``finish_reason``,      HTTP error
                     ``finish_reason``           ``stop_reason``/``matched``
===================  ==========================  =============================  ===================
:class:`FinishStop`  ``{"type": "stop",          ``"stop"``, the matched token  --
                     "matched": id or str}``     id or string (None: eos)
:class:`FinishLength` ``{"type": "length",       ``"length"``, None             --
                     "length": n}``
:class:`FinishAbort` ``{"type": "abort",         ``"abort"``, None              ``status_code``
                     "message": ...}``                                          unless 499
===================  ==========================  =============================  ===================

The pattern is SGLang's ``BaseFinishReason`` subclasses with ``to_json``.  The
objects are what crosses process boundaries (``mtok.wire.ipc`` allows them through
its unpickler); engines written against the older dict form may still return
dicts, and :func:`as_finish` turns either into one of these.
"""

from __future__ import annotations

from typing import Any, Dict, Optional, Tuple, Union

CLIENT_CLOSED = 499  # nginx's code for a client that hung up: an abort nobody is told about


class FinishReason:
    """The base: ``kind`` names the reason as SGLang and OpenAI spell it."""

    kind = ""
    __slots__ = ()

    def to_json(self) -> Dict[str, Any]:
        """SGLang's ``meta_info["finish_reason"]``."""
        return {"type": self.kind}

    def openai(self) -> Tuple[str, Any]:
        """OpenAI's ``finish_reason`` and the ``stop_reason`` (vLLM) / ``matched_stop`` (SGLang) beside it."""
        return self.kind, None

    def http_status(self) -> Optional[int]:
        """The HTTP status this finish stands for when it is a failure, else None."""
        return None

    def __eq__(self, other: object) -> bool:
        return type(other) is type(self) and self._fields() == other._fields()  # type: ignore[attr-defined]

    def __hash__(self) -> int:
        return hash((type(self), self._fields()))

    def __repr__(self) -> str:
        return f"{type(self).__name__}{self._fields()!r}"

    def _fields(self) -> tuple:
        return tuple(getattr(self, name) for name in self.__slots__)

    def __reduce__(self) -> tuple:
        """Pickled as the class and its fields, which its ``__init__`` takes in
        that order: no slot name crosses the wire (see ``io_struct``'s messages)."""
        return type(self), self._fields()


class FinishStop(FinishReason):
    """A stop token (or eos) or a stop string matched; ``matched`` is None for a
    finish that matched nothing in particular (an embedding, a prefill-only request)."""

    kind = "stop"
    __slots__ = ("matched",)

    def __init__(self, matched: Union[int, str, None] = None):
        self.matched = matched

    def to_json(self) -> Dict[str, Any]:
        return {"type": "stop", "matched": self.matched}

    def openai(self) -> Tuple[str, Any]:
        return "stop", self.matched

    def trims_token(self, last_id: int) -> bool:
        """Whether the matched stop token is the request's last id (and so not part of its text)."""
        return isinstance(self.matched, int) and self.matched == last_id


class FinishLength(FinishReason):
    """``max_new_tokens`` (or the context) ran out after ``length`` tokens."""

    kind = "length"
    __slots__ = ("length",)

    def __init__(self, length: int):
        self.length = length

    def to_json(self) -> Dict[str, Any]:
        return {"type": "length", "length": self.length}


class FinishAbort(FinishReason):
    """The request was cut short: refused, failed, timed out or cancelled.

    ``status_code`` is the HTTP status the client gets (an abort the client
    asked for, or caused by hanging up, is 499 and raises nothing); ``param``
    names the offending request field, if one did.
    """

    kind = "abort"
    __slots__ = ("message", "status_code", "param")

    def __init__(self, message: str = "request failed", status_code: Optional[int] = None, param: Optional[str] = None):
        self.message = message
        self.status_code = status_code
        self.param = param

    def to_json(self) -> Dict[str, Any]:
        return {"type": "abort", "message": self.message}

    def http_status(self) -> Optional[int]:
        return self.status_code if self.status_code and self.status_code != CLIENT_CLOSED else None


FINISH_TYPES = (FinishStop, FinishLength, FinishAbort)


def as_finish(reason: Any) -> Optional[FinishReason]:
    """A :class:`FinishReason` from one, from the dict form (SGLang's ``to_json``
    shape, with ``status_code`` and ``param`` for aborts), or None from None."""
    if reason is None or isinstance(reason, FinishReason):
        return reason
    if not isinstance(reason, dict):
        raise ValueError(f"a finish reason is a FinishReason or a dict, not {reason!r}")
    kind = reason.get("type")
    if kind == "stop":
        return FinishStop(reason.get("matched"))
    if kind == "length":
        return FinishLength(reason.get("length", 0))
    if kind == "abort":
        return FinishAbort(reason.get("message", "request failed"), reason.get("status_code"), reason.get("param"))
    raise ValueError(f"unknown finish reason {reason!r}")
