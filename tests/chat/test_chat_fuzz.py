"""Generated templates and values: mtok's engine against jinja2 (hypothesis).

Three generators: random character soup over the characters Jinja's syntax is made of
(lexing, whitespace control, error paths); random well-formed templates built from
expressions, filters, tests, ``if``/``for``/``set`` and whitespace control; and random
JSON-like values rendered by the real templates.  The output must be the same string,
or both must raise.  Skipped without jinja2.
"""

from __future__ import annotations

import pytest

from support import import_real

import_real("jinja2", reason="jinja2 not installed")
hypothesis = import_real("hypothesis")

from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from chat_cases import all_templates  # noqa: E402
from mtok.chat import ChatTemplate, TemplateError  # noqa: E402

# jinja2 compiles some generated templates to Python that warns ("'int' object is not subscriptable")
pytestmark = [pytest.mark.filterwarnings("ignore::SyntaxWarning"), pytest.mark.unit]

SETTINGS = settings(max_examples=int(__import__("os").environ.get("CHAT_FUZZ_EXAMPLES", "300")), deadline=None, suppress_health_check=list(HealthCheck), derandomize=not __import__("os").environ.get("CHAT_FUZZ_RANDOM"))

SCALARS = st.one_of(st.none(), st.booleans(), st.integers(-1000, 1000),
                    st.floats(allow_nan=False, allow_infinity=False, width=32),
                    st.text(alphabet="ab c\n\t<>{}%#'\"é👋-", max_size=8))
VALUES = st.recursive(SCALARS, lambda inner: st.one_of(
    st.lists(inner, max_size=4), st.dictionaries(st.sampled_from(["a", "b", "role", "content", "items"]), inner,
                                                 max_size=4)), max_leaves=12)
CONTEXT = st.fixed_dictionaries({"a": VALUES, "b": VALUES, "c": SCALARS, "xs": st.lists(VALUES, max_size=5)})


def outcome(src, backend, ctx):
    try:
        return ChatTemplate(src, backend=backend).render(**ctx)
    except TemplateError:
        return ("error",)


def assert_same(src, ctx):
    expected = outcome(src, "jinja2", ctx)
    assert outcome(src, "python", ctx) == expected, src


SOUP = st.lists(st.sampled_from(list("{}%#-+ \n\tab'\"()|.=~") + ["{{", "}}", "{%", "%}", "{#", "#}", " if ", " for ",
                                                         " in ", "endif", "endfor", " set ", " raw ", "endraw",
                                                         " else ", "a.b", "loop.index"]), max_size=30).map("".join)


@pytest.mark.slow
@SETTINGS
@given(SOUP)
def test_character_soup_lexes_and_fails_as_jinja2_does(src):
    assert_same(src, {"a": 1, "b": [1, 2], "c": "x"})


ATOMS = st.sampled_from(["a", "b", "c", "xs", "missing", "none", "true", "1", "2.5", "-3", "'s'", "''", "[1, 'x']",
                         "{'k': 'v'}", "xs[0]", "a.role", "b['content']", "xs|length", "loop", "(1, 2)"])
FILTERS = st.sampled_from(["length", "string", "upper", "lower", "title", "capitalize", "trim", "first", "last",
                           "list", "tojson", "join(',')", "default('d')", "default('d', true)", "int", "float",
                           "abs", "round", "reverse|list", "sort", "unique|list", "items|list", "dictsort",
                           "selectattr('role')|list", "map('string')|list", "select|list", "sum", "min", "max",
                           "wordcount", "center(9)", "indent(2)", "truncate(5, true, '', 0)", "e", "safe",
                           "batch(2)|list", "replace('a', 'b')", "count", "d"])
TESTS = st.sampled_from(["defined", "undefined", "none", "string", "mapping", "iterable", "sequence", "number",
                         "integer", "float", "boolean", "true", "false", "odd", "even", "divisibleby(2)",
                         "callable", "in [1, 'x']", "eq 1", "ne 's'", "lt 3", "gt 0"])
BINOPS = st.sampled_from([" ~ ", " + ", " - ", " * ", " // ", " % ", " == ", " != ", " < ", " in ", " not in ",
                          " and ", " or "])


