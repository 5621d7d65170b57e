"""Every render is bounded: CPU time, memory, steps, output (issue 23, finding 2).

Each payload of the finding (and its neighbours) asked for unbounded work that no
limit saw: a macro calling itself twice, ints grown by ``**`` and ``*``, filters and
string methods whose one C-level call builds gigabytes.  Each must now stop fast with
a ``limit`` error on both backends, the error naming the limit; the pathological ones
run in a child process whose peak RSS (``VmHWM``) must stay far below what they asked
for; and over HTTP the request gets a 400 naming the flag, and the server serves on.
"""

from __future__ import annotations

import json
import select
import subprocess
import sys
import time

import pytest

from support import ROOT
from mtok.chat import ChatTemplate, Limits, TemplateError, available_backends
from mtok.tokenizer import DEFAULT_TOKENIZER_DIR

MACRO_TWICE = "{% macro f(n) %}{% if n %}{{ f(n-1) }}{{ f(n-1) }}{% endif %}{% endmacro %}{{ f(60) }}"

# two lists 40 levels deep, each level holding the one below twice: 2**40 paths, 80 objects
SHARED_TWICE = ("{% set ns = namespace(a=['x'], b=['x']) %}{% for i in range(40) %}{% set ns.a = [ns.a, ns.a] %}"
                "{% set ns.b = [ns.b, ns.b] %}{% endfor %}")

# name -> (template, a word its error message must hold)
PAYLOADS = {
    "macro-twice": (MACRO_TWICE, "cpu"),
    "pow-of-pow": ("{{ ((9**4096)**4096)**4096 }}", "bits"),
    "int-squared": ("{% set ns = namespace(x=3) %}{% for i in range(100) %}{% set ns.x = ns.x * ns.x %}"
                    "{% endfor %}{{ ns.x > 0 }}", "bits"),
    "round-ceil": ("{{ 1.5|round(1000000000, 'ceil') }}", "bits"),
    "wordwrap-4mb": ("{{ ('ab ' * 1398101)|wordwrap(5) }}", "items"),
    "sort-4m": ("{{ ('x' * 4000000)|list|sort|length }}", "steps"),
    "join-filter": ("{% set s = 'x' * 4000000 %}{{ [s, s, s]|join }}", "items"),
    "join-method": ("{% set s = 'x' * 4000000 %}{{ ''.join([s, s, s]) }}", "items"),
    "expandtabs": ("{{ ('\t' * 1000000).expandtabs(100000) }}", "items"),
    "translate": ("{{ ('x' * 100000).translate({120: 'y' * 100000}) }}", "items"),
    "printf-star": ("{{ '%*d' % (1000000000, 1) }}", "items"),
    "format-filter-width": ("{{ '%2000000000d'|format(1) }}", "items"),
    "str-format-fields": ("{{ ('{0:4000000}' * 300).format(1) }}", "mib"),
    "bytes-times": ("{{ ('x'.encode() * 3000000000)|length }}", "items"),
    "to-bytes": ("{{ (1).to_bytes(3000000000, 'big')|length }}", "items"),
    "center": ("{{ 'x'.center(3000000000) }}", "items"),
    "concat-doubling": ("{% set ns = namespace(s='x') %}{% for i in range(40) %}{% set ns.s = ns.s ~ ns.s %}"
                        "{% endfor %}{{ ns.s|length }}", "items"),
    "shared-list-printed": (SHARED_TWICE + "{{ ns.a }}", "steps"),
    "shared-list-tojson": (SHARED_TWICE + "{{ ns.a|tojson }}", "steps"),
    "shared-lists-in-a-namespace": (SHARED_TWICE + "{{ ns }}", "steps"),
    "shared-lists-compared": (SHARED_TWICE + "{{ ns.a == ns.b }}", "steps"),
    "shared-lists-in": (SHARED_TWICE + "{{ ns.a in [ns.b] }}", "steps"),
    "shared-lists-sorted": (SHARED_TWICE + "{{ [ns.a, ns.b]|sort|length }}", "steps"),
    "strftime-format": ("{{ strftime_now('%c' * 1000000) }}", "items"),
    "nested-ranges": ("{% for a in range(100000) %}{% for b in range(100000) %}{% endfor %}{% endfor %}", "steps"),
    "nested-lists": ("{% set l = 'x' * 3000 %}{% for a in l %}{% for b in l %}{% for c in l %}{% endfor %}{% endfor %}"
                     "{% endfor %}", "steps"),
    "many-big-strings": ("{% set ns = namespace(l=[]) %}{% for i in range(1000) %}"
                         "{% set ns.l = ns.l + ['x' * 4000000] %}{% endfor %}", "mib"),
}
FAST = Limits(max_cpu_seconds=1.0, max_memory=64 << 20)


def render_error(src, backend, limits=FAST):
    with pytest.raises(TemplateError) as info:
        ChatTemplate(src, backend=backend, limits=limits).render()
    return info.value


