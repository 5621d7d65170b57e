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
the ``python`` backend's are: output size is checked as the output is generated,
``range`` counts the items it yields against a budget, and runaway recursion ends
as a :class:`TemplateError`.
"""

from __future__ import annotations

import datetime
import json
from typing import Any, Callable, Dict

from .errors import TemplateError
from .limits import Limits


def available() -> bool:
    try:
        import jinja2  # noqa: F401
    except ImportError:
        return False
    return True


def _tojson(x: Any, ensure_ascii: bool = False, indent: Any = None, separators: Any = None,
            sort_keys: bool = False) -> str:
    return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)


def _strftime_now(fmt: str) -> str:
    return datetime.datetime.now().strftime(fmt)


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

    return {"GenerationTag": GenerationTag, "TemplateDict": TemplateDict, "TemplateNamespace": TemplateNamespace}


def make_environment() -> Any:
    """A jinja2 environment configured as transformers configures its own."""
    import jinja2
    import jinja2.ext
    from jinja2.sandbox import ImmutableSandboxedEnvironment

    classes = _make_classes(jinja2)

    def raise_exception(message: Any) -> None:
        raise jinja2.exceptions.TemplateError(message)

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                        extensions=[classes["GenerationTag"], jinja2.ext.loopcontrols])
    env.filters["tojson"] = _tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = _strftime_now
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
            self._template = environment().from_string(source)
        except Exception as exc:  # jinja2 raises TemplateSyntaxError, sometimes others
            raise _wrap(exc) from exc

    def render(self, context: Dict[str, Any]) -> str:
        budget = self.limits.budget()
        context = dict(context)
        context.setdefault("range", budget.range)
        parts = []
        size = 0
        try:
            for chunk in self._template.generate(context):
                size += len(chunk)
                if size > self.limits.max_output:
                    budget.output_exceeded()
                parts.append(chunk)
        except Exception as exc:
            raise _wrap(exc) from exc
        return "".join(parts)
