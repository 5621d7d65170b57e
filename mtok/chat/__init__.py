"""Chat templates: the Jinja that models ship in ``tokenizer_config.json``, rendered.

Public API::

    from mtok.chat import ChatTemplate, TemplateError
    template = ChatTemplate(source)                 # parsed and compiled once
    prompt = template.render(messages=[...], add_generation_prompt=True, bos_token="<s>")

Two backends, as for tokenizers:

* ``jinja2``: jinja2 itself, in the environment transformers' ``apply_chat_template``
  builds (sandboxed, ``trim_blocks``/``lstrip_blocks``, ``loopcontrols``, its
  ``tojson``, ``raise_exception``, ``strftime_now``, ``{% generation %}``).
* ``python``: mtok's own Jinja engine (:mod:`mtok.chat.engine`), standard library
  only, held to the same output as jinja2 for every template and context, or an
  error where jinja2 raises one.

``auto`` picks ``jinja2`` when it is importable, else ``python``.  Every failure is a
:class:`TemplateError` (syntax, ``raise_exception``, undefined misuse, sandbox, limits).
This package imports nothing of the server, and nothing outside the standard library
until the ``jinja2`` backend is asked for.
"""

from __future__ import annotations

from typing import Any, Dict, Optional, Tuple

from . import jinja2_backend
from .errors import TemplateError
from .limits import MAX_DEPTH, MAX_OUTPUT, MAX_STEPS, Budget, Limits

BACKENDS: Tuple[str, ...] = ("auto", "jinja2", "python")

__all__ = ["BACKENDS", "ChatTemplate", "Limits", "TemplateError", "available_backends", "resolve_backend",
           "MAX_OUTPUT", "MAX_STEPS", "MAX_DEPTH"]


def available_backends() -> Tuple[str, ...]:
    """The concrete backends usable here: ``python`` always, ``jinja2`` when importable."""
    return ("jinja2", "python") if jinja2_backend.available() else ("python",)


def resolve_backend(backend: str = "auto") -> str:
    """The concrete backend ``backend`` names here; a TemplateError for an unknown or unavailable one."""
    if backend not in BACKENDS:
        raise TemplateError(f"unknown chat template backend {backend!r}; choose from {', '.join(BACKENDS)}",
                            "config")
    if backend == "auto":
        return available_backends()[0]
    if backend not in available_backends():
        raise TemplateError("the jinja2 chat template backend needs jinja2 (pip install jinja2)", "config")
    return backend


class ChatTemplate:
    """A chat template, compiled once by one backend and rendered any number of times.

    ``render(**context)`` returns the rendered string or raises :class:`TemplateError`.
    It is safe to call from several threads.  ``backend`` is the concrete backend in use;
    ``limits`` bound every render; ``sandbox`` (python backend) is a stricter
    :class:`~mtok.chat.sandbox.Sandbox` than the default.
    """

    def __init__(self, source: str, backend: str = "auto", limits: Optional[Limits] = None, sandbox: Any = None):
        if not isinstance(source, str):
            raise TemplateError(f"a chat template is a string, not {type(source).__name__}", "config")
        self.source = source
        self.backend = resolve_backend(backend)
        self.limits = limits or Limits()
        if self.backend == "jinja2":
            if sandbox is not None:
                raise TemplateError("a sandbox policy is the python backend's (jinja2's is its environment)", "config")
            self._impl: Any = jinja2_backend.Jinja2Template(source, self.limits)
        else:
            from .engine import compile_template
            from .sandbox import SANDBOX
            self._impl = compile_template(source, self.limits, sandbox or SANDBOX)

    def render(self, **context: Any) -> str:
        return self._impl.render(context)

    def render_dict(self, context: Dict[str, Any]) -> str:
        """``render`` with the context as one mapping (keys need not be identifiers)."""
        return self._impl.render(context)

    def measure(self, context: Dict[str, Any]) -> "Tuple[str, Budget]":
        """``render_dict``, and the render's :class:`~mtok.chat.limits.Budget`: the steps and memory it
        spent (``steps``, ``memory``), for sizing the limits (``python -m mtok.bench chat --budget``)."""
        return self._impl.run(context)

    def __repr__(self) -> str:
        return f"ChatTemplate(<{len(self.source)} chars>, backend={self.backend!r})"
