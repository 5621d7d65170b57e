"""Expression code generation of mtok's Jinja engine (a mixin of the compiler).

Each template expression becomes one Python expression string, evaluated in the
generated render function.  Attribute and item access, calls, ``+``, ``*``, ``**``,
``%``, ``~`` and printing go through the sandbox's policy (:mod:`mtok.chat.sandbox`);
comparisons are Python's own, their operands walked first (:func:`~mtok.chat.guards.compared`)
unless one is a constant such as ``'user'``; ``and``/``or``/``not``, ``-``, ``/``, ``//``
and literals are Python's own,
as in jinja2's generated code.  Filters and tests are bound by name at compile time;
an unknown one is a syntax error, except under an ``if`` or a conditional expression,
where (as in jinja2) it fails only when evaluated.
"""

from __future__ import annotations

import keyword
from typing import Any, Dict, List

from . import guards
from .errors import TemplateError
from .filters import FILTERS, TESTS
from .runtime import MISSING, LoopContext, Macro
from .fold import Impossible, const_value, has_safe_repr, has_slice
from .sandbox import Sandbox

def base_namespace(sandbox: Sandbox) -> Dict[str, Any]:
    """What generated code sees besides its own bindings: ``sandbox``'s methods, the checks, the runtime."""
    return {
        "ga": sandbox.getattr, "gi": sandbox.getitem, "call": sandbox.call, "add": sandbox.add, "mul": sandbox.mul,
        "pow_": sandbox.pow_, "mod": sandbox.mod, "concat": sandbox.concat, "s": guards.printed,
        "cmp": guards.compared, "setns": sandbox.setns, "LoopContext": LoopContext, "Macro": Macro, "MISSING": MISSING,
        "__builtins__": {"list": list, "slice": slice, "str": str},
    }


_PLAIN_BINOPS = {"-": "-", "/": "/", "//": "//"}
_GUARDED_BINOPS = {"+": "add", "*": "mul", "**": "pow_", "%": "mod"}
_COMPARE = {"==": "==", "!=": "!=", "<": "<", "<=": "<=", ">": ">", ">=": ">=", "in": "in", "not in": "not in"}


def _missing(kind: str, name: str) -> Any:
    def fail(*args: Any, **kwargs: Any) -> Any:
        raise TemplateError(f"No {kind} named {name!r}.", "type")

    return fail


