"""Loops and macros of mtok's Jinja compiler: the statements that open Python scopes.

``for`` becomes a Python ``for`` over the iterable (a list when the body reads
``loop`` or the loop has a filter, as jinja2 needs the length); each iteration ticks
the render's budget and re-initialises the body's locals.  The ``else`` block runs when
no iteration ran.  A ``recursive`` loop becomes a nested function of its items, which
``loop(children)`` calls one level deeper.  A macro (and the body of a ``call`` block, which is the ``caller``
macro) becomes a nested Python function wrapped in :class:`~mtok.chat.runtime.Macro`,
which applies jinja2's argument rules.

:class:`StatementCompiler` is the whole compiler (:class:`~mtok.chat.compiler.Compiler`
and these statements), so :func:`generate`, the entry point, is here.
"""

from __future__ import annotations

from typing import Any, Dict, List, Tuple

from .compiler import Compiler, Frame
from .errors import TemplateError
from .symbols import FrameVisitor, names_used


class StatementCompiler(Compiler):
    def stmt_for(self, node: Any, frame: Frame) -> None:
        if _stores_loop(node):
            raise TemplateError("Can't assign to special loop variable in for-loop target", "syntax", node.lineno)
        items = self.tmp()
        if not node.recursive:
            self.line(f"{items} = {self.expr(node.iter, frame)}")
            self._loop(node, frame, items, None)
            return
        # a recursive loop is a function of its items: ``loop(children)`` renders the body for them
        func, buf = self.tmp("m"), self.tmp("b")
        self.line(f"def {func}({items}, depth0):")
        self.indent += 1
        self.line(f"{buf} = []")
        self.line(f"w_{buf} = {buf}.append")
        self._loop(node, Frame(frame.symbols, buf, frame.in_loop, frame.soft), items, func)
        self.line(f"return rt.join({buf})")
        self.indent -= 1
        self.line(f"w_{frame.buffer}({func}({self.expr(node.iter, frame)}, 0))")

    def _loop(self, node: Any, frame: Frame, items: str, recurse: Any) -> None:
        extended = recurse is not None or "loop" in names_used(node.body, {"loop"})
        loop_frame = frame.inner(in_loop=True)
        visitor = FrameVisitor(loop_frame.symbols)
        visitor.store_target(node.target, param=True)
        visitor.visit_all(node.body)
        loop_ref = loop_frame.symbols.declare_parameter("loop") if extended else None
        if node.test is not None:
            self._filter_items(node, frame, items)
        elif extended:
            self.line(f"{items} = list({items})")
        flag = self.tmp() if node.else_ else None
        if flag:
            self.line(f"{flag} = True")
        if loop_ref:
            self.line(f"{loop_ref} = LoopContext({items}, depth0, {recurse})" if recurse else
                      f"{loop_ref} = LoopContext({items})")
        self.line(f"for {self.target(node.target, loop_frame)} in {items}:")
        self.indent += 1
        if flag:
            self.line(f"{flag} = False")
        self.line(f"tick({frame.buffer})")
        if loop_ref:
            self.line(f"{loop_ref}.index0 += 1")
        self.enter_frame(loop_frame)
        self.block(node.body, loop_frame)
        self.indent -= 1
        if flag:
            self.line(f"if {flag}:")
            self.indent += 1
            else_frame = frame.inner()
            FrameVisitor(else_frame.symbols).visit_all(node.else_)
            self.enter_frame(else_frame)
            self.block(node.else_, else_frame)
            self.indent -= 1

    def _filter_items(self, node: Any, frame: Frame, items: str) -> None:
        """``for x in xs if test``: the items that pass, as a list (loop.length counts only them)."""
        test_frame = frame.inner(in_loop=True)
        visitor = FrameVisitor(test_frame.symbols)
        visitor.store_target(node.target, param=True)
        visitor.visit(node.test)
        kept, item = self.tmp(), self.tmp()
        self.line(f"{kept} = []")
        self.line(f"for {item} in {items}:")
        self.indent += 1
        self.line(f"tick({frame.buffer})")
        self.line(f"{self.target(node.target, test_frame)} = {item}")
        self.enter_frame(test_frame)
        self.line(f"if {self.expr(node.test, test_frame)}:")
        self.line(f"    {kept}.append({item})")
        self.indent -= 1
        self.line(f"{items} = {kept}")

    def macro_function(self, node: Any, frame: Frame, name: str) -> str:
        """Defines the Python function of a macro or caller; returns the Macro(...) expression."""
        func = self.tmp("m")
        inner = Frame(frame.inner().symbols, self.tmp("b"))
        special = names_used(node.body, {"caller", "kwargs", "varargs"}) - set(node.args)
        params = [inner.symbols.declare_parameter(arg) for arg in node.args]
        takes_caller = "caller" in special
        params += [inner.symbols.declare_parameter(n) for n in ("caller", "kwargs", "varargs") if n in special]
        visitor = FrameVisitor(inner.symbols)
        visitor.visit_all(node.defaults)
        visitor.visit_all(node.body)
        self.line(f"def {func}({', '.join(params)}):")
        self.indent += 1
        self.enter_frame(inner)
        first_default = len(node.args) - len(node.defaults)
        for i, arg in enumerate(node.args):
            ref = inner.symbols.ref(arg)
            self.line(f"if {ref} is MISSING:")
            if i >= first_default:
                self.line(f"    {ref} = {self.expr(node.defaults[i - first_default], inner)}")
            else:
                self.line(f"    {ref} = {self.const_name(_not_provided(arg))}")
        result = self.capture(node.body, inner)
        self.line(f"return {result}")
        self.indent -= 1
        return (f"Macro({name!r}, {func}, {node.args!r}, {'kwargs' in special}, {'varargs' in special}, "
                f"{takes_caller}, rt)")

    def stmt_macro(self, node: Any, frame: Frame) -> None:
        macro = self.macro_function(node, frame, node.name)
        self.line(f"{frame.symbols.ref(node.name)} = {macro}")

    def stmt_callblock(self, node: Any, frame: Frame) -> None:
        caller = self.tmp()
        self.line(f"{caller} = {self.macro_function(node, frame, 'caller')}")
        self.line(f"w_{frame.buffer}(s({self.expr_call(node.call, frame, [f'caller={caller}'])}))")


def _stores_loop(node: Any) -> bool:
    """Whether anything under a ``for`` (its target, a ``set``) assigns to ``loop`` (jinja2 refuses it)."""
    stack = [node]
    while stack:
        item = stack.pop()
        if isinstance(item, (list, tuple)):
            stack.extend(item)
        elif hasattr(item, "kind"):
            if item.kind in ("for", "set", "setblock") and _names_in(item.target) & {"loop"}:
                return True
            stack.extend(v for v in item.f.values() if isinstance(v, (list, tuple)) or hasattr(v, "kind"))
    return False


def _names_in(target: Any) -> set:
    if target.kind == "tuple":
        return set().union(*(_names_in(t) for t in target.items)) if target.items else set()
    return {target.name} if target.kind == "name" else set()


def _not_provided(name: str) -> Any:
    from .runtime import Undefined

    return Undefined(f"parameter {name!r} was not provided")


def generate(body: List[Any]) -> Tuple[str, List[int], Dict[str, Any]]:
    """Python source for a parsed template, its line map, and the names it needs bound."""
    compiler = StatementCompiler({})
    compiler.compile_root(body)
    source, line_map = compiler.source()
    return source, line_map, compiler.namespace


__all__: List[str] = ["StatementCompiler", "generate"]

