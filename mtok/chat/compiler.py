"""Compiler of mtok's Jinja engine: a parsed template to Python source, compiled once.

The template becomes one Python function ``root(resolve, rt)`` whose body is the
template's: data and ``{{ }}`` become appends to an output list, ``for``/``if`` become
Python ``for``/``if``, macros become nested functions, template names become Python
locals (:mod:`mtok.chat.symbols` decides which).  Generated code runs as fast as
jinja2's own (which compiles the same way) and needs no interpretation per node.

Every loop iteration calls ``rt.tick(buffer)``, which counts steps and output against
the render's limits; captured output (macros, block ``set``, ``filter``) is checked
when it is joined.  ``line_map`` maps generated lines back to template lines, so a
runtime error can name its template line.
"""

from __future__ import annotations

from typing import Any, Dict, List, Optional, Tuple

from .compile_expr import ExpressionCompiler
from .fold import Impossible, const_value, has_slice
from .errors import TemplateError
from .symbols import FrameVisitor, Symbols, names_used


class Frame:
    """Where code is generated: the symbols in scope, the output buffer, soft/loop flags."""

    def __init__(self, symbols: Symbols, buffer: str, in_loop: bool = False, soft: bool = False):
        self.symbols = symbols
        self.buffer = buffer
        self.in_loop = in_loop
        self.soft = soft

    def inner(self, buffer: Optional[str] = None, in_loop: Optional[bool] = None) -> "Frame":
        return Frame(Symbols(self.symbols), buffer or self.buffer, self.in_loop if in_loop is None else in_loop)

    def soft_copy(self) -> "Frame":
        return Frame(self.symbols, self.buffer, self.in_loop, True)


