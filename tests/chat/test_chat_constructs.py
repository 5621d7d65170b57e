"""Each Jinja construct, mtok's engine against jinja2 (transformers' environment).

One template per line of ``CONSTRUCTS`` (values, filters, tests, string/dict/list
methods, operators, loops and ``loop``, scoping, namespace, macros, ``call``,
``filter``/``set`` blocks, ``with``, ``generation``, ``raw``, whitespace control, how
values print); ``ERRORS`` must raise in both; ``WHITESPACE`` checks trim_blocks and
lstrip_blocks on multi-line templates.  Skipped without jinja2.
"""

from __future__ import annotations

import pytest

from support import import_real

import_real("jinja2", reason="jinja2 not installed")

from mtok.chat import ChatTemplate, TemplateError  # noqa: E402

pytestmark = [pytest.mark.fast, pytest.mark.unit]

CONTEXT = dict(s="Hello World", n=5, f=2.5, l=[3, 1, 2], d={"b": 2, "a": 1, "items": 7}, none=None, t=True,
               msgs=[{"role": "user", "content": "hi"}, {"role": "assistant", "content": "yo"}], e="", u8="héllo")

CONSTRUCTS = [
    '{{ s }}|{{ n }}|{{ f }}|{{ l }}|{{ d }}|{{ none }}|{{ t }}|{{ undefined_x }}',
    "{{ s|upper }}{{ s|lower }}{{ s|title }}{{ 'hello wORLD'|capitalize }}{{ '  x  '|trim }}{{ 'xxaxx'|trim('x') }}",
    '{{ l|length }}{{ s|count }}{{ l|first }}{{ l|last }}{{ []|first }}{{ l|sort }}{{ l|sort(reverse=true) }}{{ l|reverse|list }}{{ s|reverse }}',
    "{{ d|items|list }}{{ d|dictsort }}{{ d.items() }}{{ d.items }}{{ d['items'] }}{{ d.keys()|list }}{{ d.values()|list }}{{ d.get('a') }}{{ d.get('z', 9) }}",
    "{{ l|join(',') }}{{ msgs|map(attribute='role')|join('/') }}{{ msgs|selectattr('role','equalto','user')|list }}{{ msgs|rejectattr('role','eq','user')|list|length }}",
    "{{ l|select('odd')|list }}{{ l|reject('even')|list }}{{ l|map('string')|join }}{{ [1,1,2,'a','A']|unique|list }}{{ l|sum }}{{ l|min }}{{ l|max }}{{ []|max }}",
    "{{ n|string ~ 'x' }}{{ '3'|int + 1 }}{{ '3.7'|int }}{{ 'x'|int }}{{ '2.5'|float }}{{ f|round }}{{ 2.567|round(2) }}{{ 2.5|round(0,'floor') }}{{ -3|abs }}",
    "{{ x|default('dflt') }}{{ ''|default('dflt', true) }}{{ none|d('z') }}{{ none|default('z') }}",
    '{{ "%s-%d"|format(\'a\', 3) }}{{ "{}+{}".format(1, \'b\') }}{{ "{0.role}".format(msgs[0]) }}{{ "{a}".format_map({\'a\': 1}) }}',
    "{{ [1,2,3,4,5]|batch(2)|list }}{{ [1,2,3]|batch(2, 'x')|list }}{{ 'a b  c'|wordcount }}{{ 'ab'|center(6) }}|{{ 'foo bar baz qux quux'|truncate(9) }}|{{ 'foo bar baz qux'|truncate(9, True) }}",
    "{{ 'a\\nb\\n\\nc'|indent }}|{{ 'a\\nb'|indent(2, true) }}|{{ 'a\\n\\nb'|indent('>', blank=true) }}",
    "{{ d|tojson }}{{ msgs|tojson(indent=2) }}{{ u8|tojson }}{{ {'z':1,'a':[1,2]}|tojson(sort_keys=true, separators=(',',':')) }}",
    "{{ 1 + 2 }}{{ 7 // 2 }}{{ 7 / 2 }}{{ 7 % 3 }}{{ 2 ** 10 }}{{ 'a' ~ 1 ~ none }}{{ 'ab' * 3 }}{{ [1] + [2] }}{{ -n }}{{ 1 if t }}{{ 1 if not t }}{{ 1 if none else 2 }}",
    "{{ 'x' in s }}{{ 'H' in s }}{{ 3 in l }}{{ 4 not in l }}{{ 'a' in d }}{{ 1 < 2 < 3 }}{{ 1 == 1.0 }}{{ n != 5 }}{{ t and n }}{{ none or 'z' }}{{ not t }}",
    "{{ s[0] }}{{ s[-1] }}{{ s[1:3] }}{{ s[::-1] }}{{ l[5] }}{{ l[1:] }}{{ msgs[0].role }}{{ msgs[0]['content'] }}{{ msgs[-1].content }}{{ d.zz }}",
    "{{ s.strip() }}{{ ' a '.lstrip() }}{{ ' a '.rstrip() }}|{{ s.split() }}{{ 'a,b,c'.split(',') }}{{ 'a,b,c'.rsplit(',', 1) }}{{ s.startswith('He') }}{{ s.endswith('x') }}{{ s.replace('l', 'L') }}{{ s.upper() }}{{ s.lower() }}{{ s.title() }}{{ s.find('o') }}{{ s.count('l') }}{{ 'a\\nb'.splitlines() }}",
    '{{ l.index(2) }}{{ l.count(1) }}{{ l.append }}{{ msgs|length }}',
    '{% if n is defined %}A{% endif %}{% if zz is undefined %}B{% endif %}{% if none is none %}C{% endif %}{% if s is string %}D{% endif %}{% if d is mapping %}E{% endif %}{% if l is iterable %}F{% endif %}{% if l is sequence %}G{% endif %}{% if n is number %}H{% endif %}{% if n is integer %}I{% endif %}{% if f is float %}J{% endif %}{% if t is boolean %}K{% endif %}{% if t is true %}L{% endif %}{% if 1 is false %}M{% endif %}{% if 2 is in l %}N{% endif %}{% if n is eq 5 %}O{% endif %}{% if n is ne 5 %}P{% endif %}{% if n is lt 9 %}Q{% endif %}{% if n is gt 9 %}R{% endif %}{% if n is odd %}S{% endif %}{% if n is even %}T{% endif %}{% if 9 is divisibleby 3 %}U{% endif %}{% if raise_exception is callable %}V{% endif %}{% if s is not string %}X{% endif %}',
    "{% for x in l %}{{ loop.index }}{{ loop.index0 }}{{ loop.first }}{{ loop.last }}{{ loop.length }}{{ loop.revindex }}{{ loop.revindex0 }}{{ loop.previtem }}{{ loop.nextitem }}{{ loop.cycle('a','b') }}{{ loop.changed(x > 1) }}{% endfor %}",
    '{% for x in l if x > 1 %}{{ x }}{{ loop.length }}{% else %}none{% endfor %}{% for x in [] %}{{ x }}{% else %}empty{% endfor %}',
    "{% for k, v in d.items() %}{{ k }}={{ v }};{% endfor %}{% for k in d %}{{ k }}{% endfor %}{% for c in 'abc' %}{{ c }}{% endfor %}",
    '{% for x in l %}{% if x == 1 %}{% continue %}{% endif %}{% if x == 2 %}{% break %}{% endif %}{{ x }}{% endfor %}',
    '{% set a = 1 %}{% for x in l %}{% set a = a + x %}{{ a }}{% endfor %}{{ a }}',
    "{% set ns = namespace(a=0, b='') %}{% for x in l %}{% set ns.a = ns.a + x %}{% endfor %}{{ ns.a }}{{ ns }}",
    "{% macro m(a, b=2, c='x') %}[{{ a }}{{ b }}{{ c }}]{% endmacro %}{{ m(1) }}{{ m(1, 3) }}{{ m(1, c='y') }}{{ m() }}",
    '{% macro r(n) %}{% if n > 0 %}{{ n }}{{ r(n - 1) }}{% endif %}{% endmacro %}{{ r(3) }}',
    '{% macro w() %}<{{ caller() }}>{% endmacro %}{% call w() %}inner{% endcall %}',
    '{% macro w2(x) %}<{{ caller(x * 2) }}>{% endmacro %}{% call(y) w2(4) %}got {{ y }}{% endcall %}',
    '{% filter upper %}abc{{ s }}{% endfilter %}{% set blk %}B{{ n }}{% endset %}{{ blk }}{% set blk2 | lower %}UP{% endset %}{{ blk2 }}',
    '{% with q = 5, r = 6 %}{{ q + r }}{% endwith %}{{ q }}',
    '{% generation %}gen {{ s }}{% endgeneration %}',
    '{% raw %}{{ not parsed }}{% endraw %}{# comment #}after',
    '{{ "tab\\there" }}{{ \'quote\\\'s\' }}{{ "uni\\u00e9" }}{{ \'nl\\\\n\' }}',
    '  {%- if t %}   stripped   {%- endif %}  ',
    "{{- '  left' }}  {{ 'right' -}}   end",
    '{% set x, y = 1, 2 %}{{ x }}{{ y }}{% set z = (1, 2) %}{{ z }}{{ (1,) }}{{ () }}',
    '{{ range(3)|list }}{{ range(1, 10, 3)|list }}{{ dict(a=1) }}{{ namespace(x=1).x }}',
    "{{ [1, 2, 3][1] }}{{ {'a': 1}['a'] }}{{ {'a': 1}.a }}{{ l|list|count }}{{ 1.5e3 }}{{ 1_000 }}{{ 0x1F }}",
    '{{ s|replace(\'o\', \'0\', 1) }}{{ s|e }}{{ \'<a href="x">\'|e }}{{ \'<b>\'|safe }}{{ l|string }}{{ none|string }}{{ none|upper }}',
    "{{ msgs|groupby('role')|list }}{{ l|slice(2)|list }}{{ [3,1]|sort|first }}{{ ['b','A','a']|sort }}{{ ['b','A','a']|sort(case_sensitive=true) }}",
    "{{ 10 is divisibleby(5) }}{{ none is not none }}{{ 'abc' is lower }}{{ 'ABC' is upper }}",
    "{{ undefined_x|length }}{{ undefined_x|list }}{{ undefined_x|join }}{{ undefined_x|upper }}{{ undefined_x|string }}{{ undefined_x is defined }}{{ undefined_x ~ 'a' }}{% for q in undefined_x %}no{% endfor %}",
    "{{ undefined_x == undefined_y }}{{ undefined_x != 1 }}{{ 'a' in undefined_x }}{{ undefined_x in l }}{{ not undefined_x }}{{ undefined_x or 'fb' }}{{ undefined_x|default }}",
    "{{ d.zz|default('dz') }}{{ msgs[5]|default('m5') }}{{ msgs[0].nope }}{{ ''.join(['a','b']) }}{{ ','.join(l|map('string')) }}",
    '{{ [1,2,3]|map(\'abs\')|list }}{{ {\'x\':[1,2]}|tojson }}{{ [none, true, false]|tojson }}{{ 1.0|tojson }}{{ \'é"\\n\'|tojson }}{{ \'é\'|tojson(ensure_ascii=true) }}',
    '{{ "a" "b" }}{{ [\'a\',\'b\']|join(\', \') }}{{ l|join(attribute=none) }}{{ -2 ** 2 }}{{ (-2) ** 2 }}{{ 2 * 3 + 1 }}{{ 1 + 2 * 3 }}{{ 10 - 2 - 3 }}{{ 2 ** 3 ** 2 }}',
    "{{ 'a' ~ 'b'|upper }}{{ ('a' ~ 'b')|upper }}{{ -1|abs }}{{ l|length > 2 }}{{ not l|length }}{{ 'x' if l|length > 5 else 'y' }}",
    "{{ cycler('a','b').next() }}{% set j = joiner('+') %}{% for x in l %}{{ j() }}{{ x }}{% endfor %}",
    '{{ loop }}{{ n.real }}{{ f.is_integer() }}{{ s.isupper() }}{{ s.encode }}',
    '{% for m in msgs %}{% for c in m.content %}{{ loop.index }}{{ c }}{% endfor %}{{ loop.index }}{% endfor %}',
    "{% for m in msgs %}{% set outer = loop %}{% for c in 'ab' %}{{ outer.index }}{{ loop.index }}{% endfor %}{% endfor %}",
    "{% if t %}{% set iv = 'in-if' %}{% endif %}{{ iv }}{% for x in l %}{% if x == 3 %}{% set w = 'w' %}{% endif %}{{ w }}{% endfor %}",
    '{% for x in l %}{{ pre }}{% set pre = x %}{% endfor %}{{ pre }}',
    "{% for x in l %}{{ later }}{% endfor %}{% set later = 'L' %}{{ later }}",
    "{{ t|tojson }}{{ n|tojson }}{{ d|dictsort(false, 'value') }}{{ d|dictsort(reverse=true) }}",
    '{{ 1 }}{# c #}{{ 2 }}',
    '{%+ if t %}plus{% endif %}',
    "{{ l|sum(start=10) }}{{ msgs|map(attribute='role')|unique|list }}{{ msgs|map(attribute='missing', default='dm')|list }}",
    "{{ 'abc'|list }}{{ (1,2)|list }}{{ d|list }}{{ 3|string|length }}",
]

