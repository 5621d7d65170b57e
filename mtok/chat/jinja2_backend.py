"""The ``jinja2`` backend: chat templates rendered by jinja2, in transformers' environment.

transformers' ``apply_chat_template`` renders with an ``ImmutableSandboxedEnvironment``
with ``trim_blocks``/``lstrip_blocks``, the ``loopcontrols`` extension, a
``{% generation %}`` block tag (rendered as its body), its own ``tojson`` filter (no
HTML escaping; ``ensure_ascii``/``indent``/``separators``/``sort_keys``), the globals
``raise_exception``/``strftime_now``, a ``dict`` global, and a ``namespace`` that
refuses underscore-prefixed names.  This module builds the same environment, so this
backend is the reference that mtok's own engine (:mod:`mtok.chat.engine`) is held to.

jinja2 is imported only when a template is built with this backend: importing
:mod:`mtok.chat` needs nothing outside the standard library.  Renders are bounded as
the ``python`` backend's are, by the same :class:`~mtok.chat.limits.Budget` and the
same checks (:mod:`mtok.chat.guards`), through the hooks jinja2's sandbox offers and
some it lacks: the environment's ``call`` (every call, macros included: a step, and
what builtin methods build), ``finalize`` (what is printed), every filter wrapped,
and a code generator whose ``for`` loops tick the budget per item and whose ``+ * **
%`` and ``~`` go through the size checks (as ``call_binop`` would, one call less).  The output size is
checked as it is generated, ``range`` counts its items, and runaway recursion ends
as a :class:`TemplateError`.
"""

from __future__ import annotations

from typing import Any, Callable, Dict, Tuple

from . import filter_guards, guards
from .errors import TemplateError
from .filters import tojson
from .limits import Budget, Limits, current
from .sandbox import str_format_of


def available() -> bool:
    try:
        import jinja2  # noqa: F401
    except ImportError:
        return False
    return True


def _make_classes(jinja2: Any) -> Dict[str, Any]:
    """The extension and globals transformers adds, defined once jinja2 is importable."""
    from jinja2.ext import Extension

    class GenerationTag(Extension):
        """``{% generation %}...{% endgeneration %}`` renders its body."""

        tags = {"generation"}

        def parse(self, parser: Any) -> Any:
            lineno = next(parser.stream).lineno
            body = parser.parse_statements(["name:endgeneration"], drop_needle=True)
            return jinja2.nodes.CallBlock(self.call_method("_body"), [], [], body).set_lineno(lineno)

        def _body(self, caller: Callable[[], str]) -> str:
            return caller()

    class TemplateDict:
        def __call__(self, *args: Any, **kwargs: Any) -> dict:
            return dict(*args, **kwargs)

        def fromkeys(self, *args: Any, **kwargs: Any) -> dict:
            return dict.fromkeys(*args, **kwargs)

    class TemplateNamespace(jinja2.utils.Namespace):
        def __init__(*args: Any, **kwargs: Any) -> None:
            self, args = args[0], args[1:]
            attrs = dict(*args, **kwargs)
            for name in attrs:
                TemplateNamespace.check_name(name)
            jinja2.utils.Namespace.__init__(self, attrs)

        def __setitem__(self, name: str, value: Any) -> None:
            TemplateNamespace.check_name(name)
            jinja2.utils.Namespace.__setitem__(self, name, value)

        @staticmethod
        def check_name(name: Any) -> None:
            if isinstance(name, str) and name.startswith("_"):
                raise jinja2.exceptions.SecurityError(
                    f"a namespace cannot hold an underscore-prefixed attribute: {name!r}")

    return {"GenerationTag": GenerationTag, "TemplateDict": TemplateDict, "TemplateNamespace": TemplateNamespace,
            "Environment": _budgeted_environment(jinja2)}


