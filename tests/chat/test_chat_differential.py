"""mtok's chat template engine against jinja2, on real and family-style templates.

Every template (../shared/chat_templates, tests/chat_templates, tests/chat_families.py)
is rendered under every context of tests/chat_cases.py by ``ChatTemplate(...,
backend="python")`` and by jinja2 in transformers' environment (the ``jinja2``
backend): the strings must be equal, or both must raise.  Skipped without jinja2.
"""

from __future__ import annotations

import os

import pytest

from chat_cases import SHARED_TEMPLATES, all_templates, contexts, outcome, real_templates
from support import import_real, skip_real

import_real("jinja2", reason="jinja2 not installed")

from mtok.chat import ChatTemplate  # noqa: E402

pytestmark = [pytest.mark.fast, pytest.mark.unit]

TEMPLATES = all_templates()
CONTEXTS = contexts()


@pytest.mark.parametrize("name", sorted(TEMPLATES))
def test_template_renders_as_jinja2_does_in_every_context(name):
    source, special = TEMPLATES[name]
    mine = ChatTemplate(source, backend="python")
    ref = ChatTemplate(source, backend="jinja2")
    rendered = 0
    for cid, ctx in CONTEXTS:
        ctx = {**special, **ctx}
        expected = outcome(ref, ctx)
        assert outcome(mine, ctx) == expected, f"{name} / {cid}"
        rendered += expected != ("error",)
    assert rendered >= len(CONTEXTS) // 4, f"{name}: too few contexts render at all ({rendered})"


def test_the_shared_templates_are_all_used():
    if not os.path.isdir(SHARED_TEMPLATES):
        skip_real(f"{SHARED_TEMPLATES} is absent (../shared is not on this machine)")
    names = {n for n in real_templates() if n.startswith("shared/")}
    assert len(names) >= 4, names


def test_missing_special_tokens_render_as_jinja2_does():
    """Without bos_token/eos_token in the context (undefined values printed as '')."""
    for name, (source, _) in sorted(TEMPLATES.items()):
        mine, ref = ChatTemplate(source, backend="python"), ChatTemplate(source, backend="jinja2")
        for cid, ctx in CONTEXTS[::7]:
            assert outcome(mine, ctx) == outcome(ref, ctx), f"{name} / {cid}"


def test_the_jinja2_backend_is_transformers_environment():
    """The reference itself: our jinja2 backend renders as transformers' own compiled template."""
    utils = import_real("transformers.utils.chat_template_utils", reason="transformers not installed")
    for name, (source, special) in sorted(TEMPLATES.items()):
        theirs = utils._compile_jinja_template(source)
        mine, ref = ChatTemplate(source, backend="python"), ChatTemplate(source, backend="jinja2")
        for cid, ctx in CONTEXTS[::3]:
            ctx = {**special, **ctx}
            try:
                expected = theirs.render(**ctx)
            except Exception:  # jinja2's TemplateError and what a template's Python raises
                expected = ("error",)
            assert outcome(ref, ctx) == expected, f"{name} / {cid}"
            assert outcome(mine, ctx) == expected, f"{name} / {cid}"
