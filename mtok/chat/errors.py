"""The one error type of :mod:`mtok.chat`.

Every failure of a chat template -- a syntax error, ``raise_exception(...)`` in the
template, misuse of an undefined value, a sandbox violation, a limit exceeded -- is a
:class:`TemplateError`, whichever backend rendered it, so that a caller (the chat
endpoint) maps all of them to one 400 response.
"""

from __future__ import annotations

from typing import Optional


class TemplateError(Exception):
    """A chat template failed to parse or to render.

    ``kind`` says which failure: ``"syntax"``, ``"raised"`` (the template called
    ``raise_exception``), ``"undefined"``, ``"security"``, ``"limit"`` or ``"type"``
    (any other runtime error).  ``lineno``/``colno`` locate it in the template source
    where known (1-based), else ``None``.  ``message`` is the bare message; ``str()``
    adds the location.
    """

    def __init__(self, message: str, kind: str = "type", lineno: Optional[int] = None,
                 colno: Optional[int] = None):
        self.message = message
        self.kind = kind
        self.lineno = lineno
        self.colno = colno
        super().__init__(self._describe())

    def _describe(self) -> str:
        if self.lineno is None:
            return self.message
        where = f"line {self.lineno}" + (f", column {self.colno}" if self.colno is not None else "")
        return f"{self.message} ({where})"
