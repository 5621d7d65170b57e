"""The chat template sandbox against a corpus of escapes, on both backends (issue 23, finding 1).

A chat template is code from a downloaded model directory.  The corpus holds the
payloads of jinja2's own sandbox tests and of the public SSTI payload lists (the
``__class__.__mro__``/``__subclasses__``/``__globals__``/``__builtins__`` walks, the
``lipsum``/``url_for``/``request``/``config``/``self`` globals of other Jinja hosts,
format-string walks through ``.format``, ``|attr('format')``, ``|map('attr', ...)``,
``format_map``, ``%`` and ``|format``, and the internals of mtok's runtime objects).
Each is rendered on every backend in a child process whose environment holds a known
``MTOK_API_KEY``, whose argv holds a marker and whose multiprocessing authkey is known;
no output and no error message may hold any of them, nor a dump of builtins or a
module.  Where jinja2 raises, the render must raise (a ``security`` error, or
``undefined`` for the globals this environment does not have); where jinja2 only makes
an unsafe Undefined, which prints as '', both print nothing secret.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from support import ROOT, Server
from mtok.chat import available_backends
from mtok.tokenizer import DEFAULT_TOKENIZER_DIR

KEY = "sk-test-0f1e2d3c4b5a-the-api-key"
ARGV_MARKER = "argv-marker-5a4b3c2d"
AUTHKEY = b"authkey-9a8b7c6d5e4f"
SECRETS = (KEY, ARGV_MARKER, AUTHKEY.decode(), AUTHKEY.hex(), "<built-in function open>", "<module ",
           "'__builtins__'", "environ({", "os.environ")

# The walk of the finding: it printed the API key from the python backend.
FINDING = "{{ ('{0.__globals__[warnings].sys.modules[os].environ[MTOK_API_KEY]}'|attr('format'))(raise_exception) }}"

# Payloads that must raise a sandbox error on every backend.
MUST_RAISE = [
    FINDING,
    "{{ ('{0.__globals__[sys].argv}'|attr('format'))(raise_exception) }}",
    "{{ ('{0.__globals__[__builtins__][open]}'|attr('format'))(raise_exception) }}",
    "{{ ('{0.__globals__[warnings].sys.modules[multiprocessing].current_process}'|attr('format'))(raise_exception) }}",
    "{{ (['{0.__globals__[os]}']|map('attr', 'format')|first)(raise_exception) }}",
    "{{ ('{x.__globals__[os]}'|attr('format_map'))({'x': raise_exception}) }}",
    "{{ '{0.__globals__[sys]}'.format(raise_exception) }}",
    "{{ '{0.__class__.__mro__}'.format('') }}",
    "{{ '{x.__init__.__globals__}'.format_map({'x': cycler}) }}",
    "{{ '{0.gi_frame.f_globals}'.format(messages|map('upper')) }}",
    "{{ '{0.__self__.limits}'.format(range) }}",
    "{{ '{0[__class__][__mro__]}'.format(x) }}",
    "{{ ''.__class__.__mro__[1].__subclasses__() }}",
    "{{ ''.__class__.mro() }}",
    "{{ [].__class__.__base__.__subclasses__() }}",
    "{{ ().__class__.__bases__[0].__subclasses__()[0].__init__.__globals__['sys'] }}",
    "{{ ''.__reduce_ex__(2) }}",
    "{{ cycler.__init__.__globals__.os.environ }}",
    "{{ cycler(1, 2).__init__.__globals__ }}",
    "{{ joiner.__init__.__globals__ }}",
    "{{ joiner().__call__.__globals__ }}",
    "{{ namespace.__init__.__globals__ }}",
    "{{ namespace.mro() }}",
    "{{ namespace.__subclasses__() }}",
    "{{ raise_exception.__globals__['os'].environ }}",
    "{{ raise_exception.__globals__.__builtins__.open('/etc/passwd').read() }}",
    "{{ strftime_now.__globals__.os.environ }}",
    "{{ dict.__call__.__globals__ }}",
    "{{ dict.fromkeys.__self__.fromkeys }}",
    "{{ range.__self__.limits }}",
    "{{ self.__init__.__globals__ }}",
    "{% set ns = namespace() %}{{ ns.__class__.__init__.__globals__ }}",
    "{% set ns = namespace(_x=1) %}",
    "{% set ns = namespace() %}{% set ns._x = 1 %}",
    "{% for x in [1] %}{{ loop.__class__.__init__.__globals__ }}{% endfor %}",
    "{% macro m() %}{% endmacro %}{{ m._func.__globals__ }}",
    "{% macro m() %}{% endmacro %}{{ m.__call__.__globals__ }}",
    "{% macro m() %}{{ caller._func.__globals__ }}{% endmacro %}{% call m() %}{% endcall %}",
    "{{ messages|sum(attribute='__class__') }}",
    "{{ (messages|map('upper')).gi_frame.f_globals }}",
    "{{ (messages|map('upper')).gi_code.co_consts }}",
    "{{ messages.append(1) }}",
    "{{ {}.update(a=1) }}",
    "{{ {}.setdefault('a', 1) }}",
    "{{ messages.pop() }}",
    "{{ lipsum.__globals__.os.environ }}",
    "{{ url_for.__globals__.os.environ }}",
    "{{ request.application.__globals__ }}",
    "{{ config.items() }}",
    "{{ range(10**9)|list }}",
]

# Payloads jinja2 renders, the unsafe value an Undefined that prints as '': nothing secret may print.
MAY_RENDER = [
    "{{ ''|attr('__class__')|attr('__mro__') }}",
    "{{ (''|attr('format'))('{0.__class__}', 1) }}",
    "{{ '{x.__globals__}'.format_map({'x': raise_exception}) }}",
    "{{ raise_exception.__globals__ }}",
    "{{ raise_exception.func_globals }}",
    "{{ raise_exception.__code__ }}",
    "{{ raise_exception.__builtins__ }}",
    "{{ strftime_now.__globals__ }}",
    "{{ dict.fromkeys.__self__ }}",
    "{{ range.__class__ }}",
    "{{ self._TemplateReference__context }}",
    "{% set ns = namespace() %}{{ ns.__dict__ }}{{ ns._Namespace__attrs }}",
    "{% for x in [1] %}{{ loop._items }}{{ loop._iterator }}{{ loop._recurse }}{% endfor %}",
    "{% macro m() %}{% endmacro %}{{ m._rt }}{{ m._func }}",
    "{% macro m() %}{{ caller._func }}{% endmacro %}{% call m() %}{% endcall %}",
    "{{ messages|map('attr', '__class__')|list }}",
    "{{ messages|map(attribute='__class__')|list }}",
    "{{ messages|map(attribute='__class__.__mro__')|list }}",
    "{{ messages|selectattr('__class__')|list }}",
    "{{ messages|sort(attribute='__class__') }}",
    "{{ messages|groupby('__class__') }}",
    "{{ messages|join(attribute='__class__') }}",
    "{{ messages|unique(attribute='__class__')|list }}",
    "{{ messages|min(attribute='__class__') }}{{ messages|max(attribute='__class__') }}",
    "{{ '%s'|format(raise_exception.__globals__) }}",
    "{{ '%(a)s' % {'a': raise_exception.__globals__} }}",
    "{{ '%s %s' % (range.__self__, cycler.__init__) }}",
    "{{ (messages|map('upper')).gi_frame }}",
    "{{ ''.format.__wrapped__ }}{{ ''.format.__self__ }}{{ ''.format.__closure__ }}",
    "{{ (''|attr('format')).__self__ }}{{ (''|attr('format')).__globals__ }}",
    "{{ cycler.reset.__globals__ }}{{ joiner.__call__ }}",
    "{{ ''['__class__'] }}{{ x['__class__'] }}",
    "{{ ''|attr('\\x5f\\x5fclass\\x5f\\x5f') }}",
    "{{ ''|attr('__cla' ~ 'ss__') }}",
    "{{ dict(__class__=1).__class__ }}",
    "{{ namespace }}{{ cycler }}{{ joiner }}{{ raise_exception }}{{ dict }}",
]

PROBE = r"""
import json, multiprocessing, sys
multiprocessing.current_process().authkey = AUTHKEY
from mtok.chat import ChatTemplate, TemplateError
out = []
for backend, payload in json.load(sys.stdin):
    try:
        text = ChatTemplate(payload, backend).render(messages=[{"role": "user", "content": "hi"}], x="value")
        out.append(["ok", text])
    except TemplateError as exc:
        out.append([exc.kind, str(exc)])
