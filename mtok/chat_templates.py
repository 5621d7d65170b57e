"""Which chat template a model has, and what the template sees of its tokenizer.

A model's template comes, in this order, from ``--chat-template FILE`` (a
``.jinja`` file, or a ``.json`` file holding the template string or a
``tokenizer_config.json``-like object), from ``chat_template.jinja`` beside the
tokenizer (with named ones in ``additional_chat_templates/NAME.jinja``), or from
``chat_template`` in ``tokenizer_config.json``: a string, or a list of
``{name, template}``.  Of several, ``default`` is used, and ``tool_use`` when a
request has tools (what transformers' ``get_chat_template`` does).  Side files
are read only when the tokenizer path is a directory, as for eos/bos.

A model without a template has none: chat requests on it get a 400 naming the
flag that fixes it, never a silent fallback.  An explicit ``--chat-template``
that cannot be read or compiled stops the server at boot; a broken template in
a model's own files only fails its chat requests, so the rest of the model
still serves.

The special tokens a template sees (``bos_token``, ``eos_token``, ...) are the
named ones of ``tokenizer_config.json`` / ``special_tokens_map.json``, plus any
named ``extra_special_tokens``, as transformers' ``special_tokens_map`` gives them.
"""

from __future__ import annotations

import json
import logging
import os
import re
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional

from .chat import ChatTemplate, Limits, TemplateError, resolve_backend
from .tokenizer import _token_content  # a token as a string, or the content of an AddedToken object
from .validate import bad

logger = logging.getLogger(__name__)

TEMPLATE_FLAG = "--chat-template"
JINJA_FILE = "chat_template.jinja"
EXTRA_JINJA_DIR = "additional_chat_templates"  # NAME.jinja: named templates, as transformers saves them
SPECIAL_TOKEN_NAMES = ("bos_token", "eos_token", "unk_token", "sep_token", "pad_token", "cls_token", "mask_token")
DEFAULT_NAME, TOOL_USE_NAME = "default", "tool_use"

# A template that loops over a message's content wants OpenAI's list of parts;
# any other gets the text parts joined into one string (SGLang's detection).
_CONTENT_LOOP = re.compile(r"\{%-?\s*for\s+\w+\s+in\s+(?:message|msg|m)\s*(?:\[\s*['\"]content['\"]\s*\]|\.content)\b")
_MEDIA_WORDS = ("image", "audio", "video", "vision")


class ChatTemplateFileError(ValueError):
    """A template file named on the command line cannot be used."""


def content_format(source: str) -> str:
    """``"openai"`` when the template iterates message content (or handles media), else ``"string"``."""
    if any(word in source for word in _MEDIA_WORDS) or _CONTENT_LOOP.search(source):
        return "openai"
    return "string"


def templates_from_config(value: Any, where: str) -> Dict[str, str]:
    """A ``chat_template`` value: a string, or a list of ``{name, template}``."""
    if isinstance(value, str):
        return {DEFAULT_NAME: value}
    if isinstance(value, list) and all(isinstance(t, dict) and isinstance(t.get("name"), str)
                                       and isinstance(t.get("template"), str) for t in value):
        return {t["name"]: t["template"] for t in value}
    raise ChatTemplateFileError(f"{where}: 'chat_template' must be a string or a list of {{name, template}}")


def read_template_file(path: str) -> Dict[str, str]:
    """``--chat-template FILE``: Jinja text, or JSON holding the template (string,
    list of named templates, or an object with a ``chat_template`` key)."""
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read()
    except (OSError, UnicodeDecodeError) as e:
        raise ChatTemplateFileError(f"{TEMPLATE_FLAG} {path}: cannot read it ({e})") from None
    if not path.endswith(".json"):
        return {DEFAULT_NAME: text}
    try:
        value = json.loads(text)
    except ValueError as e:
        raise ChatTemplateFileError(f"{TEMPLATE_FLAG} {path}: not valid JSON ({e})") from None
    if isinstance(value, dict):
        if "chat_template" not in value:
            raise ChatTemplateFileError(f"{TEMPLATE_FLAG} {path}: a JSON object needs a 'chat_template' key")
        value = value["chat_template"]
    return templates_from_config(value, f"{TEMPLATE_FLAG} {path}")


def template_flags(entries: List[str], model_names: List[str]) -> Dict[str, str]:
    """model name -> template file, from ``--chat-template [NAME=]FILE`` (repeatable).
    A bare FILE applies to every model that has no ``NAME=FILE`` of its own."""
    named: Dict[str, str] = {}
    every: Optional[str] = None
    for entry in entries:
        name, sep, path = entry.partition("=")
        if sep and name in model_names:
            if name in named:
                raise ChatTemplateFileError(f"{TEMPLATE_FLAG} names model {name!r} twice")
            named[name] = path
        elif every is not None:
            raise ChatTemplateFileError(f"{TEMPLATE_FLAG} without NAME= is given twice; "
                                        f"use {TEMPLATE_FLAG} NAME=FILE per model")
        else:
            every = entry
    return {name: named.get(name, every) for name in model_names if named.get(name, every)}


def flag_problems(server_args: Any) -> List[str]:
    """Template files that do not exist, and a backend that is not there, are refused
    before boot (part of :meth:`ServerArgs.check <mtok.wire.args.ServerArgs.check>`)."""
    problems = []
    try:
        resolve_backend(server_args.chat_template_backend)
    except TemplateError as e:
        problems.append(f"--chat-template-backend: {e}")
    try:
        files = template_flags(server_args.chat_template, [s.name for s in server_args.model_specs()])
    except (ChatTemplateFileError, ValueError) as e:
        return problems + [str(e)]
    for f in sorted(set(files.values())):
        if not os.path.isfile(f):
            name = f.partition("=")[0] if "=" in f else None
            problems.append(f"--chat-template {f}: no such file"
                            + (f" (and no model is named {name!r})" if name else ""))
    return problems


