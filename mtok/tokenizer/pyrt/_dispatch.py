"""Building a pipeline component from its JSON object, by its ``"type"``."""

from __future__ import annotations

from typing import Dict, Optional

from .. import TokenizerError


def build(registry: Dict[str, type], d: Optional[dict], what: str):
    """The component ``d`` describes (None for JSON null), refused if its type is unknown."""
    if d is None:
        return None
    if not isinstance(d, dict):
        raise TokenizerError(f"{what} must be a JSON object, got {d!r}")
    kind = d.get("type")
    cls = registry.get(kind)  # type: ignore[arg-type]
    if cls is None:
        raise TokenizerError(f"unsupported {what} type {kind!r}")
    try:
        return cls.from_json(d)
    except (KeyError, TypeError, ValueError, AttributeError) as e:
        raise TokenizerError(f"{what} {kind}: invalid or missing field {e}") from e
