"""mtok.chat's engine on its own: errors, limits, the sandbox, backends, compile-once.

No jinja2 needed except where a test says so (it then skips without it).
"""

from __future__ import annotations

import json
import subprocess
import sys
import threading

import pytest

from support import ROOT, import_real
from mtok.chat import BACKENDS, ChatTemplate, Limits, TemplateError, available_backends, resolve_backend

pytestmark = [pytest.mark.fast, pytest.mark.unit]


def error_of(src, backend="python", limits=None, **ctx):
    with pytest.raises(TemplateError) as info:
        ChatTemplate(src, backend=backend, limits=limits).render(**ctx)
    return info.value


def test_syntax_errors_say_where():
    err = error_of("line one\n  {% if x %}ok{% endfo %}")
    assert err.kind == "syntax" and err.lineno == 2 and err.colno is not None
    assert "line 2" in str(err)
    err = error_of("{{ 'a' ~ }}")
    assert err.kind == "syntax" and err.lineno == 1


def test_raise_exception_carries_the_template_message():
    err = error_of("ok\n{{ raise_exception('Conversation roles must alternate') }}")
    assert err.kind == "raised" and err.message == "Conversation roles must alternate" and err.lineno == 2


def test_undefined_misuse_is_an_error_with_its_line():
    err = error_of("a\nb\n{{ messages[0].content.upper() }}", messages=[])
    assert err.kind == "undefined" and err.lineno == 3
    assert error_of("{{ foo.bar }}").kind == "undefined"
    assert ChatTemplate("[{{ foo }}]{{ foo is defined }}", backend="python").render() == "[]False"


def test_other_runtime_errors_are_template_errors():
    assert error_of("{{ 1 / 0 }}").kind == "type"
    assert error_of("{{ 'a' + 1 }}").kind == "type"
    assert error_of("{% for x in none %}{% endfor %}", none=None).kind == "type"


@pytest.mark.parametrize("src", [
    "{% for i in range(100) %}{{ 'x' * 50 }}{% endfor %}",
    "{% for i in range(10) %}{% for j in range(1000) %}ab{% endfor %}{% endfor %}",
    "{% macro m() %}{% for i in range(1000) %}yz{% endfor %}{% endmacro %}{{ m() }}",
    "{% set ns = namespace(s='ab') %}{% for i in range(40) %}{% set ns.s = ns.s ~ ns.s %}{% endfor %}{{ ns.s }}",
])
def test_output_past_the_limit_stops_the_render(src):
    assert error_of(src, limits=Limits(max_output=1000)).kind == "limit"


def test_limits_on_steps_recursion_and_sizes():
    assert error_of("{% for i in range(100) %}{% for j in range(100) %}{% endfor %}{% endfor %}",
                    limits=Limits(max_steps=5000)).kind == "limit"
    assert error_of("{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}").kind == "limit"
    assert error_of("{{ 'x' * 10**8 }}").kind == "limit"
    assert error_of("{{ 2 ** 100000 }}").kind == "limit"
    assert error_of("{{ range(10**6)|length }}").kind == "security"
    for src in ("{{ '%999999999d' % 1 }}", "{{ 'x'.ljust(10**9) }}", "{{ 'x'|center(10**9) }}", "{{ 'a'|indent(10**9) }}",
                "{{ ('x' * 4000000).replace('x', 'yy') }}", "{{ ('x' * 4000000)|replace('x', 'yy') }}",
                "{{ '{:999999999}'.format(1) }}", "{{ '%.999999999f'|format(1.5) }}"):
        assert error_of(src).kind == "limit", src
    assert ChatTemplate("{{ '%5.1f|%-3s|' % (2.25, 'x') }}{{ '{:>4}'.format(7) }}", backend="python").render() == \
        "  2.2|x  |   7"
    deep = "{% macro f(n) %}{% if n > 0 %}{{ f(n - 1) }}{% endif %}{{ n }}{% endmacro %}{{ f(50) }}"
    assert ChatTemplate(deep, backend="python").render().startswith("012")


def test_a_template_keeps_rendering_after_an_error():
    template = ChatTemplate("{% if fail %}{{ raise_exception('no') }}{% endif %}ok", backend="python")
    for _ in range(3):
        with pytest.raises(TemplateError):
            template.render(fail=True)
        assert template.render(fail=False) == "ok"


