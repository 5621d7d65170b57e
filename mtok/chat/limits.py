"""How far one render may go: output size, loop steps, recursion depth.

A chat template is untrusted code.  Whatever the backend, a render that produces more
than ``max_output`` characters, runs more than ``max_steps`` loop iterations (and
``range`` items), or nests macro calls deeper than ``max_depth`` stops with a
:class:`~mtok.chat.errors.TemplateError` of kind ``"limit"``.
"""

from __future__ import annotations

from dataclasses import dataclass

from .errors import TemplateError

MAX_OUTPUT = 4 * 1024 * 1024
MAX_STEPS = 1_000_000
MAX_DEPTH = 200
MAX_RANGE = 100_000  # jinja2's sandbox refuses larger ranges; so does mtok's


@dataclass(frozen=True)
class Limits:
    max_output: int = MAX_OUTPUT
    max_steps: int = MAX_STEPS
    max_depth: int = MAX_DEPTH

    def budget(self) -> "Budget":
        return Budget(self)


class Budget:
    """What one render has spent of its :class:`Limits`."""

    __slots__ = ("limits", "steps")

    def __init__(self, limits: Limits):
        self.limits = limits
        self.steps = 0

    def spend(self, n: int = 1) -> None:
        self.steps += n
        if self.steps > self.limits.max_steps:
            raise TemplateError(f"the template ran more than {self.limits.max_steps} loop steps", "limit")

    def output_exceeded(self) -> None:
        raise TemplateError(f"the template rendered more than {self.limits.max_output} characters", "limit")

    def range(self, *args: int) -> "range":
        """``range`` as jinja2's sandbox gives it (at most MAX_RANGE items); its items count as steps,
        so that loops bound the jinja2 backend too (which has no per-iteration hook)."""
        rng = range(*args)
        if len(rng) > MAX_RANGE:
            raise TemplateError(f"range too big: {len(rng)} items, at most {MAX_RANGE}", "security")
        self.spend(len(rng))
        return rng
