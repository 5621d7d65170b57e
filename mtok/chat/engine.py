"""mtok's own Jinja engine: compile a chat template once, render it many times.

``compile_template(source, limits)`` lexes (:mod:`.lexer`), parses (:mod:`.parser`,
:mod:`.statements`), generates Python source (:mod:`.compiler`) and compiles it with
``compile()``; each ``render(context)`` then runs one Python function under a fresh
:class:`Runtime`, the render's :class:`~mtok.chat.limits.Budget` (CPU time, memory,
steps, output size, macro depth; the thread's current one while it runs, so that the
sandbox and the filters charge it) and the globals that depend on it (``range``).  Any failure is a TemplateError, with
the template line where the failure happened when it can be known.
"""

from __future__ import annotations

import warnings
from itertools import islice
from typing import Any, Callable, Dict, List, Tuple

from .compile_expr import base_namespace
from .filter_guards import strftime_now
from .compile_stmt import generate
from .errors import TemplateError
from .limits import Budget, Limits
from .parser import parse
from .runtime import Cycler, Joiner, Namespace, undefined_name
from .sandbox import SANDBOX, Sandbox, active


def raise_exception(message: Any) -> None:
    raise TemplateError(str(message), "raised")


class _TemplateDict:
    """The ``dict`` global, as transformers gives it: ``dict(...)`` and ``dict.fromkeys``."""

    def __call__(self, *args: Any, **kwargs: Any) -> Dict[Any, Any]:
        return dict(*args, **kwargs)

    def fromkeys(self, *args: Any, **kwargs: Any) -> Dict[Any, Any]:
        return dict.fromkeys(*args, **kwargs)


GLOBALS: Dict[str, Any] = {
    "dict": _TemplateDict(), "namespace": Namespace, "cycler": Cycler, "joiner": Joiner,
    "raise_exception": raise_exception, "strftime_now": strftime_now,
}


class Runtime(Budget):
    """One render's budget (:class:`~mtok.chat.limits.Budget`), plus the output checked so far and macro depth."""

    __slots__ = ("depth", "buf", "mark", "size")

    def __init__(self, limits: Limits):
        super().__init__(limits)
        self.depth = 0
        self.buf: List[str] = []
        self.mark = 0
        self.size = 0

    def tick(self, buf: List[str]) -> None:
        """One loop iteration: a step; and, every 32 new pieces of ``buf``, the size of its output."""
        self.steps += 1
        if self.steps >= self.next_clock:
            self.spend(0)
        n = len(buf)
        if n - self.mark >= 32 or buf is not self.buf:
            if buf is not self.buf:
                self.buf, self.mark, self.size = buf, 0, 0
            self.size += sum(map(len, islice(buf, self.mark, n)))
            self.mark = n
            if self.size > self.limits.max_output:
                self.output_exceeded()

    def join(self, buf: List[str]) -> str:
        rv = "".join(buf)
        if len(rv) > self.limits.max_output:
            self.output_exceeded()
        return rv


class CompiledTemplate:
    """A template compiled to one Python function; ``render(context)`` runs it."""

    backend = "python"

    def __init__(self, source: str, limits: Limits, sandbox: Sandbox = SANDBOX):
        self.limits = limits
        self.sandbox = sandbox
        body = parse(source)
        with limits.budget(), active(sandbox):  # generating folds constants: bounded and sandboxed as a render
            self.python_source, self.line_map, namespace = generate(body)
        with warnings.catch_warnings():  # Python warns on literal subscripts such as None[1:]; jinja2 errs at run time
            warnings.simplefilter("ignore", SyntaxWarning)
            code = compile(self.python_source, "<chat template>", "exec")
        namespace.update(base_namespace(sandbox))
        exec(code, namespace)
        self._root: Callable[..., List[str]] = namespace["root"]

    def render(self, context: Dict[str, Any]) -> str:
        return self.run(context)[0]

    def run(self, context: Dict[str, Any]) -> Tuple[str, Budget]:
        """The rendered text, and what the render spent of its budget."""
        rt = Runtime(self.limits)
        names = dict(GLOBALS)
        names["range"] = rt.range
        names.update(context)

        def resolve(name: str) -> Any:
            return names[name] if name in names else undefined_name(name)

        try:
            with rt, active(self.sandbox):
                out = self._root(resolve, rt)
        except TemplateError as exc:
            if exc.lineno is None:
                exc.lineno = self._template_line(exc)
                exc.args = (exc._describe(),)
            raise
        except RecursionError as exc:
            raise TemplateError("the template recursed too deeply", "limit", self._template_line(exc)) from None
        except Exception as exc:  # a Python error inside the template: TypeError, ZeroDivisionError, ...
            raise TemplateError(f"{type(exc).__name__}: {exc}", "type", self._template_line(exc)) from None
        return rt.join(out), rt

    def _template_line(self, exc: BaseException) -> Any:
        tb = exc.__traceback__
        lineno = None
        while tb is not None:
            if tb.tb_frame.f_code.co_filename == "<chat template>" and tb.tb_lineno < len(self.line_map):
                lineno = self.line_map[tb.tb_lineno] or lineno
            tb = tb.tb_next
        return lineno


def compile_template(source: str, limits: Limits, sandbox: Sandbox = SANDBOX) -> CompiledTemplate:
    try:
        return CompiledTemplate(source, limits, sandbox)
    except RecursionError:
        raise TemplateError("the template is nested too deeply", "syntax") from None
    except SyntaxError as exc:  # Python refused the generated code (e.g. over 20 nested blocks)
        raise TemplateError(f"the template cannot be compiled: {exc.msg}", "syntax") from None


__all__ = ["CompiledTemplate", "GLOBALS", "compile_template"]