class Compiler(ExpressionCompiler):
    def __init__(self, namespace: Dict[str, Any]):
        self.namespace = namespace
        self.lines: List[Tuple[int, str, int]] = []
        self.indent = 1
        self.lineno = 0
        self.counter = 0

    def tmp(self, prefix: str = "t") -> str:
        self.counter += 1
        return f"{prefix}_{self.counter}"

    def line(self, text: str) -> None:
        self.lines.append((self.indent, text, self.lineno))

    def source(self) -> Tuple[str, List[int]]:
        text = ["def root(resolve, rt):"]
        line_map = [0, 0]
        for indent, code, lineno in self.lines:
            text.append("    " * indent + code)
            line_map.append(lineno)
        return "\n".join(text) + "\n", line_map

    # -- frames ---------------------------------------------------------------------
    def enter_frame(self, frame: Frame) -> None:
        for ref, (kind, arg) in frame.symbols.loads.items():
            if kind == "resolve":
                self.line(f"{ref} = resolve({arg!r})")
            elif kind == "alias":
                self.line(f"{ref} = {arg}")
            elif kind == "undefined":
                self.line(f"{ref} = {self.const_name(self._undefined(ref))}")

    @staticmethod
    def _undefined(ref: str) -> Any:
        from .runtime import undefined_name

        return undefined_name(ref.split("_", 2)[2])

    def compile_root(self, body: List[Any]) -> None:
        frame = Frame(Symbols(), "out")
        FrameVisitor(frame.symbols).visit_all(body)
        self.line("out = []")
        self.line("w_out = out.append")
        self.line("tick = rt.tick")
        self.enter_frame(frame)
        self.block(body, frame)
        self.line("return out")

    def block(self, nodes: List[Any], frame: Frame) -> None:
        start = len(self.lines)
        pending: List[str] = []
        for node in nodes:
            self.lineno = node.lineno
            if node.kind == "output" and all(n.kind == "const" for n in node.nodes):
                pending.extend(str(n.value) for n in node.nodes)
                continue
            self._flush(pending, frame)
            getattr(self, "stmt_" + node.kind)(node, frame)
        self._flush(pending, frame)
        if len(self.lines) == start:
            self.line("pass")

    def _flush(self, pending: List[str], frame: Frame) -> None:
        text = "".join(pending)
        if text:
            self.line(f"w_{frame.buffer}({text!r})")
        pending.clear()

    def capture(self, nodes: List[Any], frame: Frame) -> str:
        """Generates ``nodes`` into a fresh buffer (in ``frame``); returns the name of the joined string."""
        buf = frame.buffer
        self.line(f"{buf} = []")
        self.line(f"w_{buf} = {buf}.append")
        self.block(nodes, frame)
        result = self.tmp()
        self.line(f"{result} = rt.join({buf})")
        return result

    # -- statements -----------------------------------------------------------------
    def stmt_output(self, node: Any, frame: Frame) -> None:
        for item in node.nodes:
            value = item.value if item.kind == "const" else _printed_constant(item)
            if value is not _NOT_CONSTANT:
                self.line(f"w_{frame.buffer}({str(value)!r})")
            else:
                self.line(f"w_{frame.buffer}(s({self.expr(item, frame)}))")

    def assign(self, target: Any, value: str, frame: Frame) -> None:
        if target.kind == "nsref":
            self.line(f"setns({frame.symbols.ref(target.name)}, {target.attr!r}, {value})")
        else:
            self.line(f"{self.target(target, frame)} = {value}")

    def target(self, target: Any, frame: Frame) -> str:
        if target.kind == "tuple":
            items = [self.target(item, frame) for item in target.items]
            return f"({', '.join(items)}{',' if len(items) == 1 else ''})"
        return frame.symbols.ref(target.name)

    def stmt_set(self, node: Any, frame: Frame) -> None:
        self.assign(node.target, self.expr(node.value, frame), frame)

    def stmt_setblock(self, node: Any, frame: Frame) -> None:
        inner = frame.inner(self.tmp("b"))
        visitor = FrameVisitor(inner.symbols)
        visitor.visit_all(node.body)
        visitor.visit(node.filter)
        self.enter_frame(inner)
        value = self.capture(node.body, inner)
        if node.filter is not None:
            value = self._filter_chain(node.filter, inner, value)
        self.assign(node.target, value, frame)

    def _filter_chain(self, node: Any, frame: Frame, value: str) -> str:
        if node.node is not None:
            value = self._filter_chain(node.node, frame, value)
        return self.filter_call(node, frame, value)

    def stmt_if(self, node: Any, frame: Frame) -> None:
        soft = frame.soft_copy()
        for i, (test, body) in enumerate(node.branches):
            self.line(f"{'if' if i == 0 else 'elif'} {self.expr(test, soft)}:")
            self.indent += 1
            self.block(body, soft)
            self.indent -= 1
        if node.else_:
            self.line("else:")
            self.indent += 1
            self.block(node.else_, soft)
            self.indent -= 1

    def stmt_break(self, node: Any, frame: Frame) -> None:
        if not frame.in_loop:
            raise TemplateError("'break' outside a loop", "syntax", node.lineno)
        self.line("break")

    def stmt_continue(self, node: Any, frame: Frame) -> None:
        if not frame.in_loop:
            raise TemplateError("'continue' outside a loop", "syntax", node.lineno)
        self.line("continue")

    def stmt_with(self, node: Any, frame: Frame) -> None:
        values = [self.expr(v, frame) for v in node.values]
        inner = frame.inner()
        visitor = FrameVisitor(inner.symbols)
        for target in node.targets:
            visitor.store_target(target, param=True)
        visitor.visit_all(node.body)
        self.enter_frame(inner)
        for target, value in zip(node.targets, values):
            self.assign(target, value, inner)
        self.block(node.body, inner)

    def stmt_filterblock(self, node: Any, frame: Frame) -> None:
        inner = frame.inner(self.tmp("b"))
        FrameVisitor(inner.symbols).visit_all(node.body)
        self.enter_frame(inner)
        value = self.capture(node.body, inner)
        self.line(f"w_{frame.buffer}(s({self._filter_chain(node.filter, inner, value)}))")


_NOT_CONSTANT = object()


def _printed_constant(node: Any) -> Any:
    """What jinja2 prints for a ``{{ }}`` it folds, where folding changes the result (see fold.py)."""
    if not has_slice(node):
        return _NOT_CONSTANT
    try:
        return const_value(node)  # printed as folded, even where it could not be a constant
    except Impossible:
        return _NOT_CONSTANT


__all__ = ["Compiler", "Frame", "names_used"]