def _budgeted_environment(jinja2: Any) -> Any:
    """transformers' ``ImmutableSandboxedEnvironment``, every render's work charged to its budget."""
    from jinja2.sandbox import ImmutableSandboxedEnvironment, SandboxedEscapeFormatter, SandboxedFormatter

    class Formatter(SandboxedFormatter):
        def format_field(self, value: Any, format_spec: str) -> Any:
            guards.format_field(value, format_spec, current())
            return super().format_field(value, format_spec)

    class EscapeFormatter(SandboxedEscapeFormatter):  # a Markup's format escapes its fields, as jinja2's does
        def format_field(self, value: Any, format_spec: str) -> Any:
            guards.format_field(value, format_spec, current())
            return super().format_field(value, format_spec)

    class Environment(ImmutableSandboxedEnvironment):
        code_generator_class = _budgeted_code_generator()
        intercepted_binops = frozenset(guards.BINOPS)  # so that jinja2 does not fold them, unchecked, as it compiles
        budget_binops = guards.BINOPS
        budget_concat = staticmethod(guards.concat)
        budget_compared = staticmethod(guards.compared)

        @staticmethod
        def budget_iter(iterable: Any) -> Any:
            budget = current()
            for item in iterable:
                budget.spend(1)
                yield item

        def wrap_str_format(self, value: Any) -> Any:
            fmt = str_format_of(value)
            if fmt is None:
                return None
            escapes = hasattr(fmt[0], "__html__")
            return _format_method(EscapeFormatter(self, escape=fmt[0].escape) if escapes else Formatter(self), *fmt)

        def call(__self, __context: Any, __obj: Any, *args: Any, **kwargs: Any) -> Any:  # noqa: N805
            current().spend(1)
            fmt = __self.wrap_str_format(__obj)  # however it was obtained, a str.format is sandboxed
            args, charged = guards.before_call(fmt or __obj, args, kwargs)
            return guards.after_call(super().call(__context, fmt or __obj, *args, **kwargs), charged)

    return Environment


def _budgeted_code_generator() -> Any:
    """jinja2's code generator, with each ``for`` item a step and ``~`` through the size checks."""
    from jinja2 import nodes
    from jinja2.compiler import CodeGenerator, operators, optimizeconst

    class BudgetedCodeGenerator(CodeGenerator):
        budgeted_iters: Any = None  # the ids of the ``for`` iterables not yet generated

        def visit_For(self, node: Any, frame: Any) -> None:
            if self.budgeted_iters is None:
                self.budgeted_iters = set()
            self.budgeted_iters.add(id(node.iter))
            super().visit_For(node, frame)

        def visit(self, node: Any, *args: Any, **kwargs: Any) -> Any:
            if self.budgeted_iters and id(node) in self.budgeted_iters:  # a loop's items: each one a step
                self.budgeted_iters.discard(id(node))
                self.write("environment.budget_iter(")
                super().visit(node, *args, **kwargs)
                self.write(")")
                return None
            return super().visit(node, *args, **kwargs)

        @optimizeconst  # as jinja2's own: constant parts fold at compile time
        def visit_Concat(self, node: Any, frame: Any) -> None:
            self.write("environment.budget_concat((")
            for arg in node.nodes:
                self.visit(arg, frame)
                self.write(", ")
            self.write("))")

        @optimizeconst
        def visit_Compare(self, node: Any, frame: Any) -> None:
            operands = [node.expr] + [op.expr for op in node.ops]
            plain = guards.plain_comparison(operands, _scalar_const)
            self.write("(")
            self.compared(node.expr, frame, plain)
            for op in node.ops:
                self.write(f" {operators[op.op]} ")
                self.compared(op.expr, frame, plain)
            self.write(")")

        def compared(self, node: Any, frame: Any, plain: bool) -> None:
            if plain or isinstance(node, nodes.Const):
                self.visit(node, frame)
            else:
                self.write("environment.budget_compared(")
                self.visit(node, frame)
                self.write(")")

    for op, name in (("+", "Add"), ("*", "Mul"), ("**", "Pow"), ("%", "Mod")):
        setattr(BudgetedCodeGenerator, "visit_" + name, _budgeted_binop(op, optimizeconst))
    return BudgetedCodeGenerator


def _scalar_const(node: Any) -> bool:
    from jinja2 import nodes

    return isinstance(node, nodes.Const) and not isinstance(node.value, (list, tuple, dict))


def _budgeted_binop(op: str, optimizeconst: Any) -> Any:
    """A binary operator's code: ``environment.budget_binops[op](left, right)`` (as jinja2's sandbox
    ``call_binop``, one call less; being intercepted, it is never folded at compile time)."""

    @optimizeconst
    def visit(self: Any, node: Any, frame: Any) -> None:
        self.write(f"environment.budget_binops[{op!r}](")
        self.visit(node.left, frame)
        self.write(", ")
        self.visit(node.right, frame)
        self.write(")")

    return visit


