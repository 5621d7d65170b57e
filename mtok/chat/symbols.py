"""Scoping of mtok's Jinja engine: which Python local each template name is, per frame.

jinja2's scoping rules are subtle and templates depend on them, so this follows its
model (``idtracking``): the root, each ``for`` body (and its ``else``), each macro,
``call``, ``with``, block ``set`` and ``filter`` body is a *frame*; ``if`` is not.
A name stored in a frame (``set``, a loop target, a macro) is a local of that frame,
re-initialised at each entry (so a ``set`` in a loop body does not survive the
iteration, and never leaks out of it).  Its initial value is

* the enclosing frame's local of that name, if it has one (``alias``),
* else the context's value (``resolve``) when the frame reads it before storing it,
  or stores it only in some branches of an ``if``,
* else undefined.

A name a frame only reads resolves to the nearest enclosing frame's local or, failing
that, to the context at frame entry.  Locals are named ``l_<depth>_<name>``.
"""

from __future__ import annotations

from typing import Any, Dict, Iterable, List, Optional, Set, Tuple

Load = Tuple[str, Optional[str]]  # ("resolve", name) | ("alias", local) | ("undefined"|"param", None)


class Symbols:
    def __init__(self, parent: Optional["Symbols"] = None, level: Optional[int] = None):
        if level is None:
            level = 0 if parent is None else parent.level + 1
        self.level = level
        self.parent = parent
        self.refs: Dict[str, str] = {}
        self.loads: Dict[str, Load] = {}
        self.stores: Set[str] = set()

    def _define(self, name: str, load: Load) -> str:
        ref = f"l_{self.level}_{name}"
        self.refs[name] = ref
        self.loads[ref] = load
        return ref

    def find_ref(self, name: str) -> Optional[str]:
        sym: Optional[Symbols] = self
        while sym is not None:
            if name in sym.refs:
                return sym.refs[name]
            sym = sym.parent
        return None

    def find_load(self, ref: str) -> Optional[Load]:
        sym: Optional[Symbols] = self
        while sym is not None:
            if ref in sym.loads:
                return sym.loads[ref]
            sym = sym.parent
        return None

    def ref(self, name: str) -> str:
        ref = self.find_ref(name)
        if ref is None:
            raise AssertionError(f"unknown name {name!r}")
        return ref

    def load(self, name: str) -> None:
        if self.find_ref(name) is None:
            self._define(name, ("resolve", name))

    def store(self, name: str) -> None:
        self.stores.add(name)
        if name in self.refs:
            return
        outer = self.parent.find_ref(name) if self.parent is not None else None
        self._define(name, ("alias", outer) if outer is not None else ("undefined", None))

    def declare_parameter(self, name: str) -> str:
        self.stores.add(name)
        return self._define(name, ("param", None))

    def copy(self) -> "Symbols":
        rv = Symbols(self.parent, self.level)
        rv.refs = dict(self.refs)
        rv.loads = dict(self.loads)
        rv.stores = set(self.stores)
        return rv

    def branch_update(self, branches: List["Symbols"]) -> None:
        counts: Dict[str, int] = {}
        for branch in branches:
            for name in branch.stores:
                if name not in self.stores:
                    counts[name] = counts.get(name, 0) + 1
        for branch in branches:
            self.refs.update(branch.refs)
            self.loads.update(branch.loads)
            self.stores.update(branch.stores)
        for name, count in counts.items():
            if count == len(branches):
                continue
            target = self.ref(name)
            outer = self.parent.find_ref(name) if self.parent is not None else None
            self.loads[target] = ("alias", outer) if outer is not None else ("resolve", name)


