"""Golden outputs: mtok's chat engine without jinja2 (runs in tox's core flavour too).

The expected strings in tests/chat_golden.py are jinja2's, recorded from the
differential suite's inputs; here only mtok's ``python`` backend renders them.
"""

from __future__ import annotations

import copy

import pytest

from chat_cases import CONVERSATIONS, TOOLS, all_templates
from chat_golden import GOLDEN_CONSTRUCTS, GOLDEN_TEMPLATES
from mtok.chat import ChatTemplate, TemplateError

pytestmark = [pytest.mark.fast, pytest.mark.unit]

TEMPLATES = all_templates()
CONTEXT = dict(s="Hello World", n=5, f=2.5, l=[3, 1, 2], d={"b": 2, "a": 1, "items": 7}, none=None, t=True,
               msgs=[{"role": "user", "content": "hi"}, {"role": "assistant", "content": "yo"}], e="", u8="héllo")


@pytest.mark.parametrize("name,conv,opts,expected", GOLDEN_TEMPLATES,
                         ids=[f"{n}-{c}-{len(o)}" for n, c, o, _ in GOLDEN_TEMPLATES])
def test_template_renders_the_recorded_output(name, conv, opts, expected):
    source, special = TEMPLATES[name]
    ctx = {**special, "messages": copy.deepcopy(CONVERSATIONS[conv]),
           **{k: TOOLS if v == "TOOLS" else v for k, v in opts.items()}}
    template = ChatTemplate(source, backend="python")
    if expected is None:
        with pytest.raises(TemplateError):
            template.render(**ctx)
    else:
        assert template.render(**ctx) == expected


@pytest.mark.parametrize("src,expected", GOLDEN_CONSTRUCTS)
def test_construct_renders_the_recorded_output(src, expected):
    assert ChatTemplate(src, backend="python").render(**copy.deepcopy(CONTEXT)) == expected


def test_the_golden_set_covers_rendering_and_errors():
    assert sum(e is None for *_, e in GOLDEN_TEMPLATES) >= 1
    assert sum(e is not None for *_, e in GOLDEN_TEMPLATES) >= 40
