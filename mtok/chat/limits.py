"""How far one render may go: CPU time, memory, output size, steps, recursion depth.

A chat template is untrusted code, and Jinja is a language in which a few characters
can ask for unbounded work (a macro calling itself twice, ``((9**4096)**4096)**4096``,
``'%*d' % (10**9, 1)``).  So every render, whichever backend runs it, spends a
:class:`Budget` of its :class:`Limits` and stops with a
:class:`~mtok.chat.errors.TemplateError` of kind ``"limit"`` (whose message names the
limit and, for the two a deployment tunes, its flag) when it passes one:

* ``max_cpu_seconds`` of the rendering thread's CPU time (``time.thread_time()``,
  so renders in other threads do not count against it), checked every
  :data:`CLOCK_EVERY` steps;
* ``max_memory`` bytes built in all: every operation that builds a string, list,
  bytes or int charges what it built (a character or byte as 1, a list item as 8,
  an int by its bits), *before* building it where its size can be known from its
  operands (:mod:`mtok.chat.guards`), so a render's peak memory follows its charge;
* ``max_output`` characters: of the output, and of any one value built;
* ``max_steps`` steps: loop iterations, macro and other calls, ``range()`` items, the
  items filters walk, and the values walked before a container is printed, compared
  or sorted;
* ``max_depth`` nested macro calls.

Between two checks the work is bounded (no single value past ``max_output``, no int
past :data:`MAX_INT_BITS`), so no one operation holds the GIL for long.  The budget of
the render running in a thread is that thread's :func:`current` budget: the filters
and operators of both backends charge it without being handed it.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass
from typing import Any, Optional

from .errors import TemplateError

MAX_OUTPUT = 4 * 1024 * 1024
MAX_STEPS = 1_000_000
MAX_DEPTH = 200
MAX_CPU_SECONDS = 5.0
MAX_MEMORY_MIB = 256
MAX_RANGE = 100_000  # jinja2's sandbox refuses larger ranges; so does mtok's
MAX_INT_BITS = 1 << 16  # ints past 65536 bits (~19,700 digits) are refused before they are computed
CLOCK_EVERY = 256  # steps between two readings of the thread's CPU clock (one costs ~0.6 us)

CPU_FLAG = "--chat-template-max-cpu-seconds"
MEMORY_FLAG = "--chat-template-max-memory-mib"


@dataclass(frozen=True)
class Limits:
    max_output: int = MAX_OUTPUT
    max_steps: int = MAX_STEPS
    max_depth: int = MAX_DEPTH
    max_cpu_seconds: float = MAX_CPU_SECONDS
    max_memory: int = MAX_MEMORY_MIB << 20

    def budget(self) -> "Budget":
        return Budget(self)


class Budget:
    """What one render has spent of its :class:`Limits`.  ``with budget:`` makes it the
    thread's :func:`current` one for the render (and restores the one before)."""

    __slots__ = ("limits", "steps", "memory", "max_value", "max_memory", "deadline", "next_clock", "outer")

    def __init__(self, limits: Limits):
        self.limits = limits
        self.steps = 0
        self.memory = 0
        self.max_value, self.max_memory = limits.max_output, limits.max_memory
        self.deadline = time.thread_time() + limits.max_cpu_seconds
        self.next_clock = CLOCK_EVERY
        self.outer: Optional[Budget] = None

    def __enter__(self) -> "Budget":
        self.outer = getattr(_local, "budget", None)
        _local.budget = self
        return self

    def __exit__(self, *exc: Any) -> None:
        _local.budget = self.outer

    def spend(self, n: int = 1) -> None:
        """``n`` steps; every CLOCK_EVERY of them, a look at the CPU clock."""
        self.steps += n
        if self.steps >= self.next_clock:
            if self.steps > self.limits.max_steps:
                raise TemplateError(f"the template ran more than {self.limits.max_steps} steps (loop iterations, "
                                    f"calls and items walked)", "limit")
            self.next_clock = self.steps + CLOCK_EVERY
            if time.thread_time() > self.deadline:
                raise TemplateError(f"the template used more than {self.limits.max_cpu_seconds:g} s of CPU time "
                                    f"({CPU_FLAG})", "limit")

    def charge(self, items: int, nbytes: int) -> None:
        """A value of ``items`` characters or elements, costing ``nbytes``, built (or about to be)."""
        self.memory += nbytes
        if items > self.max_value or self.memory > self.max_memory:
            self._over(items)

    def _over(self, items: int) -> None:
        if items > self.max_value:
            raise TemplateError(f"the template built a value of {items} items, over the limit of "
                                f"{self.max_value}", "limit")
        raise TemplateError(f"the template built more than {self.max_memory >> 20} MiB of values "
                            f"({MEMORY_FLAG})", "limit")

    def output_exceeded(self) -> None:
        raise TemplateError(f"the template rendered more than {self.limits.max_output} characters", "limit")

    def range(self, *args: int) -> "range":
        """``range`` as jinja2's sandbox gives it (at most MAX_RANGE items); its items count as steps
        (whether a loop walks them or a filter)."""
        rng = range(*args)
        if len(rng) > MAX_RANGE:
            raise TemplateError(f"range too big: {len(rng)} items, at most {MAX_RANGE}", "security")
        self.spend(len(rng))
        return rng


class _Unbounded(Budget):
    """The budget outside any render (constant folding at compile time, a filter called directly):
    the per-value size limit holds, nothing accumulates."""

    def spend(self, n: int = 1) -> None:
        pass

    def charge(self, items: int, nbytes: int) -> None:
        if items > self.max_value:
            self._over(items)


_local = threading.local()
_UNBOUNDED = _Unbounded(Limits())


def current() -> Budget:
    """The budget of the render running in this thread."""
    return getattr(_local, "budget", None) or _UNBOUNDED