class FrameVisitor:
    """Records what one frame loads and stores, in source order, without entering inner frames."""

    def __init__(self, symbols: Symbols):
        self.symbols = symbols

    def visit_all(self, nodes: Iterable[Any]) -> None:
        for node in nodes:
            self.visit(node)

    def visit(self, node: Any) -> None:
        if node is None:
            return
        kind = node.kind
        if kind == "name":
            self.symbols.load(node.name)
        elif kind == "nsref":
            self.symbols.load(node.name)
        elif kind in _STATEMENT_VISITS:
            getattr(self, "visit_" + kind)(node)
        else:
            for child in expr_children(node):
                self.visit(child)

    def store_target(self, target: Any, param: bool = False) -> None:
        if target.kind == "name":
            if param:
                self.symbols.declare_parameter(target.name)
            else:
                self.symbols.store(target.name)
        elif target.kind == "tuple":
            for item in target.items:
                self.store_target(item, param)
        else:  # nsref: loads the namespace
            self.symbols.load(target.name)

    def visit_output(self, node: Any) -> None:
        self.visit_all(node.nodes)

    def visit_set(self, node: Any) -> None:
        self.visit(node.value)
        self.store_target(node.target)

    def visit_setblock(self, node: Any) -> None:
        self.store_target(node.target)

    def visit_for(self, node: Any) -> None:
        self.visit(node.iter)

    def visit_if(self, node: Any) -> None:
        self.visit(node.branches[0][0])
        original = self.symbols
        results = []
        for group in ([node.branches[0][1]], node.branches[1:], [node.else_]):
            self.symbols = original.copy()
            for item in group:
                if isinstance(item, tuple):  # an elif: its test, then its body in a branch of its own
                    self._visit_elif(item)
                else:
                    self.visit_all(item)
            results.append(self.symbols)
        self.symbols = original
        original.branch_update(results)

    def _visit_elif(self, branch: Tuple[Any, List[Any]]) -> None:
        self.visit(branch[0])
        original = self.symbols
        results = []
        for group in (branch[1], [], []):
            self.symbols = original.copy()
            self.visit_all(group)
            results.append(self.symbols)
        self.symbols = original
        original.branch_update(results)

    def visit_macro(self, node: Any) -> None:
        self.symbols.store(node.name)

    def visit_callblock(self, node: Any) -> None:
        self.visit(node.call)

    def visit_filterblock(self, node: Any) -> None:
        self.visit(node.filter)

    def visit_with(self, node: Any) -> None:
        self.visit_all(node.values)

    def visit_break(self, node: Any) -> None:
        pass

    visit_continue = visit_break


_STATEMENT_VISITS = frozenset(["output", "set", "setblock", "for", "if", "macro", "callblock", "filterblock",
                               "with", "break", "continue"])


def expr_children(node: Any) -> List[Any]:
    """The sub-expressions of an expression node, in jinja2's field order."""
    f = node.f
    kind = node.kind
    if kind in ("call", "filter", "test"):
        rv = [f["node"]] + list(f["args"]) + [v for _, v in f["kwargs"]] + [f["dyn_args"], f["dyn_kwargs"]]
        return [c for c in rv if c is not None]
    if kind == "dict":
        return [c for pair in f["items"] for c in pair]
    if kind == "compare":
        return [f["expr"]] + [operand for _, operand in f["ops"]]
    if kind == "cond":
        return [c for c in (f["test"], f["then"], f["other"]) if c is not None]
    if kind in ("list", "tuple", "concat"):
        return list(f["items"])
    if kind == "slice":
        return [c for c in (f["start"], f["stop"], f["step"]) if c is not None]
    return [v for k, v in f.items() if hasattr(v, "kind")]


def names_used(nodes: Iterable[Any], wanted: Set[str]) -> Set[str]:
    """Which of ``wanted`` are read anywhere under ``nodes`` (jinja2's find_undeclared)."""
    found: Set[str] = set()
    stack = list(nodes)
    while stack:
        node = stack.pop()
        if node is None:
            continue
        if isinstance(node, (list, tuple)):
            stack.extend(node)
            continue
        if not hasattr(node, "kind"):
            continue
        if node.kind == "name" and node.name in wanted:
            found.add(node.name)
        stack.extend(v for v in node.f.values() if isinstance(v, (list, tuple)) or hasattr(v, "kind"))
    return found
