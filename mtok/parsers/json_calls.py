"""Tool-call formats whose call bodies are JSON: hermes, qwen25, deepseekv3,
deepseekv31 and kimi_k2 (block formats), llama3 and mistral (bare JSON).

Each class states its markers and how SGLang (0.5.23, ``srt/function_call/``)
reads a block; where SGLang's detectors differ from each other (stripping the
content, dropping one bad call or giving up on all of them) the class follows
its own detector, because a user's launch line should give the same answer.
"""

import json
import re

from mtok.parsers.base import (
    UNREADABLE, BlockToolParser, Call, Malformed, ToolParser, partial_suffix, tool_names, tool_schema,
)


class HermesParser(BlockToolParser):
    """``<tool_call>{"name": ..., "arguments": {...}}</tool_call>``, repeated.

    A last block left open is read too (a model may stop without the closing
    tag); one unreadable block makes the whole output content, as SGLang does.
    """

    name = "hermes"
    start = "<tool_call>"
    block_re = re.compile(r"<tool_call>(.*?)</tool_call>|<tool_call>(.*)", re.S)

    def parse_block(self, match):
        raw = match.group(1) if match.group(1) is not None else match.group(2)
        if not raw:
            return []
        return self.calls_from_json(json.loads(raw.strip()))


class Qwen25Parser(BlockToolParser):
    """``<tool_call>\\n{json}\\n</tool_call>``: a bad block is skipped, an open one ignored."""

    name = "qwen25"
    start = "<tool_call>\n"
    block_re = re.compile(r"<tool_call>\n(.*?)\n</tool_call>", re.S)
    all_or_nothing = False

    def parse_block(self, match):
        return self.calls_from_json(json.loads(match.group(1).strip()))


class DeepSeekV3Parser(BlockToolParser):
    """``<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>NAME
    ```json ... ```<｜tool▁call▁end｜>...<｜tool▁calls▁end｜>``."""

    name = "deepseekv3"
    start = "<｜tool▁calls▁begin｜>"
    block_re = re.compile(r"<｜tool▁call▁begin｜>.*?<｜tool▁call▁end｜>", re.S)
    detail_re = re.compile(
        r"<｜tool▁call▁begin｜>(.*)<｜tool▁sep｜>(.*)\n```json\n(.*)\n```<｜tool▁call▁end｜>", re.S)

    def parse_block(self, match):
        detail = self.detail_re.search(match.group(0))
        if detail is None:
            raise Malformed("tool call block without name and JSON")
        name, args = detail.group(detail.re.groups - 1), detail.group(detail.re.groups)
        return self.calls_from_json({"name": name, "parameters": json.loads(args)})


class DeepSeekV31Parser(DeepSeekV3Parser):
    """V3.1 drops the ``function`` type and the code fence: ``NAME<｜tool▁sep｜>{json}``."""

    name = "deepseekv31"
    detail_re = re.compile(r"<｜tool▁call▁begin｜>(.*)<｜tool▁sep｜>(.*)<｜tool▁call▁end｜>", re.S)


class KimiK2Parser(BlockToolParser):
    """``<|tool_calls_section_begin|><|tool_call_begin|>functions.NAME:0
    <|tool_call_argument_begin|>{json}<|tool_call_end|>...``.

    As SGLang: the content is not stripped, the arguments are passed on as the
    model wrote them (not re-serialized) and the name is not checked against
    ``tools``; an id that is a bare counter takes the only tool's name.
    """

    name = "kimi_k2"
    start = "<|tool_calls_section_begin|>"
    block_re = re.compile(
        r"<\|tool_call_begin\|>\s*(?P<id>[^\s<|]+)\s*<\|tool_call_argument_begin\|>"
        r"\s*(?P<args>\{.*?\})\s*<\|tool_call_end\|>", re.S)
    id_re = re.compile(r"^(?:functions\.)?([\w.\-]+):(\d+)$")
    strip_content = False
    all_or_nothing = False
    index_by_call = True

    def parse_block(self, match):
        found = self.id_re.match(match.group("id"))
        if found:
            return [Call(found.group(1), match.group("args"))]
        if match.group("id").isdigit():
            name = self._infer_name(match.group("args"))
            return [Call(name, match.group("args"))] if name else []
        return []

    def _infer_name(self, args):
        """A bare counter id: the only tool, else the one whose schema best fits the keys."""
        names = tool_names(self.tools)
        if len(names) == 1:
            return names[0]
        try:
            keys = set(json.loads(args))
        except UNREADABLE:
            return None
        best, best_score = None, -1
        for name in names:
            props = set((tool_schema(self.tools, name).get("properties") or {}))
            score = len(keys & props) - len(keys - props)
            if props and score > best_score:
                best, best_score = name, score
        return best