ERRORS = [
    "{{ undefined_x.attr }}", "{{ undefined_x['k'] }}", "{{ undefined_x + 1 }}", "{{ undefined_x() }}",
    "{{ undefined_x < 1 }}", "{{ undefined_x|int }}", "{{ undefined_x|tojson }}", "{{ msgs[9].role }}",
    "{{ raise_exception('boom') }}", "{{ 1 / 0 }}", "{{ 'a' + 1 }}", "{{ l.append(4) }}", "{{ d.update({}) }}",
    "{{ d.pop('a') }}", "{% for x in none %}{% endfor %}", "{% for x in 5 %}{% endfor %}", "{{ s.__class__.__mro__ }}",
    "{{ ''.__class__.__subclasses__() }}", "{{ none|length }}",
    "{% set ns = namespace() %}{% set ns._x = 1 %}", "{{ namespace(_y=1) }}", "{% set x = 1 %}{% set x.y = 2 %}",
    "{{ range(10**6)|list }}", "{{ l|batch }}", "{{ 5|nofilter }}", "{% if 5 is notatest %}{% endif %}",
    "{% if %}", "{% for %}", "{% endfor %}", "{{ }}", "{{ 1 +  }}", "{% if x %}unclosed", "{% for x in l %}",
    "{{ 'unterminated }}", "{# unclosed comment", "{% raw %}no end", "{% unknown_tag %}", "{{ (1 }}", "{{ 1) }}",
    "{% macro m(a=1, b) %}{% endmacro %}", "{% macro m(a) %}{% endmacro %}{{ m(1, 2) }}",
    "{% macro m(a) %}{% endmacro %}{{ m(b=2) }}", "{% break %}", "{% set 1 = 2 %}", "{{ x is defined is defined }}",
    "{{ l|truncate(1) }}", "{{ d|dictsort(by='x') }}", "{{ 1|round(0, 'x') }}", "{% extends 'base' %}",
    "{% include 'x' %}", "{% set x %}unclosed", "{{ 'a'|format(1, x=2) }}", "{{ d|items|list }}{{ 5|items|list }}",
    "{{ cycler() }}", "{{ loop.cycle() }}{% for x in l %}{{ loop.cycle() }}{% endfor %}", "{{ {}['a'].b }}",
    "{{ 2 ** 100000 }}", "{{ 'x' * 10**8 }}",
]