@st.composite
def expressions(draw, depth=0):
    if depth >= 3:
        return draw(ATOMS)
    kind = draw(st.integers(0, 6))
    inner = draw(expressions(depth=depth + 1))
    if kind == 0:
        return inner
    if kind == 1:
        return f"{inner}|{draw(FILTERS)}"
    if kind == 2:
        return f"({inner} is {draw(TESTS)})"
    if kind == 3:
        return f"({inner}{draw(BINOPS)}{draw(expressions(depth=depth + 1))})"
    if kind == 4:
        return f"({inner} if {draw(expressions(depth=depth + 1))} else {draw(ATOMS)})"
    if kind == 5:
        return f"(not {inner})"
    return f"{inner}[{draw(st.sampled_from(['0', '-1', '1:', ':2', '::-1', 'a', 'c']))}]"


def _tag(draw, body):
    left = draw(st.sampled_from(["{%", "{%-", "{%+"]))
    right = draw(st.sampled_from(["%}", "-%}"]))
    return f"{left} {body} {right}"


@st.composite
def templates(draw, depth=0):
    parts = []
    for _ in range(draw(st.integers(1, 4))):
        kind = draw(st.integers(0, 7 if depth < 2 else 2))
        if kind == 0:
            parts.append(draw(st.sampled_from(["x", " ", "\n", "  \n  ", "\t", "é", "}", "%"])))
        elif kind == 1:
            parts.append(f"{draw(st.sampled_from(['{{', '{{-']))} {draw(expressions())} "
                         f"{draw(st.sampled_from(['}}', '-}}']))}")
        elif kind == 2:
            name = draw(st.sampled_from(["a", "v", "c"]))
            parts.append(_tag(draw, f"set {name} = {draw(expressions())}"))
        elif kind == 3:
            parts.append(_tag(draw, f"if {draw(expressions())}") + draw(templates(depth=depth + 1))
                         + _tag(draw, "else") + draw(templates(depth=depth + 1)) + _tag(draw, "endif"))
        elif kind == 6:
            parts.append(_tag(draw, f"macro mm(p, q={draw(expressions())})") + "[{{ p }}|{{ q }}]"
                         + draw(templates(depth=depth + 1)) + _tag(draw, "endmacro")
                         + f"{{{{ mm({draw(expressions())}) }}}}{{{{ mm(q={draw(ATOMS)}) }}}}")
        elif kind == 7:
            parts.append(_tag(draw, f"set ns = namespace(x={draw(expressions())})")
                         + draw(templates(depth=depth + 1)) + _tag(draw, f"set ns.x = {draw(expressions())}")
                         + "{{ ns.x }}")
        else:
            target = draw(st.sampled_from(["v", "a", "k, v"]))
            body = draw(templates(depth=depth + 1)) + draw(st.sampled_from(
                ["{{ loop.index }}", "{{ loop.last }}", "{{ loop.previtem }}", "", "{% if loop.first %}F{% endif %}",
                 "{% break %}", "{% continue %}", "{{ loop.cycle(1, 2) }}"]))
            parts.append(_tag(draw, f"for {target} in {draw(expressions())}") + body + _tag(draw, "endfor"))
        parts.append(draw(st.sampled_from(["", "\n", "  ", "\n  "])))
    return "".join(parts)


@pytest.mark.slow
@SETTINGS
@given(templates(), CONTEXT)
def test_generated_templates_render_as_jinja2_does(src, ctx):
    assert_same(src, ctx)


TEMPLATES = all_templates()
MESSAGES = st.lists(st.fixed_dictionaries(
    {"role": st.sampled_from(["system", "user", "assistant", "tool"]),
     "content": st.one_of(st.text(max_size=12), st.none(),
                          st.lists(st.fixed_dictionaries({"type": st.just("text"), "text": st.text(max_size=6)}),
                                   max_size=2))},
    optional={"tool_calls": st.lists(st.fixed_dictionaries(
        {"id": st.text(alphabet="abc123", min_size=9, max_size=9), "type": st.just("function"),
         "function": st.fixed_dictionaries({"name": st.text(alphabet="abc_", min_size=1, max_size=5),
                                            "arguments": st.one_of(VALUES, st.text(max_size=8))})}), max_size=2),
              "reasoning_content": st.text(max_size=8), "tool_call_id": st.text(max_size=9)}), max_size=5)


@pytest.mark.slow
@SETTINGS
@given(st.sampled_from(sorted(TEMPLATES)), MESSAGES, st.booleans(), st.one_of(st.none(), st.booleans()))
def test_real_templates_with_generated_conversations(name, messages, add_generation_prompt, thinking):
    source, special = TEMPLATES[name]
    ctx = {**special, "messages": messages, "add_generation_prompt": add_generation_prompt}
    if thinking is not None:
        ctx["enable_thinking"] = thinking
    assert_same(source, ctx)