def balanced_json(text, pos):
    """End (exclusive) of the bracketed value opening at ``pos``, or -1 if unclosed.

    Counts only the bracket kind that opens it, skipping strings, as SGLang's
    Mistral detector does before it hands the slice to ``json.loads``.
    """
    opening = text[pos]
    closing = "}" if opening == "{" else "]"
    depth, in_string, escaped = 0, False, False
    for k in range(pos, len(text)):
        ch = text[k]
        if escaped:
            escaped = False
        elif ch == "\\":
            escaped = True
        elif ch == '"':
            in_string = not in_string
        elif not in_string and ch == opening:
            depth += 1
        elif not in_string and ch == closing:
            depth -= 1
            if depth == 0:
                return k + 1
    return -1


class MarkerToolParser(ToolParser):
    """Formats read only as a whole: content streams until ``marker``, calls come at the end."""

    marker = ""

    def stable(self, text):
        idx = text.find(self.marker)
        if idx != -1:
            return text[:idx].strip(), []
        head = text[: len(text) - partial_suffix(text, self.marker)]
        return ("" if head[:1].isspace() else head.rstrip()), []


class MistralParser(MarkerToolParser):
    """``[TOOL_CALLS] [{"name", "arguments"}, ...]`` and the newer
    ``[TOOL_CALLS]NAME[ARGS]{...}`` (repeated); text after the calls joins the content."""

    name = "mistral"
    marker = "[TOOL_CALLS"

    def parse(self, text):
        idx = text.find(self.marker)
        if idx == -1:
            return text, []
        content, part = text[:idx].strip(), text[idx:]
        if "[TOOL_CALLS] [" in part:
            return self._parse_array(content, part)
        calls, rest = [], part
        while rest:
            found = self._compact_call(rest)
            if found is None:
                break
            calls.extend(self.calls_from_json({"name": found[0], "arguments": found[1]}))
            rest = rest[found[2]:].strip()
        if not calls:
            return content, []
        return ((content + " " + rest).strip() if rest else content), calls

    def _parse_array(self, content, part):
        start = part.find("[TOOL_CALLS] [") + len("[TOOL_CALLS] ")
        end = balanced_json(part, start)
        if end == -1:
            return content, []
        calls = []
        try:
            calls = self.calls_from_json(json.loads(part[start:end]))
        except UNREADABLE:
            pass
        trailing = part[end:].strip()
        return ((content + " " + trailing).strip() if trailing else content), calls

    def _compact_call(self, text):
        """(name, arguments, end) of ``[TOOL_CALLS]NAME[ARGS]{...}`` at the first marker."""
        i = text.find(self.marker)
        if i == -1:
            return None
        i = _skip_bracket_space(text, i + len(self.marker))
        args_at = text.find("[ARGS", i)
        name = text[i:args_at].strip() if args_at != -1 else ""
        if not name:
            return None
        j = _skip_bracket_space(text, args_at + len("[ARGS"))
        if j >= len(text) or text[j] not in "{[":
            return None
        end = balanced_json(text, j)
        try:
            return (name, json.loads(text[j:end]), end) if end != -1 else None
        except UNREADABLE:
            return None


def _skip_bracket_space(text, i):
    if i < len(text) and text[i] == "]":
        i += 1
    while i < len(text) and text[i].isspace():
        i += 1
    return i


class Llama3Parser(ToolParser):
    """A JSON object at the very start, or after ``<|python_tag|>``; several separated by ``;``.

    The content is the text before the tag (not stripped) plus whatever follows
    the last readable object, as SGLang has it.  SGLang also retries a Python
    dict literal (single quotes); mtok does not (see the README).
    """

    name = "llama3"
    tag = "<|python_tag|>"
    separator = ";"

    def parse(self, text):
        if self.tag not in text and not text.startswith("{"):
            return text, []
        normal, action = text.split(self.tag, 1) if self.tag in text else ("", text)
        decoder, objs = json.JSONDecoder(), []
        idx = safe = 0
        while idx < len(action):
            try:
                obj, end = decoder.raw_decode(action[idx:])
            except UNREADABLE:
                idx = action.find('{"name":', idx + 1)
                if idx == -1:
                    break
                continue
            objs.append(obj)
            idx = safe = idx + end + len(self.separator)
        trailing = action[safe:].strip() if safe < len(action) else ""
        try:
            calls = self.calls_from_json(objs) if objs else []
        except UNREADABLE:
            calls = []
        return normal + trailing, calls

    def stable(self, text):
        if not text or text.startswith("{"):
            return "", []
        if self.tag in text:
            return text.split(self.tag, 1)[0], []
        return text[: len(text) - partial_suffix(text, self.tag)], []