def test_the_sandbox_hides_internals():
    render = ChatTemplate("{{ s.__class__ }}|{{ s.__class__.__name__ }}", backend="python").render
    with pytest.raises(TemplateError) as info:
        render(s="x")
    assert info.value.kind == "security"
    assert ChatTemplate("[{{ s.__class__ }}][{{ l._private }}]", backend="python").render(s="x", l=[]) == "[][]"
    err = error_of("{{ l.append(1) }}{{ l }}", l=[])
    assert err.kind == "security"
    err = error_of("{% set ns = namespace() %}{% set ns.__dict__ = 1 %}")
    assert err.kind == "security"
    assert ChatTemplate("{{ '{0.__class__}'.format(1) }}", backend="python").render() == ""


def test_runtime_objects_show_only_what_jinja2_shows():
    src = ("{% macro m(a, b=1) %}{% endmacro %}{{ m.name }}|{{ m.arguments }}|{{ m.catch_kwargs }}|{{ m._func }}|"
           "{{ m._rt }}|{% set ns = namespace(x=1) %}{{ ns.attrs }}|{{ ns|attr('_attrs') }}|{{ range.__self__ }}")
    assert ChatTemplate(src, backend="python").render() == "m|('a', 'b')|False|||||"
    assert error_of("{% macro m() %}{% endmacro %}{{ m._rt.spend(-5) }}").kind in ("undefined", "security")


def test_parsed_once_then_rendered_without_parsing(monkeypatch):
    template = ChatTemplate("{% for m in messages %}{{ m }}{% endfor %}", backend="python")
    import mtok.chat.lexer
    import mtok.chat.parser

    def refuse(*args, **kwargs):
        raise AssertionError("parsed again")

    monkeypatch.setattr(mtok.chat.parser, "parse", refuse)
    monkeypatch.setattr(mtok.chat.lexer, "tokenize", refuse)
    assert template.render(messages=[1, 2]) == "12"


def test_renders_from_many_threads_at_once():
    template = ChatTemplate("{% set ns = namespace(n=0) %}{% for m in messages %}{% set ns.n = ns.n + m %}"
                            "{% endfor %}{{ ns.n }}", backend="python")
    results, errors = {}, []

    def work(k):
        try:
            results[k] = [template.render(messages=list(range(k))) for _ in range(200)]
        except Exception as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(k,)) for k in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert not errors
    assert all(set(results[k]) == {str(sum(range(k)))} for k in range(8))


def test_backend_names():
    assert BACKENDS == ("auto", "jinja2", "python")
    assert "python" in available_backends()
    assert resolve_backend("python") == "python"
    with pytest.raises(TemplateError) as info:
        resolve_backend("django")
    assert info.value.kind == "config"
    assert ChatTemplate("x", backend="python").backend == "python"
    with pytest.raises(TemplateError):
        ChatTemplate(None)  # type: ignore[arg-type]


SCRIPT = r"""
import json, sys
sys.modules["jinja2"] = None   # as if not installed
from mtok.chat import ChatTemplate, TemplateError, available_backends
t = ChatTemplate("{% for m in messages %}<{{ m.role }}>{{ m.content|trim }}{% endfor %}")
out = {"available": available_backends(), "backend": t.backend,
       "text": t.render(messages=[{"role": "user", "content": " hi "}]), "jinja2_modules": "jinja2" in sys.modules and sys.modules["jinja2"] is not None}
try:
    ChatTemplate("x", backend="jinja2")
except TemplateError as exc:
    out["jinja2_refused"] = exc.kind
print(json.dumps(out))
"""


def test_without_jinja2_auto_is_python_and_jinja2_is_refused():
    proc = subprocess.run([sys.executable, "-c", SCRIPT], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    assert out == {"available": ["python"], "backend": "python", "text": "<user>hi", "jinja2_modules": False,
                   "jinja2_refused": "config"}


def test_the_jinja2_backend_is_bounded_too():
    import_real("jinja2", reason="jinja2 not installed")
    assert ChatTemplate("x").backend == "jinja2"
    src = "{% for i in range(100) %}{{ 'x' * 50 }}{% endfor %}"
    assert error_of(src, backend="jinja2", limits=Limits(max_output=1000)).kind == "limit"
    assert error_of("{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}", backend="jinja2").kind == "limit"
    assert error_of("{{ raise_exception('x') }}", backend="jinja2").message == "x"
    assert error_of("{% if %}", backend="jinja2").lineno == 1
    err = error_of("a\nb\n{{ messages[0].content.upper() }}", backend="jinja2", messages=[])
    assert err.kind == "undefined" and err.lineno == 3
    assert error_of("ok\n{{ raise_exception('x') }}", backend="jinja2").lineno == 2
