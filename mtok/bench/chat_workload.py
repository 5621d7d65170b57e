"""The ``chat-3turn`` workload: a three-turn chat with two tools, through the model's own template.

Each conversation is a system prompt, a user question, the assistant's answer
and a second user message, with two tools declared (``get_weather``,
``get_time``).  The echo engine reads the prompt back, so the "model" says the
whole rendered conversation; the request's ``max_tokens`` cuts it right after
the last message, whose text is what a reasoning model calling a tool says::

    <think>\\n...\\n</think>\\n\\nanswer\\n<tool_call>\\n{"name": ..., "arguments": ...}\\n</tool_call>

With ``--reasoning-parser qwen3`` (thinking on, as the chat path assumes: the
template opened the block) everything up to ``</think>`` is the reasoning —
the system prompt and the tools as the template wrote them, then the earlier
turns, then the thought; with ``--tool-call-parser qwen25`` the rest is the
answer and one call.  So every request renders the real template, tokenizes a
few hundred tokens, streams them back through the detokenizer and both parsers.

The cut is found by tokenizing the prompt up to the call's end: it must be a
prefix of the prompt's tokens (true when the call's end is an added token, as
in Qwen's tokenizers, or a pre-tokenizer boundary; the message ends with a
newline so that byte-level BPE files split there too).  :func:`check` asks each
server once, streamed and not, and says whether they give the same parsed
reply, and the reply the conversation was written to produce.
"""

from __future__ import annotations

import http.client
import json
import random
from typing import Any, Dict, List, Optional, Tuple

from .http_client import Target, build_request

ENDPOINT = "chat-3turn"