# Scoping (set in loops, ifs, macros, with, blocks), macro arguments, caller, and filter corner cases;
# rendered without a context.  Some raise in jinja2: then both must.
SCOPING = [
 "{% for x in [] %}{% else %}[{{ loop }}]{% endfor %}",
 "{% for y in [1] %}{% for x in [] %}{% else %}[{{ loop.index }}]{% endfor %}{% endfor %}",
 "{% for loop in [1] %}{% endfor %}", "{% for x in [1] %}{% set loop = 1 %}{% endfor %}",
 "{% for x in [1] %}{% if 1 %}{% with loop = 2 %}{{ loop }}{% endwith %}{% endif %}{% endfor %}",
 "{% for y in [5,6] %}{% for x in [1,2] if loop.index > 1 %}{{ x }}{{ y }}{% endfor %}{% endfor %}",
 "{% for x in [1,2] if loop is defined %}{{ x }}{% endfor %}",
 "{% for x in [1] %}{% macro m() %}{% set loop = 3 %}{% endmacro %}{% endfor %}",
 "{{ none[1:] }}", "{% set a = none[1:] %}", "{% set a = none[1:] ~ 'x' %}{{ a }}", "{{ (not none)[1:] }}",
 "{{ ('abc'|upper)[1:] }}", "{{ ([1,2]|map('string'))[1:] }}", "{{ (1 if true)[1:] }}", "{{ [none[1:]] }}",
 "{% if none[1:] is defined %}D{% endif %}", "{{ none[1:], 2 }}", "{% for q in none[1:] %}{% endfor %}ok",
 "{% macro m() %}{{ late }}{% endmacro %}{% set late = 'L' %}{{ m() }}",
 "{% set late = 'E' %}{% macro m() %}{{ late }}{% endmacro %}{% set late = 'L' %}{{ m() }}",
 "{% macro m() %}{{ x }}{% set x = 2 %}{{ x }}{% endmacro %}{% set x = 1 %}{{ m() }}{{ x }}",
 "{% for i in [1,2] %}{% macro m() %}{{ i }}{% endmacro %}{{ m() }}{% endfor %}",
 "{% if true %}{% set y = 1 %}{% else %}{% set y = 2 %}{% endif %}{{ y }}",
 "{{ y }}{% if false %}{% set y = 1 %}{% endif %}{{ y }}",
 "{% for i in [1] %}{% if false %}{% set y = 1 %}{% endif %}{{ y }}{% endfor %}",
 "{% set y = 0 %}{% for i in [1] %}{% if false %}{% set y = 1 %}{% endif %}{{ y }}{% endfor %}",
 "{% for i in [1,2] %}{% for j in [3] %}{% set i = j %}{{ i }}{% endfor %}{{ i }}{% endfor %}",
 "{% with a = 1 %}{% set b = a + 1 %}{{ b }}{% endwith %}{{ b }}{{ a }}",
 "{% set x = 1 %}{% with x = x + 1 %}{{ x }}{% endwith %}{{ x }}",
 "{% macro m(a, b=a) %}{{ a }}{{ b }}{% endmacro %}{{ m(1) }}{{ m(1, 2) }}{{ m(b=3, a=4) }}",
 "{% macro m() %}{{ varargs }}{{ kwargs }}{% endmacro %}{{ m(1, 2, x=3) }}",
 "{% macro m(a) %}{{ caller is defined }}{% endmacro %}{{ m(1) }}",
 "{% macro m() %}{{ caller() if caller is defined else 'nc' }}{% endmacro %}{{ m() }}{% call m() %}C{% endcall %}",
 "{% set x %}{% set inner = 1 %}{{ inner }}{% endset %}{{ x }}{{ inner }}",
 "{% for x in [1,2,3] if x > 1 %}{{ x }}{{ loop.index }}/{{ loop.length }}{% endfor %}",
 "{% for x in [1,2,3] %}{% set x = x * 10 %}{{ x }}{% endfor %}",
 "{% set loop = 5 %}{% for x in [1] %}{{ loop.index }}{% endfor %}{{ loop }}",
 "{% for x in [1,2] %}{{ loop.changed(x) }}{{ loop.changed(1) }}{% endfor %}",
 "{% for x in [] %}{% else %}{{ x }}{% set z = 1 %}{% endfor %}{{ z }}",
 "{% for x in [1] %}{% endfor %}{{ x }}",
 "{% set a, b = [1, 2] %}{{ a }}{{ b }}{% set (c, d) = 'xy' %}{{ c }}{{ d }}",
 "{{ foo(1) if foo is defined else 'nf' }}",
 "{% filter upper %}{% set q = 1 %}{{ q }}a{% endfilter %}{{ q }}",
 "{% set items = [1,2] %}{% for i in items %}{{ i }}{% endfor %}{{ items|length }}",
 "{{ x }}{% set x = 5 %}{{ x }}",
 "{% for m in [1,2] %}{{ x }}{% set x = m %}{{ x }}{% endfor %}{{ x }}",
 "{% macro a() %}A{{ b() }}{% endmacro %}{% macro b() %}B{% endmacro %}{{ a() }}",
 "{% set ns = namespace(a=1) %}{% macro inc() %}{% set ns.a = ns.a + 1 %}{% endmacro %}{{ inc() }}{{ inc() }}{{ ns.a }}",
 "{{ dict(a=1, b=2)|dictsort }}{{ dict.fromkeys(['a'], 0) }}{{ namespace(dict(a=1), b=2) }}",
 "{% macro m(x) %}{{ x }}{% endmacro %}{{ m(1, 2) }}",
 "{{ m }}{% macro m() %}{% endmacro %}",
 "{% set f = 'abc'.upper %}{{ f() }}",
 "{{ 'a' if false }}|{{ ('a' if false) is defined }}",
 "{{ [1,2,3]|map('int')|list }}{{ ['a','b']|map('upper')|join }}{{ [1,None]|select('none')|list }}",
 "{{ ''|first }}{{ 'abc'|first }}{{ 'abc'|last }}{{ {'a':1}|first }}{{ {'b':1,'a':2}|last }}",
 "{{ 3.0|int }}{{ '0x1A'|int(0, 16) }}{{ '0b11'|int(base=2) }}{{ '1e3'|int }}{{ True|int }}",
 "{{ 1|float }}{{ 'nan'|float }}{{ 'inf'|float }}{{ none|float }}",
 "{{ 2.5|round }}{{ 3.5|round }}{{ -2.5|round }}{{ 2.675|round(2) }}{{ 5|round }}{{ 5|round(1, 'ceil') }}",
 "{{ 'abc'|center(2) }}{{ 'a'|center(4) }}|",
 "{{ [[1,2],[3]]|sum(start=[]) }}{{ [1.5, 2]|sum }}",
 "{{ {'a': 1, 'B': 2, 'c': 0}|dictsort(true) }}{{ {'a': 1, 'B': 2}|dictsort }}",
 "{{ ['b', 'A', 'a']|unique|list }}{{ ['b', 'A', 'a']|unique(true)|list }}{{ ['B','a']|min }}{{ ['B','a']|max(case_sensitive=true) }}",
 "{{ 'Hello World foo'|truncate(12) }}|{{ 'Hello World foo'|truncate(12, leeway=0) }}|{{ 'Hello'|truncate(3, end='') }}",
 "{{ 'one two'|wordwrap(4) }}|{{ 'a-b c'|title }}|{{ \"o'neil mc(donald)\"|title }}",
 "{{ 'x'|indent(first=true) }}|{{ ''|indent }}|{{ 'a\n'|indent }}|{{ 'a\r\nb'|indent(1) }}",
]