print(json.dumps(out))
"""


def render_all(payloads):
    """``(backend, payload, kind, text)`` for every payload on every backend, rendered in a child process
    holding the secrets; none of them appears in any output, error or the child's stderr."""
    cases = [(b, p) for p in payloads for b in available_backends()]
    env = dict(os.environ, MTOK_API_KEY=KEY, PYTHONPATH=ROOT)
    code = PROBE.replace("AUTHKEY", repr(AUTHKEY))
    proc = subprocess.run([sys.executable, "-c", code, ARGV_MARKER], input=json.dumps(cases), env=env,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    rows = [(backend, payload, kind, text) for (backend, payload), (kind, text) in zip(cases, json.loads(proc.stdout))]
    for row in rows:
        for secret in SECRETS:
            assert secret not in row[3], row
            assert secret not in proc.stderr
    return rows


@pytest.mark.unit
def test_the_findings_walk_raises_a_security_error_on_every_backend():
    rows = render_all([FINDING])
    assert [kind for _, _, kind, _ in rows] == ["security"] * len(available_backends()), rows


@pytest.mark.unit
def test_every_escape_of_the_corpus_raises_and_leaks_nothing():
    for backend, payload, kind, text in render_all(MUST_RAISE):
        missing_global = any(payload.startswith("{{ " + g) for g in ("lipsum", "url_for", "request", "config"))
        assert kind == "security" or (missing_global and kind == "undefined"), (backend, payload, kind, text)


@pytest.mark.unit
def test_what_jinja2_renders_as_an_unsafe_undefined_prints_nothing_secret():
    for backend, payload, kind, text in render_all(MAY_RENDER):
        assert kind in ("ok", "security", "undefined", "type"), (backend, payload, kind, text)


@pytest.mark.unit
def test_a_stricter_sandbox_is_one_subclass():
    """Every lookup of the python backend goes through the template's policy: tightening it tightens
    plain lookups, |attr, attribute=, format fields and calls at once."""
    from mtok.chat import ChatTemplate, TemplateError
    from mtok.chat.sandbox import Sandbox

    class NoUpper(Sandbox):
        def is_safe_attribute(self, obj, attr):
            return attr != "upper" and super().is_safe_attribute(obj, attr)

    for src in ("{{ x.upper() }}", "{{ (x|attr('upper'))() }}", "{{ ([x]|map(attribute='upper')|first)() }}",
                "{{ x['upper']() }}", "{{ [x]|sort(attribute='upper.x') }}"):
        assert ChatTemplate(src, "python").render(x="a") in ("A", "['a']")
        with pytest.raises(TemplateError) as info:
            ChatTemplate(src, "python", sandbox=NoUpper()).render(x="a")
        assert info.value.kind == "security", src
    fields = "{{ '{0.upper}'.format(x) }}"
    assert ChatTemplate(fields, "python").render(x="a").startswith("<built-in method upper")
    assert ChatTemplate(fields, "python", sandbox=NoUpper()).render(x="a") == ""


def test_a_template_over_http_cannot_read_the_api_key(server_factory, tmp_path):
    """The finding over a real server: chat and /tokenize with messages answer a 400 JSON error
    and the API key appears nowhere (nor in the server's log)."""
    template = tmp_path / "evil.jinja"
    template.write_text(FINDING)
    backends = available_backends()
    for backend in backends:
        srv = server_factory("--tokenizer-path", DEFAULT_TOKENIZER_DIR, "--chat-template", str(template),
                             "--chat-template-backend", backend, env={"MTOK_API_KEY": KEY})
        auth = {"Authorization": f"Bearer {KEY}"}
        messages = [{"role": "user", "content": "hi"}]
        for path, body in (("/v1/chat/completions", {"model": "x", "messages": messages, "max_tokens": 4}),
                           ("/tokenize", {"messages": messages})):
            status, headers, answer = srv.request("POST", path, body, headers=auth)
            assert status == 400, (backend, path, answer)
            assert headers["content-type"].startswith("application/json")
            assert KEY not in json.dumps(answer)
            assert "unsafe" in answer["error"]["message"], answer
        assert srv.get("/health", headers=auth)[0] == 200
        assert KEY not in srv.stderr()
