"""What the load generator sends: prompts of an exact length, and the request bytes.

Prompts are made with the server's own tokenizer so that "a 512-token prompt"
is 512 tokens as the server counts them (special tokens included), from random
word-like tokens or from natural text in several scripts (:mod:`.natural_text`),
or read from a JSONL file.  Every request is serialized once, before the clock starts.
"""

from __future__ import annotations

import json
import random
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Sequence

from . import chat_workload
from .http_client import Target, build_request
from .natural_text import NaturalPromptMaker

ENDPOINTS = {"generate": "/generate", "completions": "/v1/completions", "tokenize": "/tokenize",
             "chat": "/v1/chat/completions", "chat-tools": "/v1/chat/completions",
             "chat-3turn": "/v1/chat/completions"}
MIXED = ("generate", "generate-stream", "completions", "completions-stream", "tokenize")


@dataclass
class Plan:
    """One request, ready to send: its bytes and what it should cost."""

    request: bytes
    input_tokens: int
    output_tokens: int
    stream: bool
    prompt_bytes: int = 0


@dataclass
class Workload:
    endpoint: str = "generate"  # a key of ENDPOINTS, or "mixed"
    input_len: int = 128
    output_len: int = 16
    stream: bool = False
    prompts_file: Optional[str] = None
    text: str = "random"  # "random" word-like tokens, or a kind of natural text (natural_text.TEXT_CHOICES)
    concurrency: int = 16
    rate: Optional[float] = None  # requests/s (Poisson arrivals) instead of a fixed concurrency
    duration: Optional[float] = 10.0
    requests: Optional[int] = None  # a request count instead of a duration
    warmup: float = 1.0
    clients: int = 0  # client processes; 0 = as many as fit
    pool: int = 256  # distinct prompts
    seed: int = 0
    chat_template: Optional[str] = None  # chat-3turn: the template the servers render (see chat_workload)
    headers: Dict[str, str] = field(default_factory=dict)

    def describe(self) -> Dict[str, Any]:
        out = {k: v for k, v in vars(self).items() if k != "headers"}
        out["endpoint_path"] = ENDPOINTS.get(self.endpoint, self.endpoint)
        return out

    def client_count(self, cpus: int) -> int:
        if self.clients > 0:
            return self.clients
        if self.rate is not None:
            return max(1, min(cpus, 4))
        return max(1, min(self.concurrency, cpus, 4))


class PromptMaker:
    """Random text of an exact token count, from the tokenizer's own word-like tokens.

    Random ids decode to text that may re-encode to a different number of
    tokens (pieces merge across the seams); the text is trimmed or extended
    until it encodes to exactly the length asked for.
    """

    def __init__(self, tokenizer: Any, seed: int = 0, sample: int = 4096):
        self.tok = tokenizer
        self.rnd = random.Random(seed)
        n = tokenizer.vocab_size
        candidates = self.rnd.sample(range(n), min(n, sample))
        self.words = [i for i in candidates if self._wordlike(i)]
        if len(self.words) < 16:
            raise ValueError("this tokenizer has too few plain-text tokens to make prompts from")
        self.specials = len(tokenizer.encode("hello")) - len(tokenizer.encode("hello", add_special_tokens=False))

    def _wordlike(self, token_id: int) -> bool:
        if token_id in self.tok.added_token_ids:
            return False
        text = self.tok.decode([token_id])
        stripped = text.strip()
        return (len(stripped) >= 2 and stripped.isalnum() and stripped.isascii()
                and self.tok.encode(text, add_special_tokens=False) == [token_id])

    def _random_text(self, n: int) -> str:
        return self.tok.decode([self.rnd.choice(self.words) for _ in range(max(1, n))])

    def make(self, n_tokens: int) -> str:
        """Text that the server will count as ``n_tokens`` tokens (or as close as the tokenizer allows)."""
        want = max(1, n_tokens - self.specials)
        text = self._random_text(want)
        for _ in range(64):
            ids = self.tok.encode(text, add_special_tokens=False)
            if len(ids) == want:
                return text
            if len(ids) > want:
                text = self.tok.decode(ids[:want])
            else:
                text += self._random_text(want - len(ids))
        return text  # within a token or two; the server reports the real count