# Recursive loops: loop(children) renders the body one level deeper.
TREE = [{"name": "a", "children": [{"name": "b", "children": [{"name": "c"}]}, {"name": "d"}]},
        {"name": "e", "children": []}]
RECURSIVE = [
    "{% for item in tree recursive %}[{{ loop.depth }}{{ item.name }}{{ loop.index }}/{{ loop.length }}"
    "{% if item.children %}<{{ loop(item.children) }}>{% endif %}]{% endfor %}",
    "{% for item in tree if item.name != 'e' recursive %}{{ item.name }}{{ loop(item.children|default([])) }}"
    "{% else %}E{% endfor %}",
    "{% set x = 1 %}{% for item in tree recursive %}{% set x = x + 1 %}{{ x }}{{ loop(item.children or []) }}"
    "{% endfor %}{{ x }}",
    "{% macro m(t) %}{% for i in t recursive %}{{ i.name }}{{ loop(i.children or []) }}{% endfor %}{% endmacro %}"
    "{{ m(tree) }}",
    "{% for item in tree recursive %}{% for c in item.children or [] %}{{ loop.index }}{% endfor %}"
    "{{ loop(item.children or []) }}{% endfor %}",
    "{% for i in [1] recursive %}{{ loop(5) }}{% endfor %}",
    "{% for i in [1] %}{{ loop([2]) }}{% endfor %}",
    "{% for i in tree recursive %}{{ loop(tree) }}{% endfor %}",
]


