"""mtok's own Jinja engine (placeholder until the compiler lands)."""

from __future__ import annotations

from typing import Any

from .limits import Limits


def compile_template(source: str, limits: Limits) -> Any:
    raise NotImplementedError("the python chat template backend is not built yet")
