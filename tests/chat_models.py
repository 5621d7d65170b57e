"""Test helpers for chat: model directories built from ../shared/chat_templates, and
jinja2's rendering in the environment transformers' apply_chat_template sets up."""

from __future__ import annotations

import datetime
import json
import os
from typing import Any, Dict, Optional

import pytest

from support import ROOT, import_real, skip_real
from mtok.tokenizer import DEFAULT_TOKENIZER_DIR

SHARED_TEMPLATES = os.path.join(ROOT, "..", "shared", "chat_templates")
REPO_TEMPLATE_NAMES = ("qwen3",)
TEMPLATE_NAMES = ("llama3", "gemma3", "deepseek_v3", "gemini") + REPO_TEMPLATE_NAMES


def shared_template(name: str) -> Dict[str, Any]:
    """One file of ../shared/chat_templates (or of tests/chat_templates): the template and its special tokens."""
    path = os.path.join(SHARED_TEMPLATES, f"{name}.json")
    if name in REPO_TEMPLATE_NAMES:
        path = os.path.join(ROOT, "tests", "chat_templates", f"{name}.json")
    if not os.path.isfile(path):
        skip_real(f"{path} is absent (the shared chat templates are not on this machine)")
    with open(path, encoding="utf-8") as f:
        return json.load(f)


def model_dir(base: Any, name: str, config: Dict[str, Any], jinja: Optional[str] = None,
              tokenizer_json: str = os.path.join(DEFAULT_TOKENIZER_DIR, "tokenizer.json")) -> str:
    """A model directory: a tokenizer.json, this tokenizer_config.json, maybe a chat_template.jinja."""
    d = os.path.join(str(base), name)
    os.makedirs(d, exist_ok=True)
    with open(tokenizer_json, encoding="utf-8") as f:
        spec = json.load(f)
    with open(os.path.join(d, "tokenizer.json"), "w", encoding="utf-8") as f:
        json.dump(with_special_tokens(spec, special_tokens_of(config).values()), f)
    with open(os.path.join(d, "tokenizer_config.json"), "w", encoding="utf-8") as f:
        json.dump(dict(config, tokenizer_class="PreTrainedTokenizerFast"), f)
    if jinja is not None:
        with open(os.path.join(d, "chat_template.jinja"), "w", encoding="utf-8") as f:
            f.write(jinja)
    return d


def with_special_tokens(spec: Dict[str, Any], tokens: Any) -> Dict[str, Any]:
    """The tokenizer with the config's special tokens added where it lacks them, as a
    real model's tokenizer.json has them (transformers would add them otherwise)."""
    added = spec.setdefault("added_tokens", [])
    have = {t["content"] for t in added}
    next_id = max([len(spec["model"]["vocab"])] + [t["id"] + 1 for t in added])
    for tok in dict.fromkeys(tokens):
        if tok not in have:
            added.append({"id": next_id, "content": tok, "single_word": False, "lstrip": False, "rstrip": False,
                          "normalized": False, "special": True})
            next_id += 1
    return spec


def token_text(value: Any) -> Any:
    return value.get("content") if isinstance(value, dict) else value


def jinja2_render(source: str, **context: Any) -> str:
    """The reference: jinja2 as transformers configures it (sandbox, trim/lstrip
    blocks, loopcontrols, its tojson, raise_exception, strftime_now)."""
    jinja2 = import_real("jinja2")
    from jinja2.sandbox import ImmutableSandboxedEnvironment

    def raise_exception(message: str) -> None:
        raise jinja2.exceptions.TemplateError(message)

    def tojson(x: Any, ensure_ascii: bool = False, indent: Any = None, separators: Any = None,
               sort_keys: bool = False) -> str:
        return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=["jinja2.ext.loopcontrols"])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = lambda fmt: datetime.datetime.now().strftime(fmt)
    return env.from_string(source).render(**context)


def special_tokens_of(config: Dict[str, Any]) -> Dict[str, str]:
    names = ("bos_token", "eos_token", "unk_token", "sep_token", "pad_token", "cls_token", "mask_token")
    return {n: token_text(config[n]) for n in names if token_text(config.get(n)) is not None}