@pytest.mark.parametrize("src", RECURSIVE)
def test_recursive_loops_as_jinja2(src):
    def run(backend):
        try:
            return ChatTemplate(src, backend=backend).render(tree=TREE)
        except TemplateError:
            return ("error",)

    assert run("python") == run("jinja2")


# Reaching internals gives an undefined (printed as '') or an error, never the internal.
SANDBOX = [
    "{{ s.__class__ }}", "{{ s.format.__globals__ }}", "{{ '{0.__class__}'.format(s) }}", "{{ l.__len__ }}",
    "{{ d._x }}", "{{ msgs[0].__class__ }}", "{{ (s|attr('__class__')) }}", "{{ namespace(a=1).__dict__ }}",
    "{{ loop.__class__ }}", "{{ raise_exception.__globals__ }}", "{{ cycler(1).__init__ }}", "{{ l.pop }}",
]

WHITESPACE = [
    "a\n{% if t %}\nb\n{% endif %}\nc\n",
    "  {% if t %}\n  x\n  {% endif %}\n",
    "\t {% for x in l %}\n{{ x }}\n\t {% endfor %}\n",
    "{% if t -%}\n   a   \n{%- endif %}",
    "x  {{- ' y ' -}}  z\n\n",
    "  {{ 'var not lstripped' }}\n",
    "  {#- c -#}  \n a {# c #}\n b\n",
    "line\r\nwindows\r\n{% if t %}\r\nx\r\n{% endif %}\r\n",
    "{% raw %}  {{ x }}\n{% endraw %}\n tail",
    "  {%+ if t %}keep{% endif %}\n",
    "{%- if t %}\n\n  a\n{% endif -%}\n\n b",
    "{% for m in msgs %}\n    {{- m.role }}\n    {%- if not loop.last %}, {% endif %}\n{% endfor %}",
    "a {%- set x = 1 -%} b",
    "{% macro m() -%}\n  x\n{%- endmacro %}[{{ m() }}]",
    "trailing\n\n",
    "\n",
    "",
]