def _format_method(formatter: Any, template: str, is_map: bool) -> Callable[..., str]:
    def format_(*args: Any, **kwargs: Any) -> str:
        if is_map:
            if kwargs:
                raise TypeError("format_map() takes no keyword arguments")
            if len(args) != 1:
                raise TypeError(f"format_map() takes exactly one argument ({len(args)} given)")
            args, kwargs = (), args[0]
        return type(template)(formatter.vformat(template, args, kwargs))

    return format_


def make_environment(budgeted: bool = True) -> Any:
    """A jinja2 environment configured as transformers configures its own; ``budgeted`` (what this
    backend renders in) adds the budget's hooks, without them it is transformers' own (a benchmark's
    reference)."""
    import jinja2
    import jinja2.ext
    from jinja2.sandbox import ImmutableSandboxedEnvironment

    classes = _make_classes(jinja2)

    def raise_exception(message: Any) -> None:
        raise jinja2.exceptions.TemplateError(message)

    extensions = [classes["GenerationTag"], jinja2.ext.loopcontrols]
    if budgeted:
        env = classes["Environment"](trim_blocks=True, lstrip_blocks=True, finalize=guards.measured,
                                     extensions=extensions)
    else:
        env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=extensions)
    env.filters["tojson"] = tojson  # transformers', the python backend's own
    if budgeted:
        env.filters = {name: filter_guards.guard_filter(name, func, 1 if hasattr(func, "jinja_pass_arg") else 0)
                       for name, func in env.filters.items()}
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = filter_guards.strftime_now
    if budgeted:
        env.globals["lipsum"] = filter_guards.lipsum(env.globals["lipsum"])
    env.globals["dict"] = classes["TemplateDict"]()
    env.globals["namespace"] = classes["TemplateNamespace"]
    return env


_ENVIRONMENT = None


def environment() -> Any:
    global _ENVIRONMENT
    if _ENVIRONMENT is None:
        _ENVIRONMENT = make_environment()
    return _ENVIRONMENT


def _template_line(exc: BaseException) -> Any:
    """The template line of a render error: jinja2 rewrites its tracebacks to name them."""
    lineno, tb = None, exc.__traceback__
    while tb is not None:
        if tb.tb_frame.f_code.co_filename == "<template>":
            lineno = tb.tb_lineno
        tb = tb.tb_next
    return lineno


def _wrap(exc: BaseException) -> TemplateError:
    """A jinja2 (or Python) exception as a :class:`TemplateError`."""
    import jinja2

    if isinstance(exc, TemplateError):
        if exc.lineno is None:
            exc.lineno = _template_line(exc)
            exc.args = (exc._describe(),)
        return exc
    if isinstance(exc, jinja2.TemplateSyntaxError):
        return TemplateError(exc.message or str(exc), "syntax", exc.lineno)
    line = _template_line(exc)
    if isinstance(exc, jinja2.UndefinedError):
        return TemplateError(exc.message or str(exc), "undefined", line)
    if isinstance(exc, jinja2.exceptions.SecurityError):
        return TemplateError(exc.message or str(exc), "security", line)
    if isinstance(exc, jinja2.TemplateError):
        return TemplateError(exc.message if exc.message is not None else "", "raised", line)
    if isinstance(exc, RecursionError):
        return TemplateError("the template recursed too deeply", "limit")
    return TemplateError(f"{type(exc).__name__}: {exc}", "type", line)


class Jinja2Template:
    """One template compiled by jinja2 (once), rendered with limits."""

    backend = "jinja2"

    def __init__(self, source: str, limits: Limits):
        self.limits = limits
        try:
            with limits.budget():  # jinja2 folds constants as it compiles: bounded as a render is
                self._template = environment().from_string(source)
        except Exception as exc:  # jinja2 raises TemplateSyntaxError, sometimes others
            raise _wrap(exc) from exc

    def render(self, context: Dict[str, Any]) -> str:
        return self.run(context)[0]

    def run(self, context: Dict[str, Any]) -> Tuple[str, Budget]:
        """The rendered text, and what the render spent of its budget."""
        budget = self.limits.budget()
        context = dict(context)
        context.setdefault("range", budget.range)
        parts = []
        size = 0
        try:
            with budget:
                for chunk in self._template.generate(context):
                    size += len(chunk)
                    if size > self.limits.max_output:
                        budget.output_exceeded()
                    parts.append(chunk)
        except Exception as exc:
            raise _wrap(exc) from exc
        return "".join(parts), budget