@pytest.mark.unit
@pytest.mark.parametrize("backend", available_backends())
@pytest.mark.parametrize("name", sorted(PAYLOADS))
def test_each_payload_stops_fast_with_a_limit_error(name, backend):
    src, word = PAYLOADS[name]
    start = time.thread_time()
    err = render_error(src, backend)
    assert err.kind == "limit", err
    assert word in str(err).lower() or (word == "cpu" and "steps" in str(err)), err
    assert time.thread_time() - start < 5 * FAST.max_cpu_seconds


@pytest.mark.unit
@pytest.mark.parametrize("backend", available_backends())
def test_the_limit_errors_name_their_flags(backend):
    err = render_error(MACRO_TWICE, backend, Limits(max_cpu_seconds=0.2, max_steps=10 ** 9))
    assert "--chat-template-max-cpu-seconds" in str(err) and "0.2 s" in str(err)
    err = render_error(PAYLOADS["many-big-strings"][0], backend, Limits(max_memory=16 << 20))
    assert "--chat-template-max-memory-mib" in str(err) and "16 MiB" in str(err)


@pytest.mark.unit
@pytest.mark.parametrize("backend", available_backends())
def test_the_budget_is_per_render_and_per_thread(backend):
    """A render over budget fails alone: the next render of the same template, and renders in other
    threads meanwhile, have budgets of their own."""
    import threading

    loop = ChatTemplate("{% for i in range(n) %}{{ i }}{% endfor %}", backend=backend, limits=Limits(max_steps=5000))
    with pytest.raises(TemplateError):
        loop.render(n=6000)
    results = []
    threads = [threading.Thread(target=lambda: results.append(loop.render(n=2000))) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert len(results) == 4 and all(r.startswith("0123") for r in results)


PEAK_PROBE = r"""
import json, sys
from mtok.chat import ChatTemplate, Limits, TemplateError
def peak():
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("VmHWM:")) // 1024
base = peak()
src, backend = json.load(sys.stdin)
try:
    ChatTemplate(src, backend=backend, limits=Limits(max_cpu_seconds=2.0)).render()
    kind = "ok"
except TemplateError as exc:
    kind = exc.kind
print(json.dumps([kind, base, peak()]))
"""


@pytest.mark.unit
@pytest.mark.timeout(300)
@pytest.mark.parametrize("name", ["bytes-times", "to-bytes", "center", "printf-star", "join-method",
                                  "str-format-fields", "many-big-strings", "shared-list-tojson", "pow-of-pow",
                                  "wordwrap-4mb", "expandtabs", "translate"])
def test_peak_memory_stays_bounded(name):
    """Run in a child: its peak RSS grows by at most a few times the default memory budget (256 MiB),
    never towards the gigabytes the payload asked for."""
    for backend in available_backends():
        proc = subprocess.run([sys.executable, "-c", PEAK_PROBE], input=json.dumps([PAYLOADS[name][0], backend]),
                              capture_output=True, text=True, timeout=120, env={"PYTHONPATH": ROOT})
        assert proc.returncode == 0, proc.stderr
        kind, base, peak = json.loads(proc.stdout)
        assert kind == "limit", (backend, kind)
        assert peak - base < 600, f"{name} on {backend}: peak RSS grew by {peak - base} MiB"


def names_a_limit(message):
    """The CPU budget's flag, or the steps limit (whichever the macro reaches first on this machine)."""
    return "--chat-template-max-cpu-seconds" in message or "more than 1000000 steps" in message


def test_a_runaway_template_over_http_is_a_400_naming_the_flag(server_factory, tmp_path):
    """The finding's macro over a real server: while it renders, /health answers; then the request gets
    a 400 JSON error naming the flag, within about its budget, and the server goes on serving."""
    template = tmp_path / "runaway.jinja"
    template.write_text("{% if messages[0].content == 'stall' %}" + MACRO_TWICE + "{% endif %}ok")
    stall = {"model": "x", "max_tokens": 1, "messages": [{"role": "user", "content": "stall"}]}
    for backend in available_backends():
        srv = server_factory("--tokenizer-path", DEFAULT_TOKENIZER_DIR, "--chat-template", str(template),
                             "--chat-template-backend", backend, "--chat-template-max-cpu-seconds", "3")
        runaway = srv.conn()
        start = time.monotonic()
        runaway.request("POST", "/v1/chat/completions", body=json.dumps(stall),
                        headers={"Content-Type": "application/json"})
        assert srv.get("/health")[0] == 200
        assert not select.select([runaway.sock], [], [], 0)[0], "/health was answered only after the render"
        response = runaway.getresponse()
        answer = json.loads(response.read())
        assert response.status == 400 and names_a_limit(answer["error"]["message"]), answer
        assert time.monotonic() - start < 30
        status, answer = srv.post("/tokenize", {"messages": stall["messages"]})
        assert status == 400 and names_a_limit(answer["error"]["message"]), answer
        status, answer = srv.post("/v1/chat/completions", {"model": "x", "max_tokens": 1,
                                                           "messages": [{"role": "user", "content": "hi"}]})
        assert status == 200, answer