TOOLS = [
    {"type": "function", "function": {
        "name": "get_weather", "description": "Get the current weather in a city.",
        "parameters": {"type": "object", "properties": {
            "city": {"type": "string", "description": "the city's name"},
            "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}}, "required": ["city"]}}},
    {"type": "function", "function": {
        "name": "get_time", "description": "Get the local time in a city.",
        "parameters": {"type": "object", "properties": {
            "city": {"type": "string", "description": "the city's name"}}, "required": ["city"]}}},
]
CITIES = ("Paris", "Tokyo", "Lima", "Oslo", "Nairobi", "Seoul", "Montréal", "Kraków", "Hanoi", "Quito",
          "Dublin", "Perth", "Cairo", "Bogotá", "Reykjavík", "Chennai")
ASKS = (("get_weather", "the weather", "Is it a good day for a walk in {city}?", {"unit": "celsius"}),
        ("get_time", "the local time", "Can I still call my friend in {city} today?", {}))


def conversation(rnd: random.Random) -> Tuple[List[Dict[str, Any]], Dict[str, str], str, str]:
    """(messages, the call the reply makes, the reply's answer, the thought) of one conversation."""
    city = rnd.choice(CITIES)
    tool, what, question, extra = rnd.choice(ASKS)
    args = dict({"city": city}, **extra)
    thought = f"The user asks about {what} in {city}. {tool} answers that; I call it first."
    answer = f"Let me look up {what} in {city}."
    last = (f"<think>\n{thought}\n</think>\n\n{answer}\n<tool_call>\n"
            f"{json.dumps({'name': tool, 'arguments': args}, ensure_ascii=False)}\n</tool_call>\n")
    messages = [
        {"role": "system", "content": "You are a helpful travel assistant. Use the tools when they help."},
        {"role": "user", "content": question.format(city=city)},
        {"role": "assistant", "content": f"I can check {what} in {city} for you, or anything else there."},
        {"role": "user", "content": last},
    ]
    return messages, {"name": tool, "arguments": json.dumps(args, ensure_ascii=False)}, answer, thought


def load_template(path: str) -> Tuple[str, Dict[str, str]]:
    """The template (the tool-use one where a file names several) and the special tokens a JSON file holds."""
    from mtok.chat_templates import read_template_file, special_tokens

    templates = read_template_file(path)
    source = templates.get("tool_use") or templates.get("default") or next(iter(templates.values()))
    special: Dict[str, str] = {}
    if path.endswith(".json"):
        with open(path, encoding="utf-8") as f:
            data = json.load(f)
        special = special_tokens(data) if isinstance(data, dict) else {}
    return source, special


def items(template_path: str, tokenizer: Any, pool: int, seed: int) -> List[Dict[str, Any]]:
    """``pool`` conversations, each with its request fields, its prompt's size and the reply's length."""
    from mtok.chat import ChatTemplate

    source, special = load_template(template_path)
    template = ChatTemplate(source, backend="python")
    rnd = random.Random(seed)
    out = []
    for _ in range(pool):
        messages, call, answer, thought = conversation(rnd)
        prompt = template.render(messages=messages, tools=TOOLS, add_generation_prompt=True, **special)
        ids = tokenizer.encode(prompt, add_special_tokens=False)
        end = prompt.rfind("\n</tool_call>") + len("\n</tool_call>")
        head = tokenizer.encode(prompt[:end], add_special_tokens=False)
        if end < len("\n</tool_call>") or ids[:len(head)] != head:
            raise ValueError(f"{template_path}: the prompt's tokens do not split after the last message's tool "
                             "call with this tokenizer, so the echo cannot be cut to the reply")
        out.append({"messages": messages, "input_tokens": len(ids), "output_tokens": len(head),
                    "prompt_bytes": len(prompt.encode("utf-8")),
                    "expect": {"content": answer, "calls": [call], "reasoning_ends": thought + "\n"}})
    return out


def body(item: Dict[str, Any], stream: bool) -> Dict[str, Any]:
    out: Dict[str, Any] = {"messages": item["messages"], "tools": TOOLS, "max_tokens": item["output_tokens"],
                           "ignore_eos": True}
    if stream:
        out.update(stream=True, stream_options={"include_usage": True})
    return out


# -- the check: both servers' replies, parsed -------------------------------------------------

def reply_of_json(payload: Dict[str, Any]) -> Dict[str, Any]:
    choice = payload["choices"][0]
    message = choice["message"]
    calls = [{"name": c["function"]["name"], "arguments": c["function"]["arguments"]}
             for c in message.get("tool_calls") or ()]
    return {"reasoning": message.get("reasoning_content") or "", "content": message.get("content") or "",
            "calls": calls, "finish_reason": choice["finish_reason"],
            "completion_tokens": payload["usage"]["completion_tokens"]}


def reply_of_stream(events: List[Dict[str, Any]]) -> Dict[str, Any]:
    """The deltas of a stream folded into one reply (calls by index: the name, the arguments' pieces)."""
    reasoning, content, calls, finish, tokens = [], [], {}, None, None
    for event in events:
        if event.get("usage"):
            tokens = event["usage"]["completion_tokens"]
        for choice in event.get("choices") or ():
            delta = choice.get("delta") or {}
            reasoning.append(delta.get("reasoning_content") or "")
            content.append(delta.get("content") or "")
            for call in delta.get("tool_calls") or ():
                slot = calls.setdefault(call["index"], {"name": "", "arguments": ""})
                fn = call.get("function") or {}
                slot["name"] += fn.get("name") or ""
                slot["arguments"] += fn.get("arguments") or ""
            finish = choice.get("finish_reason") or finish
    return {"reasoning": "".join(reasoning), "content": "".join(content),
            "calls": [calls[i] for i in sorted(calls)], "finish_reason": finish, "completion_tokens": tokens}


def ask(target: Target, request: Dict[str, Any], timeout: float = 60.0) -> Dict[str, Any]:
    """One chat request's reply, parsed; streamed or not as the request says."""
    conn = http.client.HTTPConnection(target.host, target.port, timeout=timeout)
    try:
        conn.request("POST", "/v1/chat/completions", json.dumps(request), {"Content-Type": "application/json"})
        resp = conn.getresponse()
        raw = resp.read().decode("utf-8")
    finally:
        conn.close()
    if resp.status != 200:
        raise RuntimeError(f"HTTP {resp.status}: {raw[:500]}")
    if not request.get("stream"):
        return reply_of_json(json.loads(raw))
    events = [json.loads(line[6:]) for line in raw.split("\n")
              if line.startswith("data: ") and line[6:].strip() != "[DONE]"]
    return reply_of_stream(events)


def replies(target: Target, item: Dict[str, Any]) -> Dict[str, Dict[str, Any]]:
    return {"stream": ask(target, body(item, True)), "json": ask(target, body(item, False))}


def expected(item: Dict[str, Any], reply: Dict[str, Any]) -> List[str]:
    """What in ``reply`` is not what the conversation was written to make the model say."""
    want, wrong = item["expect"], []
    if reply["calls"] != want["calls"]:
        wrong.append(f"tool calls {reply['calls']!r}, not {want['calls']!r}")
    if reply["content"] != want["content"]:
        wrong.append(f"content {reply['content']!r}, not {want['content']!r}")
    if not reply["reasoning"].endswith(want["reasoning_ends"]):
        wrong.append(f"reasoning ending {reply['reasoning'][-80:]!r}, not in {want['reasoning_ends']!r}")
    if reply["completion_tokens"] != item["output_tokens"]:
        wrong.append(f"{reply['completion_tokens']} completion tokens, not {item['output_tokens']}")
    return wrong


def compare_replies(item: Dict[str, Any], got: Dict[str, Dict[str, Dict[str, Any]]]) -> List[str]:
    """The differences between the servers' replies and from the expected one (empty: all agree)."""
    problems = []
    kinds = list(got)
    for kind in kinds:
        for mode, reply in got[kind].items():
            problems += [f"{kind} ({mode}): {w}" for w in expected(item, reply)]
    first = got[kinds[0]]["stream"]
    for kind in kinds:
        for mode, reply in got[kind].items():
            if reply != first:
                diff = [k for k in reply if reply[k] != first[k]]
                problems.append(f"{kind} ({mode}) differs from {kinds[0]} (stream) in {', '.join(diff)}")
    return problems


def plan_request(target: Target, item: Dict[str, Any], stream: bool, headers: Optional[dict] = None) -> bytes:
    return build_request(target, "/v1/chat/completions", json.dumps(body(item, stream)).encode(), headers)


def check(configs: List[Any], template_path: str, tokenizer_path: Optional[str], backend: str = "auto",
          seed: int = 0) -> Dict[str, Any]:
    """Start each server in turn and ask it one conversation, streamed and not: the replies,
    and the problems (empty when every reply is the expected one, the same on every server)."""
    from .servers import ServerProcess, tokenizer_for

    got: Dict[str, Dict[str, Dict[str, Any]]] = {}
    item: Optional[Dict[str, Any]] = None
    for config in configs:
        with ServerProcess(config) as server:
            if item is None:
                tokenizer = tokenizer_for(server.target, tokenizer_path, backend)
                item = items(template_path, tokenizer, 1, seed)[0]
            got[config.kind] = replies(server.target, item)
    assert item is not None
    return {"replies": got, "problems": compare_replies(item, got), "prompt_tokens": item["input_tokens"],
            "reply_tokens": item["output_tokens"]}
