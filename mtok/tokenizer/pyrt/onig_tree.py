"""The tree an Oniguruma regex parses into (:mod:`.onig_parse`) and is emitted from (:mod:`.onig`)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import List, Optional, Tuple, Union

from .. import TokenizerError
from . import unicode as U


class OnigError(TokenizerError):
    """A regex in a tokenizer.json that Oniguruma would reject."""


class OnigUnsupported(TokenizerError):
    """A valid Oniguruma regex that cannot be reproduced exactly with Python's ``re``."""


# -- the tree ------------------------------------------------------------------------

@dataclass
class Lit:
    """One literal character; ``ci`` when matched case-insensitively."""

    cp: int
    ci: bool = False


@dataclass
class Cls:
    """One character from ``cset``, or else one of the multi-character case folds in ``folds``."""

    cset: U.CharSet
    folds: Tuple[str, ...] = ()


@dataclass
class Seq:
    items: List["Node"] = field(default_factory=list)


@dataclass
class Alt:
    branches: List["Node"]


@dataclass
class Group:
    """``kind``: ``""`` (plain), ``">"`` (atomic), ``"="``, ``"!"``, ``"<="``, ``"<!"`` (look-around)."""

    kind: str
    body: "Node"
    capture: Optional[int] = None  # group number, kept only if a backreference needs it


@dataclass
class Repeat:
    body: "Node"
    lo: int
    hi: Optional[int]  # None: unbounded
    mode: str = "greedy"  # or "lazy", "possessive"


@dataclass
class Anchor:
    kind: str  # "^", "$", "A", "z", "Z", "b", "B"


@dataclass
class Backref:
    group: int


Node = Union[Lit, Cls, Seq, Alt, Group, Repeat, Anchor, Backref]


@dataclass(frozen=True)
class Flags:
    i: bool = False  # ignore case
    m: bool = False  # Ruby's m: '.' matches a newline
    x: bool = False  # extended: whitespace and comments ignored
