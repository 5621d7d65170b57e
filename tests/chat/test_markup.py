"""``Markup`` in mtok's Jinja engine (issue 25): ``|safe`` and ``|escape`` return
one, as in jinja2, and what a template builds from it is what jinja2 builds in
transformers' environment.  Each case renders under the ``python`` backend and
under jinja2 (the ``jinja2`` backend); the render budget holds for Markup too."""

from __future__ import annotations

import pytest

from mtok.chat import ChatTemplate, TemplateError
from mtok.chat.markup import Markup, escape, escaped_size
from support import import_real

pytestmark = [pytest.mark.fast, pytest.mark.unit]

CASES = {
    "safe_plus": '{{ "x"|safe + "<b>" }}',
    "plus_safe": '{{ "<b>" + "x"|safe }}',
    "escape_tilde": '{{ ("<a>"|e) ~ "<b>" }}',
    "safe_mod": '{{ "%s"|safe % "<i>" }}',
    "safe_mod_tuple": '{{ "%s-%d-%r"|safe % ("<i>", 3, "<") }}',
    "safe_mod_mapping": '{{ "%(a)s"|safe % {"a": "<&>"} }}',
    "markup_join": '{{ ("<p>"|safe).join(["<a>", "b&", "<c>"|safe]) }}',
    "join_filter_markup_sep": '{{ ["<a>", "b"]|join("<p>"|safe) }}',
    "format_method": '{{ ("{}|{x}"|safe).format("<", x="&") }}',
    "format_filter": '{{ "%s"|safe|format("<q>") }}',
    "escape_of_markup": '{{ "<x>"|e|e }} {{ "<x>"|safe|e }}',
    "forceescape": '{{ "<x>"|e|forceescape }} {{ "<x>"|forceescape }}',
    "string_keeps_markup": '{{ ("<"|safe|string) + "<" }} {{ ("<"|string) + "<" }}',
    "upper_keeps_markup": '{{ ("<a>"|safe|upper) + "<" }} {{ ("<a>"|safe|trim) + "<" }}',
    "method_keeps_markup": '{{ ("<a>"|safe).upper() + "<" }} {{ ("<a> b"|safe).split()[0] + "<" }}',
    "slice_keeps_markup": '{{ ("<a>"|safe)[1:] + "<" }} {{ ("<a>"|safe)[0] + ">" }}',
    "replace_method": '{{ ("a-b"|safe).replace("-", "<") }} {{ ("a-b"|safe)|replace("-", "<") }}',
    "center_method": '{{ ("<"|safe).center(5, "*") }} {{ ("<"|safe).center(5) + "<" }}',
    "striptags": '{{ "<b>bold</b>  &amp;\n <!-- c --> x"|striptags }} {{ ("&lt;t&gt;"|safe).unescape() }}',
    "striptags_method": '{{ ("<i>x</i> &lt;"|safe).striptags() + "<" }}',
    "escaped_test": '{{ "x"|safe is escaped }} {{ "x" is escaped }} {{ "x"|e is escaped }}',
    "set_and_grow": '{% set s = "<"|safe %}{% for w in ["<a>", "&"] %}{% set s = s + w %}{% endfor %}{{ s }}',
    "namespace_grow": ('{% set ns = namespace(t=""|safe) %}{% for w in ["<", ">"] %}{% set ns.t = ns.t + w %}'
                       '{% endfor %}{{ ns.t }}'),
    "macro_result_is_plain": '{% macro m(x) %}<{{ x }}>{% endmacro %}{{ m("<"|safe) + "<" }}',
    "filter_of_markup_in_macro": '{% macro m(x) %}{{ x|safe + "&" }}{% endmacro %}{{ m("<") }}',
    "tojson_of_markup": '{{ ("<"|safe)|tojson }} {{ "a"|safe + {"k": "<v>"}|tojson }}',
    "markup_times": '{{ ("<"|safe) * 2 + "<" }}',
    "markup_in_list": '{{ ["<"|safe, "<"] }} {{ ("<"|safe) ~ ("<"|safe) }}',
    "markup_compare": '{{ ("<"|safe) == "<" }} {{ "<" in ("a<"|safe) }} {{ ("ab"|safe)|length }}',
    "markup_indent": '{{ ("a\n<b>"|safe)|indent(2, true) + "<" }}',
    "markup_truncate": '{{ ("<a> b c d e f g"|safe)|truncate(9, false, "<", 0) }}',
    "markup_reverse": '{{ ("<ab"|safe)|reverse + "<" }} {{ ("<ab"|safe)|first + "<" }}',
    "markup_title": '{{ ("<a b"|safe)|title + "<" }} {{ ("<a b"|safe)|capitalize + "<" }}',
    "markup_loop": '{% for c in "a<"|safe %}{{ c + "<" }}{% endfor %}',
    "none_and_undefined": '{{ none|safe + "<" }}|{{ missing|safe + "<" }}|{{ missing|e }}|{{ 5|e + "<" }}',
}