def render(src, backend):
    try:
        return ChatTemplate(src, backend=backend).render(**CONTEXT)
    except TemplateError as exc:
        assert exc.message is not None
        return ("error",)


@pytest.mark.parametrize("src", CONSTRUCTS)
def test_construct_renders_as_jinja2_does(src):
    expected = render(src, "jinja2")
    assert expected != ("error",), "these templates are meant to render"
    assert render(src, "python") == expected


@pytest.mark.parametrize("src", ERRORS)
def test_error_where_jinja2_raises(src):
    assert render(src, "jinja2") == ("error",), "jinja2 was expected to raise"
    assert render(src, "python") == ("error",)


@pytest.mark.parametrize("src", SCOPING)
def test_scoping_and_corner_cases_as_jinja2(src):
    try:
        expected = ChatTemplate(src, backend="jinja2").render()
    except TemplateError:
        expected = ("error",)
    try:
        got = ChatTemplate(src, backend="python").render()
    except TemplateError:
        got = ("error",)
    assert got == expected


@pytest.mark.parametrize("src", SANDBOX)
def test_sandbox_hides_internals_as_jinja2_does(src):
    assert render(src, "python") == render(src, "jinja2")


@pytest.mark.parametrize("src", WHITESPACE)
def test_whitespace_control_as_jinja2(src):
    assert render(src, "python") == render(src, "jinja2")


# Python keywords as keyword arguments (issue 23, finding 9): generated Python cannot spell them ``class=``.
KEYWORD_ARGUMENTS = [
    "{{ dict(class=1) }}",
    "{{ dict(class=1, a=2, if='x') }}",
    "{{ dict(None=1, True=2, lambda=3, from=4, import=5) }}",
    "{{ dict(*[[('x', 1)]], class=1, **{'b': 2}) }}",
    "{{ namespace(class='c').class }}",
    "{% macro m(class, if=3) %}{{ class }}{{ if }}{{ caller() }}{% endmacro %}{% call m(class=1, if=2) %}c{% endcall %}",
    "{% macro m() %}{{ kwargs }}{% endmacro %}{{ m(def=1, return=2) }}",
    "{{ 'a'|replace('a', 'b', count=1) }}{{ [3, 1]|sort(reverse=true) }}",
]


@pytest.mark.parametrize("src", KEYWORD_ARGUMENTS)
def test_any_identifier_is_a_keyword_argument_as_in_jinja2(src):
    expected = render(src, "jinja2")
    assert expected != ("error",)
    assert render(src, "python") == expected