def special_tokens(config: Dict[str, Any]) -> Dict[str, str]:
    """The named special tokens of a tokenizer's side files, as strings."""
    out: Dict[str, str] = {}
    extra = config.get("extra_special_tokens")
    names = list(SPECIAL_TOKEN_NAMES) + (list(extra) if isinstance(extra, dict) else [])
    for name in names:
        value = _token_content(config.get(name) if name in SPECIAL_TOKEN_NAMES else extra[name])  # type: ignore[index]
        if value is not None:
            out[name] = value
    return out


@dataclass
class Compiled:
    """One template, compiled, with the content shape it wants."""

    template: ChatTemplate
    content_format: str


@dataclass
class ModelChat:
    """A model's chat templates (by name) and special tokens; or why it has none usable."""

    origin: Optional[str]  # where the templates came from; None: the model has none
    templates: Dict[str, Compiled] = field(default_factory=dict)
    special_tokens: Dict[str, str] = field(default_factory=dict)
    broken: Optional[str] = None  # why the model's own template did not compile

    def pick(self, has_tools: bool) -> Compiled:
        """The template for a request: ``tool_use`` when it has tools and one exists, else ``default``."""
        if self.origin is None:
            raise bad(f"this model has no chat template; give one with {TEMPLATE_FLAG} FILE "
                      f"(a .jinja file, or JSON holding the template string)", "messages")
        if self.broken is not None:
            raise bad(f"this model's chat template ({self.origin}) does not compile: {self.broken}; "
                      f"give a working one with {TEMPLATE_FLAG} FILE", "messages")
        if has_tools and TOOL_USE_NAME in self.templates:
            return self.templates[TOOL_USE_NAME]
        if DEFAULT_NAME in self.templates:
            return self.templates[DEFAULT_NAME]
        raise bad(f"this model has several chat templates ({', '.join(sorted(self.templates))}) and none named "
                  f"'{DEFAULT_NAME}'; give one with {TEMPLATE_FLAG} FILE", "messages")


def _template_files(directory: str) -> Dict[str, str]:
    """name -> path: ``chat_template.jinja`` (``default``) and ``additional_chat_templates/NAME.jinja``."""
    found = {}
    if os.path.isfile(os.path.join(directory, JINJA_FILE)):
        found[DEFAULT_NAME] = os.path.join(directory, JINJA_FILE)
    extra = os.path.join(directory, EXTRA_JINJA_DIR)
    if os.path.isdir(extra):
        for entry in sorted(os.listdir(extra)):
            if entry.endswith(".jinja"):
                found[entry[: -len(".jinja")]] = os.path.join(extra, entry)
    return found


def _own_templates(directory: Optional[str], config: Dict[str, Any]) -> "tuple[Optional[str], Dict[str, str]]":
    """A model's own templates: its .jinja files if it has any (they win, as in transformers), else the config's."""
    if directory is None:
        return None, {}
    files = _template_files(directory)
    if files:
        sources = {}
        for name, path in files.items():
            with open(path, encoding="utf-8") as f:
                sources[name] = f.read()
        return files.get(DEFAULT_NAME, os.path.join(directory, EXTRA_JINJA_DIR)), sources
    if config.get("chat_template") is not None:
        where = os.path.join(directory, "tokenizer_config.json")
        return where, templates_from_config(config["chat_template"], where)
    return None, {}


def load_model_chat(files: Any, flag_file: Optional[str], backend: str, limits: Optional[Limits] = None) -> ModelChat:
    """The chat setup of one model, from its tokenizer's files (``TokenizerFiles``)
    and its ``--chat-template`` file if any, its renders bounded by ``limits``.  A bad
    flag file raises ChatTemplateFileError; a bad template of the model's own is kept
    as ``broken``."""
    if flag_file is not None:
        origin, sources = flag_file, read_template_file(flag_file)
    else:
        try:
            origin, sources = _own_templates(files.directory, files.config)
        except (OSError, UnicodeDecodeError, ChatTemplateFileError) as e:
            logger.warning("ignoring the chat template of %s: %s", files.directory, e)
            return ModelChat(files.directory, broken=str(e))
    chat = ModelChat(origin, special_tokens=special_tokens(files.config))
    for name, source in sources.items():
        try:
            chat.templates[name] = Compiled(ChatTemplate(source, backend, limits), content_format(source))
        except TemplateError as e:
            if flag_file is not None:
                raise ChatTemplateFileError(f"{TEMPLATE_FLAG} {flag_file}: {e}") from None
            logger.warning("the chat template %r of %s does not compile: %s", name, origin, e)
            chat.broken = f"template {name!r}: {e}"
    return chat


def load_chats(server_args: Any, tokenizers: Dict[str, Any]) -> Dict[str, ModelChat]:
    """model name -> its chat setup, for every model served (``--model`` or the single one)."""
    flags = template_flags(server_args.chat_template, list(tokenizers))
    limits = render_limits(server_args)
    return {name: load_model_chat(tok.files, flags.get(name), server_args.chat_template_backend, limits)
            for name, tok in tokenizers.items()}


def render_limits(server_args: Any) -> Limits:
    """The budget of every render: ``--chat-template-max-cpu-seconds`` and ``--chat-template-max-memory-mib``."""
    return Limits(max_cpu_seconds=server_args.chat_template_max_cpu_seconds,
                  max_memory=server_args.chat_template_max_memory_mib << 20)