def render(source, backend, **context):
    try:
        return ChatTemplate(source, backend=backend).render(**context)
    except TemplateError as e:
        return ("error", e.kind)


def transformers_render(source, **context):
    """jinja2 itself, in the environment transformers renders chat templates in."""
    from mtok.chat.jinja2_backend import make_environment

    return make_environment(budgeted=False).from_string(source).render(**context)


@pytest.mark.parametrize("name", sorted(CASES))
def test_markup_renders_as_jinja2_does(name):
    import_real("jinja2", reason="jinja2 not installed")
    want = transformers_render(CASES[name])
    assert render(CASES[name], "python") == want
    assert render(CASES[name], "jinja2") == want


# meetkai's functionary-medium-v3.1 describes each tool this way: the literal
# pieces are Markup, so the name, the description and the JSON are escaped.
FUNCTIONARY_LIKE = (
    "{%- for t in tools %}"
    "{{ \"Use the function '\"|safe + t['function']['name'] + \"' to '\"|safe + t['function']['description']"
    " + \"'\\n\"|safe + t['function'] | tojson() }}\n"
    "{%- endfor %}"
)
TOOLS = [{"type": "function", "function": {"name": "get_weather", "description": "Say it's <b>hot</b> & \"dry\"",
                                             "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}}]


def test_a_functionary_style_tool_list_renders_as_jinja2_does():
    rendered = render(FUNCTIONARY_LIKE, "python", tools=TOOLS)
    assert rendered.startswith("Use the function 'get_weather' to 'Say it&#39;s &lt;b&gt;hot&lt;/b&gt; &amp; "
                               "&#34;dry&#34;'\n{&#34;name&#34;: &#34;get_weather&#34;"), rendered
    import_real("jinja2", reason="jinja2 not installed")
    assert rendered == transformers_render(FUNCTIONARY_LIKE, tools=TOOLS) == render(FUNCTIONARY_LIKE, "jinja2",
                                                                                    tools=TOOLS)


def test_markup_is_a_str_with_markupsafe_semantics():
    m = Markup("<b>")
    assert isinstance(m, str) and m.__html__() is m and repr(m) == "Markup('<b>')"
    assert m + "<" == "<b>&lt;" and type(m + "<") is Markup and "<" + m == "&lt;<b>"
    assert escape(m) == "<b>" and escape("<'\"&>") == "&lt;&#39;&#34;&amp;&gt;"
    assert Markup("%s") % "<" == "&lt;" and Markup("{0}").format("<") == "&lt;"
    assert escaped_size("<'\"&>x") == len(escape("<'\"&>x"))
    assert Markup("a<!-- <b> -->b <i>c</i>  &amp;").striptags() == "ab c &"


@pytest.mark.parametrize("source", [
    '{{ ("x"|safe).center(2 ** 40) }}',
    '{{ ("x"|safe).ljust(2 ** 40) }}',
    '{{ ("x"|safe) * 2 ** 40 }}',
    '{{ ("<"|safe).join(["<" * 1000] * 100000) }}',
    '{% set s = "&" * 300000 %}{{ ("x"|safe) + s + s + s + s }}',
    '{% set s = "&" * 900000 %}{{ s|e }}',
    '{% set s = "&" * 500000 %}{{ s|e|forceescape }}',
    '{% set s = "&" * 300000 %}{{ ("%s%s%s%s"|safe) % (s, s, s, s) }}',
    '{% set s = "&" * 300000 %}{{ ("{}{}{}{}"|safe).format(s, s, s, s) }}',
    '{% set m = ("x" * 100000)|safe %}{{ [m] * 100000 }}',
    '{% set m = ("x" * 100000)|safe %}{{ ([m] * 100000)|tojson }}',
    '{% set s = "&" * 300000 %}{{ ("a"|safe).replace("a", s + s + s + s) }}',
])
def test_the_render_budget_holds_for_markup(source):
    """A Markup is a str: what it would build is charged before it is built
    (the default per-value limit is 4 Mi characters; 1,200,000 "&" grow to
    6,000,000 escaped)."""
    with pytest.raises(TemplateError) as err:
        ChatTemplate(source, backend="python").render()
    assert err.value.kind == "limit", err.value


def test_the_sandbox_keeps_markup_internals_out_of_reach():
    assert render('{{ ("x"|safe).__class__ }}', "python") == ""
    assert render('{{ ("x"|safe).__html__() }}', "python") == ("error", "security")
