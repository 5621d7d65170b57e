"""Block formats whose call bodies are JSON: hermes, qwen25, deepseekv3,
deepseekv31 and kimi_k2 (llama3 and mistral, bare JSON, are in ``bare_json``).

Each class states its markers and how SGLang (0.5.23, ``srt/function_call/``)
reads a block; where SGLang's detectors differ from each other (stripping the
content, dropping one bad call or giving up on all of them) the class follows
its own detector, because a user's launch line should give the same answer.
SGLang finds blocks with regular expressions that rescan from every tag; here
each is read by forward searches from kept positions, with the same result
(see ``blocks``), so that no output costs more than a pass over it.
"""

import json
import re

from mtok.parsers.base import UNREADABLE, Call, Malformed, tool_names, tool_schema
from mtok.parsers.blocks import BlockFinder, BlockToolParser

SPACE = re.compile(r"\s*")


class HermesParser(BlockToolParser):
    """``<tool_call>{"name": ..., "arguments": {...}}</tool_call>``, repeated.

    A last block left open is read too (a model may stop without the closing
    tag); one unreadable block makes the whole output content, as SGLang does.
    """

    name = "hermes"
    start = open = "<tool_call>"
    close = "</tool_call>"

    def read_block(self, text, at, body, close_at):
        if body == close_at:
            return []
        return self.calls_from_json(json.loads(self.slice(text, body, close_at).strip()))

    def tail_calls(self, stream, text):
        blocks = stream.blocks
        return [] if blocks.body_at == -1 else stream.read(text, blocks.open_at, blocks.body_at, len(text))


class Qwen25Parser(HermesParser):
    """``<tool_call>\\n{json}\\n</tool_call>``: a bad block is skipped, an open one ignored."""

    name = "qwen25"
    start = open = "<tool_call>\n"
    close = "\n</tool_call>"
    all_or_nothing = False

    def read_block(self, text, at, body, close_at):
        return self.calls_from_json(json.loads(self.slice(text, body, close_at).strip()))

    def tail_calls(self, stream, text):
        return []


class DeepSeekV3Parser(BlockToolParser):
    """``<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>NAME
    ```json ... ```<｜tool▁call▁end｜>...<｜tool▁calls▁end｜>``.

    SGLang reads a block with ``begin(.*)sep(.*)\\n```json\\n(.*)\\n```end``: the
    greedy groups settle on the last separator before the last fence, which is
    what ``read_block`` looks up from the block's end.
    """

    name = "deepseekv3"
    start = "<｜tool▁calls▁begin｜>"
    open = "<｜tool▁call▁begin｜>"
    close = "<｜tool▁call▁end｜>"
    sep = "<｜tool▁sep｜>"
    fence = "\n```json\n"

    def read_block(self, text, at, body, close_at):
        tail = close_at - len("\n```")
        fence = self.rfind(text, self.fence, body, tail) if text.startswith("\n```", tail) else -1
        sep = self.rfind(text, self.sep, body, fence) if fence != -1 else -1
        if sep == -1:
            raise Malformed("tool call block without name and JSON")
        name = self.slice(text, sep + len(self.sep), fence)
        return self.calls_from_json({"name": name, "parameters": self.loads(text, fence + len(self.fence), tail)})


class DeepSeekV31Parser(DeepSeekV3Parser):
    """V3.1 drops the ``function`` type and the code fence: ``NAME<｜tool▁sep｜>{json}``."""

    name = "deepseekv31"

    def read_block(self, text, at, body, close_at):
        sep = self.rfind(text, self.sep, body, close_at)
        if sep == -1:
            raise Malformed("tool call block without name and JSON")
        name = self.slice(text, body, sep)
        return self.calls_from_json({"name": name, "parameters": self.loads(text, sep + len(self.sep), close_at)})


class KimiK2Parser(BlockToolParser):
    """``<|tool_calls_section_begin|><|tool_call_begin|>functions.NAME:0
    <|tool_call_argument_begin|>{json}<|tool_call_end|>...``.

    As SGLang: the content is not stripped, the arguments are passed on as the
    model wrote them (not re-serialized) and the name is not checked against
    ``tools``; an id that is a bare counter takes the only tool's name.  A block
    is SGLang's ``begin\\s*ID\\s*argument_begin\\s*(\\{.*?\\})\\s*end``.
    """

    name = "kimi_k2"
    start = "<|tool_calls_section_begin|>"
    open = "<|tool_call_begin|>"
    argument = "<|tool_call_argument_begin|>"
    close = "<|tool_call_end|>"
    id_re = re.compile(r"(?:functions\.)?([\w.\-]+):(\d+)\Z")
    id_run = re.compile(r"\s*([^\s<|]*)")
    strip_content = False
    all_or_nothing = False
    index_by_call = True

    def finder(self):
        return KimiFinder(self)

    def read_block(self, text, at, body, close_at):
        ident = self.id_run.match(text, at + len(self.open)).group(1)
        self.read(len(ident) + close_at - body)
        args = text[body:close_at]
        found = self.id_re.match(ident)
        if found:
            return [Call(found.group(1), args)]
        if ident.isdigit():
            name = self._infer_name(args)
            return [Call(name, args)] if name else []
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


WAIT = None


class KimiFinder(BlockFinder):
    """kimi_k2's blocks: after ``begin``, an id and ``argument_begin`` must follow
    before the body's ``{``; the body ends at the first ``}`` followed by spaces
    and ``end``.  Each stage resumes where the text ran out, so an id or a run of
    spaces fed a character at a time is still read once."""

    def __init__(self, parser):
        BlockFinder.__init__(self, parser)
        self.stage = self.pos = self.ident_at = 0
        self.brace = -1
        self.close_looked = 0

    def find_open(self, text):
        while True:
            if self.open_at == -1:
                at = self.opens.find(self.parser, text)
                if at == -1:
                    return False
                self.open_at, self.stage, self.pos = at, 0, at + len(self.parser.open)
            state = self._prefix(text)
            if state is WAIT:
                return False
            if state:
                self.body_at, self.close_looked, self.brace = self.pos, self.pos + 1, -1
                return True
            self.opens.reset(self.open_at + 1)
            self.open_at = -1

    def _prefix(self, text):
        """True once ``\\s*ID\\s*argument_begin\\s*{`` is read, False if it cannot be, else WAIT."""
        p, argument = self.parser, self.parser.argument
        while True:
            if self.stage == 3:
                if not text.startswith(argument, self.pos):
                    return WAIT if argument.startswith(text[self.pos:self.pos + len(argument)]) else False
                self.pos += len(argument)
            else:
                self.pos = p.run(IDENT if self.stage == 1 else SPACE, text, self.pos)
                if self.pos >= len(text):
                    return WAIT
                if self.stage == 1 and self.pos == self.ident_at:
                    return False
                if self.stage == 4:
                    return text[self.pos] == "{"
            self.stage += 1
            self.ident_at = self.pos

    def find_close(self, text):
        p, close = self.parser, self.parser.close
        while True:
            if self.brace == -1:
                self.brace = p.find(text, "}", self.close_looked)
                if self.brace == -1:
                    self.close_looked = len(text)
                    return None
                self.close_looked = self.brace + 1
            self.close_looked = end = p.run(SPACE, text, self.close_looked)
            if text.startswith(close, end):
                return self.brace + 1, end + len(close)
            if close.startswith(text[end:end + len(close)]):
                return None  # spaces, or the start of ``end``, up to the end of the text
            self.brace = -1


IDENT = re.compile(r"[^\s<|]*")