def read_prompts(path: str) -> List[Dict[str, Any]]:
    """A JSONL file: each line a string, or an object with "prompt" (or "text") and
    optionally "output_len" (or "max_tokens")."""
    out = []
    with open(path, encoding="utf-8") as f:
        for n, line in enumerate(f, 1):
            if not line.strip():
                continue
            item = json.loads(line)
            if isinstance(item, str):
                item = {"prompt": item}
            prompt = item.get("prompt", item.get("text")) if isinstance(item, dict) else None
            if not isinstance(prompt, str):
                raise ValueError(f"{path}:{n}: expected a string or an object with a 'prompt' string")
            out.append({"prompt": prompt, "output_len": item.get("output_len", item.get("max_tokens"))})
    if not out:
        raise ValueError(f"{path}: no prompts")
    return out


def request_body(kind: str, prompt: str, output_len: int, stream: bool) -> Dict[str, Any]:
    """The JSON body of one request, in the shape each endpoint takes."""
    if kind == "generate":
        body: Dict[str, Any] = {"text": prompt, "sampling_params": {"max_new_tokens": output_len, "ignore_eos": True}}
        if stream:
            body["stream"] = True
        return body
    if kind == "completions":
        body = {"prompt": prompt, "max_tokens": output_len, "ignore_eos": True}
        if stream:
            body.update(stream=True, stream_options={"include_usage": True})
        return body
    if kind == "tokenize":
        return {"prompt": prompt}
    if kind in ("chat", "chat-tools"):
        return chat_body(kind, prompt, output_len, stream)
    raise ValueError(f"unknown endpoint {kind!r}; choose from {', '.join(ENDPOINTS)} or mixed")


# "chat-tools": the user's message is what a reasoning model calling a tool says, so a
# server started with examples/chat_template_echo_last.jinja and the echo engine
# (``--chat-template ... --tool-call-parser qwen25 --reasoning-parser deepseek-r1``)
# streams it back through both parsers: reasoning, the answer, then the call.
BENCH_TOOLS = [{"type": "function", "function": {"name": "get_weather", "parameters": {
    "type": "object", "properties": {"city": {"type": "string"}}}}}]
BENCH_CALL = '\n<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>'


def chat_body(kind: str, prompt: str, output_len: int, stream: bool) -> Dict[str, Any]:
    if kind == "chat-tools":
        prompt = "<think>The user wants the weather.</think>" + prompt + BENCH_CALL
    body: Dict[str, Any] = {"messages": [{"role": "user", "content": prompt}], "max_tokens": output_len,
                            "ignore_eos": True}
    if kind == "chat-tools":
        body["tools"] = BENCH_TOOLS
    if stream:
        body.update(stream=True, stream_options={"include_usage": True})
    return body


def build_plans(workload: Workload, tokenizer: Any, target: Target) -> List[Plan]:
    """The pool of requests the clients cycle through."""
    if workload.endpoint == chat_workload.ENDPOINT:
        return chat_plans(workload, tokenizer, target)
    if workload.prompts_file:
        items = read_prompts(workload.prompts_file)
        counts = [len(ids) for ids in tokenizer.encode_batch([i["prompt"] for i in items])]
    else:
        maker = prompt_maker(workload, tokenizer)
        items = [{"prompt": maker.make(workload.input_len), "output_len": None} for _ in range(workload.pool)]
        counts = [workload.input_len] * len(items)
    kinds = _kinds(workload)
    plans = []
    for i, (item, n_in) in enumerate(zip(items, counts)):
        kind, stream = kinds[i % len(kinds)]
        n_out = item["output_len"] or workload.output_len
        body = json.dumps(request_body(kind, item["prompt"], n_out, stream)).encode()
        plans.append(Plan(build_request(target, ENDPOINTS[kind], body, workload.headers), n_in,
                          0 if kind == "tokenize" else n_out, stream, len(item["prompt"].encode("utf-8"))))
    return plans


def chat_plans(workload: Workload, tokenizer: Any, target: Target) -> List[Plan]:
    if not workload.chat_template:
        raise ValueError(f"--endpoint {chat_workload.ENDPOINT} needs --chat-template (the model's template file)")
    return [Plan(chat_workload.plan_request(target, item, workload.stream, workload.headers), item["input_tokens"],
                 item["output_tokens"], workload.stream, item["prompt_bytes"])
            for item in chat_workload.items(workload.chat_template, tokenizer, workload.pool, workload.seed)]


def prompt_maker(workload: Workload, tokenizer: Any) -> Any:
    if workload.text == "random":
        return PromptMaker(tokenizer, workload.seed)
    return NaturalPromptMaker(tokenizer, workload.text, workload.seed)


def _kinds(workload: Workload) -> Sequence[tuple]:
    if workload.endpoint != "mixed":
        return [(workload.endpoint, workload.stream and workload.endpoint != "tokenize")]
    return [(k.split("-")[0], k.endswith("-stream")) for k in MIXED]
