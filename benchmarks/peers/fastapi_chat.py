"""The peer's chat pieces: the template as transformers renders it, and the two output parsers.

What a FastAPI app that serves ``/v1/chat/completions`` itself has to write:

* **The template**, compiled once per worker with jinja2 in the environment
  transformers' ``apply_chat_template`` builds (``ImmutableSandboxedEnvironment``
  with ``trim_blocks`` and ``lstrip_blocks``, the ``loopcontrols`` extension, a
  ``tojson`` filter that does not escape HTML, the ``raise_exception`` and
  ``strftime_now`` globals), rendered with the messages, the tools,
  ``add_generation_prompt`` and the tokenizer's named special tokens.
  transformers itself is not imported: an app that tokenizes with ``tokenizers``
  has no reason to load it.
* **Reasoning** (``qwen3``): with thinking on (the default; the template opened
  the block) the output is reasoning until ``</think>``; with
  ``enable_thinking: false`` only an output that opens with ``<think>`` reasons.
* **Tool calls** (``qwen25``): ``<tool_call>\\n{json}\\n</tool_call>`` blocks,
  each read with ``json.loads``; a block that does not parse, or names a tool
  the request did not declare, is dropped; the content is what comes before the
  first block, stripped when a call follows.

Each parser has a one-shot form and a streaming one that is fed the decoded
pieces and gives back what is settled; both give the same result, the one mtok
gives on this workload (the bench checks it before it measures).
"""

from __future__ import annotations

import json
import os
from datetime import datetime
from typing import Any, Dict, List, Optional, Tuple

import jinja2
from jinja2.sandbox import ImmutableSandboxedEnvironment

SPECIAL_TOKEN_NAMES = ("bos_token", "eos_token", "unk_token", "sep_token", "pad_token", "cls_token", "mask_token")
THINK_START, THINK_END = "<think>", "</think>"
CALL_START, CALL_END = "<tool_call>\n", "\n</tool_call>"
REASONING_PARSERS = ("qwen3",)
TOOL_PARSERS = ("qwen25",)


# -- the template ------------------------------------------------------------------------

def _tojson(x: Any, ensure_ascii: bool = False, indent: Any = None, separators: Any = None,
            sort_keys: bool = False) -> str:
    return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)


def _raise_exception(message: str) -> None:
    raise jinja2.exceptions.TemplateError(message)


def _strftime_now(fmt: str) -> str:
    return datetime.now().strftime(fmt)


def compile_template(source: str) -> jinja2.Template:
    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=["jinja2.ext.loopcontrols"])
    env.filters["tojson"] = _tojson
    env.globals["raise_exception"] = _raise_exception
    env.globals["strftime_now"] = _strftime_now
    return env.from_string(source)


def _token(value: Any) -> Optional[str]:
    return value.get("content") if isinstance(value, dict) else value if isinstance(value, str) else None


def load_template(path: Optional[str], tokenizer_dir: Optional[str]) -> Tuple[Optional[str], Dict[str, str]]:
    """The template source and the special tokens it sees: from ``path`` (a ``.jinja`` file,
    or JSON holding ``chat_template``), else the tokenizer directory's ``tokenizer_config.json``."""
    config: Dict[str, Any] = {}
    if tokenizer_dir:
        try:
            with open(os.path.join(tokenizer_dir, "tokenizer_config.json"), encoding="utf-8") as f:
                config = json.load(f)
        except (OSError, ValueError):
            pass
    source = config.get("chat_template")
    if path:
        with open(path, encoding="utf-8") as f:
            text = f.read()
        if path.endswith(".json"):
            data = json.loads(text)
            config = dict(config, **{k: v for k, v in data.items() if k.endswith("_token")})
            source = data["chat_template"] if isinstance(data, dict) else data
        else:
            source = text
    if isinstance(source, list):  # named templates: the default one
        source = next((t["template"] for t in source if t.get("name") == "default"), None)
    special = {n: _token(config.get(n)) for n in SPECIAL_TOKEN_NAMES}
    return source, {k: v for k, v in special.items() if v is not None}


# -- reasoning ---------------------------------------------------------------------------

def _held(text: str, marker: str) -> int:
    """How many characters at the end of ``text`` may be the start of ``marker``."""
    for n in range(min(len(marker) - 1, len(text)), 0, -1):
        if marker.startswith(text[-n:]):
            return n
    return 0


def split_reasoning(text: str, thinking: bool) -> Tuple[str, str]:
    """(reasoning, content) of a finished output."""
    if not (thinking or text.startswith(THINK_START)):
        return "", text
    if text.startswith(THINK_START):
        text = text[len(THINK_START):]
    reasoning, sep, content = text.partition(THINK_END)
    return reasoning, content