class ExpressionCompiler:
    namespace: dict

    def const_name(self, value: Any) -> str:
        """A module-level name holding ``value`` (for values without a safe literal)."""
        name = f"k_{len(self.namespace)}"
        self.namespace[name] = value
        return name

    def expr(self, node: Any, frame: Any) -> str:
        if node.kind != "const" and has_slice(node):  # where jinja2's constant folding changes the result
            try:
                value = const_value(node)
            except Impossible:
                pass
            else:
                if has_safe_repr(value):
                    return self.const_name(value)
        return getattr(self, "expr_" + node.kind)(node, frame)

    def expr_const(self, node: Any, frame: Any) -> str:
        value = node.value
        if value is None or isinstance(value, (bool, int, str)):
            return repr(value)
        return self.const_name(value)

    def expr_name(self, node: Any, frame: Any) -> str:
        return frame.symbols.ref(node.name)

    def expr_getattr(self, node: Any, frame: Any) -> str:
        return f"ga({self.expr(node.node, frame)}, {node.attr!r})"

    def expr_getitem(self, node: Any, frame: Any) -> str:
        if node.arg.kind == "slice":  # jinja2 slices with Python's own subscript at run time (None[1:] fails)
            return f"{self.expr(node.node, frame)}[{self.expr(node.arg, frame)}]"
        return f"gi({self.expr(node.node, frame)}, {self.expr(node.arg, frame)})"

    def expr_slice(self, node: Any, frame: Any) -> str:
        parts = [self.expr(p, frame) if p is not None else "None" for p in (node.start, node.stop, node.step)]
        return f"slice({', '.join(parts)})"  # inside a subscript, Python reads this as the slice

    def _args(self, node: Any, frame: Any, extra: List[str] = ()) -> str:
        parts = [self.expr(a, frame) for a in node.args]
        # a Python keyword (``dict(class=1)``) cannot be written ``class=...``: then the keyword arguments go,
        # in their order, as one ``**{'class': ...}``, after which Python takes no ``*args``
        spelled = any(keyword.iskeyword(k) for k, _ in node.kwargs)
        if node.dyn_args is not None and spelled:
            parts.append(f"*{self.expr(node.dyn_args, frame)}")
        if spelled:
            parts.append("**{" + ", ".join(f"{k!r}: {self.expr(v, frame)}" for k, v in node.kwargs) + "}")
        else:
            parts += [f"{k}={self.expr(v, frame)}" for k, v in node.kwargs]
        parts += list(extra)
        if node.dyn_args is not None and not spelled:
            parts.append(f"*{self.expr(node.dyn_args, frame)}")
        if node.dyn_kwargs is not None:
            parts.append(f"**{self.expr(node.dyn_kwargs, frame)}")
        return ", ".join(parts)

    def expr_call(self, node: Any, frame: Any, extra: List[str] = ()) -> str:
        args = self._args(node, frame, extra)
        return f"call({self.expr(node.node, frame)}{', ' if args else ''}{args})"

    def _bound(self, table: dict, kind: str, prefix: str, name: str, node: Any, frame: Any) -> str:
        func = table.get(name)
        if func is None:
            if not frame.soft:
                raise TemplateError(f"No {kind} named {name!r}.", "syntax", node.lineno)
            func = _missing(kind, name)
        key = f"{prefix}:{name}"  # one module-level name per filter or test used
        local = self.namespace.setdefault(key, f"{prefix}_{len(self.namespace)}")
        self.namespace[local] = func
        return local

    def filter_call(self, node: Any, frame: Any, value: str) -> str:
        func = self._bound(FILTERS, "filter", "f", node.name, node, frame)
        args = self._args(node, frame)
        return f"{func}({value}{', ' if args else ''}{args})"

    def expr_filter(self, node: Any, frame: Any) -> str:
        return self.filter_call(node, frame, self.expr(node.node, frame))

    def expr_test(self, node: Any, frame: Any) -> str:
        func = self._bound(TESTS, "test", "j", node.name, node, frame)
        args = self._args(node, frame)
        return f"{func}({self.expr(node.node, frame)}{', ' if args else ''}{args})"

    def expr_binop(self, node: Any, frame: Any) -> str:
        left, right = self.expr(node.left, frame), self.expr(node.right, frame)
        if node.op in _GUARDED_BINOPS:
            return f"{_GUARDED_BINOPS[node.op]}({left}, {right})"
        return f"({left} {_PLAIN_BINOPS[node.op]} {right})"

    def expr_unary(self, node: Any, frame: Any) -> str:
        return f"({node.op}{self.expr(node.node, frame)})"

    def expr_not(self, node: Any, frame: Any) -> str:
        return f"(not {self.expr(node.node, frame)})"

    def expr_and(self, node: Any, frame: Any) -> str:
        return f"({self.expr(node.left, frame)} and {self.expr(node.right, frame)})"

    def expr_or(self, node: Any, frame: Any) -> str:
        return f"({self.expr(node.left, frame)} or {self.expr(node.right, frame)})"

    def expr_compare(self, node: Any, frame: Any) -> str:
        operands = [node.expr] + [operand for _, operand in node.ops]
        plain = guards.plain_comparison(operands, _scalar_const)
        parts = [self._operand(node.expr, frame, plain)]
        for op, operand in node.ops:
            parts.append(_COMPARE[op])
            parts.append(self._operand(operand, frame, plain))
        return f"({' '.join(parts)})"

    def _operand(self, node: Any, frame: Any, plain: bool) -> str:
        """A comparison's operand; walked first (``cmp``) unless the comparison is plain or it is a constant."""
        code = self.expr(node, frame)
        return code if plain or node.kind == "const" else f"cmp({code})"

    def expr_concat(self, node: Any, frame: Any) -> str:
        return f"concat({', '.join(self.expr(item, frame) for item in node.items)})"

    def expr_cond(self, node: Any, frame: Any) -> str:
        soft = frame.soft_copy()
        other = self.expr(node.other, soft) if node.other is not None else self.const_name(_COND_UNDEFINED)
        return f"({self.expr(node.then, soft)} if {self.expr(node.test, soft)} else {other})"

    def expr_list(self, node: Any, frame: Any) -> str:
        return f"[{', '.join(self.expr(item, frame) for item in node.items)}]"

    def expr_tuple(self, node: Any, frame: Any) -> str:
        items = [self.expr(item, frame) for item in node.items]
        return f"({', '.join(items)}{',' if len(items) == 1 else ''})"

    def expr_dict(self, node: Any, frame: Any) -> str:
        items = [f"{self.expr(k, frame)}: {self.expr(v, frame)}" for k, v in node.items]
        return "{" + ", ".join(items) + "}"


def _scalar_const(node: Any) -> bool:
    return node.kind == "const" and not isinstance(node.value, (list, tuple, dict))


def _cond_undefined() -> Any:
    from .runtime import Undefined

    return Undefined("the inline if-expression evaluated to false and no else section was defined.")


_COND_UNDEFINED = _cond_undefined()