class ReasoningStream:
    """Decoded pieces in, ``(reasoning delta, content delta)`` out."""

    def __init__(self, thinking: bool):
        self.state = "lead" if not thinking else "open"
        self.buf = ""

    def feed(self, piece: str) -> Tuple[str, str]:
        if self.state == "content":
            return "", piece
        self.buf += piece
        if self.state in ("lead", "open"):
            if THINK_START.startswith(self.buf):
                return "", ""  # may still be the start marker
            if self.buf.startswith(THINK_START):
                self.buf = self.buf[len(THINK_START):]
            elif self.state == "lead":
                self.state, rest, self.buf = "content", self.buf, ""
                return "", rest
            self.state = "reasoning"
        end = self.buf.find(THINK_END)
        if end != -1:
            reasoning, rest = self.buf[:end], self.buf[end + len(THINK_END):]
            self.state, self.buf = "content", ""
            return reasoning, rest
        keep = _held(self.buf, THINK_END)
        out, self.buf = self.buf[:len(self.buf) - keep], self.buf[len(self.buf) - keep:]
        return out, ""

    def finish(self) -> Tuple[str, str]:
        rest, self.buf = self.buf, ""
        if self.state == "lead":
            return "", rest
        return ("", rest) if self.state == "content" else (rest, "")


# -- tool calls --------------------------------------------------------------------------

def _call(block: str, names: set) -> Optional[Dict[str, str]]:
    try:
        obj = json.loads(block.strip())
    except ValueError:
        return None
    if not isinstance(obj, dict) or obj.get("name") not in names:
        return None
    args = obj.get("parameters", obj.get("arguments", {}))
    return {"name": obj["name"], "arguments": args if isinstance(args, str) else json.dumps(args, ensure_ascii=False)}


def tool_names(tools: Optional[List[Dict[str, Any]]]) -> set:
    return {t.get("function", {}).get("name") for t in tools or ()}


def parse_calls(text: str, names: set) -> Tuple[str, List[Dict[str, str]]]:
    """(content, calls) of a finished content."""
    first = text.find(CALL_START)
    if first == -1:
        return text, []
    calls, at = [], first
    while True:
        start = text.find(CALL_START, at)
        end = text.find(CALL_END, start + len(CALL_START)) if start != -1 else -1
        if end == -1:
            break
        call = _call(text[start + len(CALL_START):end], names)
        if call:
            calls.append(call)
        at = end + len(CALL_END)
    return text[:first].strip(), calls


class ToolCallStream:
    """Content pieces in, ``(content delta, [new calls])`` out.

    The content before the first call is stripped when a call follows and kept
    whole when none does, so trailing spaces wait for what comes next, and a
    content that opens with spaces waits for the end or the call."""

    def __init__(self, names: set):
        self.names = names
        self.buf = ""
        self.head = True  # before the first call's start
        self.sent = False  # some content went out
        self.pending = ""  # trailing spaces of the content, or all of it while it opened with spaces

    def feed(self, piece: str) -> Tuple[str, List[Dict[str, str]]]:
        self.buf += piece
        if not self.head:
            return "", self._blocks()
        start = self.buf.find(CALL_START)
        if start == -1:
            keep = _held(self.buf, CALL_START)
            settled, self.buf = self.buf[:len(self.buf) - keep], self.buf[len(self.buf) - keep:]
            return self._content(settled), []
        settled, self.buf = self.buf[:start], self.buf[start:]
        text, self.head, self.pending = self.pending + settled, False, ""
        out = text.rstrip() if self.sent else text.strip()  # the head, stripped: a call follows
        return out, self._blocks()

    def _content(self, settled: str) -> str:
        text = self.pending + settled
        if not self.sent and text[:1].isspace():
            self.pending = text  # opened with spaces: all of it waits
            return ""
        body = text.rstrip()
        self.pending = text[len(body):]
        self.sent = self.sent or bool(body)
        return body

    def _blocks(self) -> List[Dict[str, str]]:
        calls = []
        while True:
            start = self.buf.find(CALL_START)
            end = self.buf.find(CALL_END, start + len(CALL_START)) if start != -1 else -1
            if end == -1:
                return calls
            call = _call(self.buf[start + len(CALL_START):end], self.names)
            if call:
                calls.append(call)
            self.buf = self.buf[end + len(CALL_END):]

    def finish(self) -> str:
        if self.head:
            rest, self.buf, self.pending = self.pending + self.buf, "", ""
            return rest
        return ""
