"""``python -m mtok.bench chat``: chat template render time, mtok's engine beside jinja2.

    python -m mtok.bench chat [--template FILE ...] [--backend python,jinja2] [--seconds 0.3]

Renders each template (a ``tokenizer_config.json``-style JSON with ``chat_template``, or
a raw Jinja file; by default a built-in Qwen-style template with tools and, where
present, the real ones in ../shared/chat_templates) for two conversations: a typical
3-turn chat (system, user, assistant, user) and one with tools (two tool definitions,
a tool call, its result).  ``jinja2`` is jinja2's own ``Template.render`` in
transformers' environment (without the budget mtok's jinja2 backend renders under).
Each backend's template is compiled once; the figure is
the time per ``render`` call, the fastest of ``--repeat`` runs of about ``--seconds``
each.  ``ratio`` is python / jinja2 (the issue's goal: at most 2).  Both backends'
outputs are checked to be equal.

``--budget`` instead renders the largest realistic contexts (101 messages of 1 KB with
20 tools; 31 messages of 100 KB with 20 tools) through ``ChatTemplate.measure`` and
reports what each render spent of its budget (CPU time, steps, memory built): the
figures the defaults of ``--chat-template-max-cpu-seconds`` and
``--chat-template-max-memory-mib`` are sized against.
"""

from __future__ import annotations

import argparse
import json
import os
import time
from typing import Any, Dict, List, Optional, Tuple

from mtok.chat import ChatTemplate, available_backends, jinja2_backend

from .report import table, write_json

SHARED_TEMPLATES = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))),
                                "..", "shared", "chat_templates")

# Written for this benchmark in the style of Qwen2.5's template (ChatML with tools).
BUILTIN_TEMPLATE = r"""{%- if tools %}
    {{- '<|im_start|>system\n' }}
    {%- if messages[0]['role'] == 'system' %}
        {{- messages[0]['content'] }}
    {%- else %}
        {{- 'You are a helpful assistant.' }}
    {%- endif %}
    {{- "\n\n# Tools\n\nYou may call one or more functions.\n<tools>" }}
    {%- for tool in tools %}
        {{- "\n" }}
        {{- tool | tojson }}
    {%- endfor %}
    {{- "\n</tools><|im_end|>\n" }}
{%- elif messages[0]['role'] == 'system' %}
    {{- '<|im_start|>system\n' + messages[0]['content'] + '<|im_end|>\n' }}
{%- endif %}
{%- for message in messages %}
    {%- if (message.role == "user") or (message.role == "system" and not loop.first) or (message.role == "assistant" and not message.tool_calls) %}
        {{- '<|im_start|>' + message.role + '\n' + message.content + '<|im_end|>' + '\n' }}
    {%- elif message.role == "assistant" %}
        {{- '<|im_start|>' + message.role }}
        {%- if message.content %}
            {{- '\n' + message.content }}
        {%- endif %}
        {%- for tool_call in message.tool_calls %}
            {%- if tool_call.function is defined %}
                {%- set tool_call = tool_call.function %}
            {%- endif %}
            {{- '\n<tool_call>\n{"name": "' }}
            {{- tool_call.name }}
            {{- '", "arguments": ' }}
            {{- tool_call.arguments | tojson }}
            {{- '}\n</tool_call>' }}
        {%- endfor %}
        {{- '<|im_end|>\n' }}
    {%- elif message.role == "tool" %}
        {%- if (loop.index0 == 0) or (messages[loop.index0 - 1].role != "tool") %}
            {{- '<|im_start|>user' }}
        {%- endif %}
        {{- '\n<tool_response>\n' + message.content + '\n</tool_response>' }}
        {%- if loop.last or (messages[loop.index0 + 1].role != "tool") %}
            {{- '<|im_end|>\n' }}
        {%- endif %}
    {%- endif %}
{%- endfor %}
{%- if add_generation_prompt %}
    {{- '<|im_start|>assistant\n' }}
{%- endif %}
"""

_TOOLS = [{"type": "function", "function": {"name": name, "description": f"{name} something useful",
                                             "parameters": {"type": "object", "properties": {
                                                 "city": {"type": "string", "description": "a city"},
                                                 "days": {"type": "integer"}}, "required": ["city"]}}}
          for name in ("get_weather", "get_time")]
WORKLOADS: Dict[str, Dict[str, Any]] = {
    "3-turn": {"messages": [
        {"role": "system", "content": "You are a helpful assistant."},
        {"role": "user", "content": "What is the capital of France?"},
        {"role": "assistant", "content": "The capital of France is Paris."},
        {"role": "user", "content": "And what is its population?"}], "add_generation_prompt": True},
    "tools": {"messages": [
        {"role": "user", "content": "What's the weather in Paris?"},
        {"role": "assistant", "content": "", "tool_calls": [
            {"id": "call_0001", "type": "function",
             "function": {"name": "get_weather", "arguments": {"city": "Paris", "days": 1}}}]},
        {"role": "tool", "tool_call_id": "call_0001", "content": "{\"temp\": 21, \"sky\": \"clear\"}"}],
        "tools": _TOOLS, "add_generation_prompt": True},
}


def _big_conversation(turns: int, chars: int) -> List[Dict[str, Any]]:
    """A system prompt and ``turns`` user/assistant messages of about ``chars`` characters each."""
    words = "the quick brown fox jumps over a lazy dog while reading logs at noon "
    text = (words * (chars // len(words) + 1))[:chars]
    roles = ("user", "assistant")
    return [{"role": "system", "content": text}] + [{"role": roles[i % 2], "content": f"{i}: {text}"}
                                                    for i in range(turns)]


_MANY_TOOLS = [{"type": "function", "function": {"name": f"tool_{i}", "description": f"tool number {i} " * 8,
                                                  "parameters": _TOOLS[0]["function"]["parameters"]}}
               for i in range(20)]
# --budget: the largest realistic contexts (the output stays under the 4 MiB limit)
BIG_WORKLOADS: Dict[str, Dict[str, Any]] = {
    "101 msgs, 20 tools": {"messages": _big_conversation(100, 1000), "tools": _MANY_TOOLS,
                           "add_generation_prompt": True},
    "31 x 100 KB, 20 tools": {"messages": _big_conversation(30, 100_000), "tools": _MANY_TOOLS,
                              "add_generation_prompt": True},
}
BUDGET_COLUMNS = [("template", "template"), ("conversation", "conversation"), ("backend", "backend"),
                  ("ms/render", "ms_per_render"), ("CPU ms", "cpu_ms"), ("steps", "steps"),
                  ("MiB built", "mib_built"), ("out KiB", "out_kib")]
COLUMNS = [("template", "template"), ("conversation", "conversation"), ("backend", "backend"),
           ("us/render", "us_per_render"), ("compile ms", "compile_ms"), ("ratio", "ratio")]


def load_templates(paths: List[str]) -> List[Tuple[str, str, Dict[str, Any]]]:
    """(name, source, special tokens) for each path; the defaults when there are none."""
    if not paths:
        out = [("builtin-qwen-style", BUILTIN_TEMPLATE, {})]
        if os.path.isdir(SHARED_TEMPLATES):
            paths = [os.path.join(SHARED_TEMPLATES, n) for n in sorted(os.listdir(SHARED_TEMPLATES))
                     if n.endswith(".json")]
        return out + load_templates(paths) if paths else out
    out = []
    for path in paths:
        with open(path, encoding="utf-8") as f:
            text = f.read()
        name = os.path.splitext(os.path.basename(path))[0]
        if path.endswith(".json"):
            data = json.loads(text)
            special = {k: v for k, v in data.items() if k.endswith("_token") and isinstance(v, str)}
            out.append((name, data["chat_template"], special))
        else:
            out.append((name, text, {}))
    return out


def calibrate(template: Any, context: Dict[str, Any], seconds: float) -> int:
    """How many renders take about ``seconds``."""
    n, start = 0, time.perf_counter()
    while time.perf_counter() - start < seconds / 4:
        template.render(**context)
        n += 1
    return max(1, n * 4)


def time_renders(templates: Dict[str, Any], context: Dict[str, Any], seconds: float,
                 repeat: int) -> Dict[str, float]:
    """Seconds per render for each backend: the fastest of ``repeat`` runs, the backends taking turns
    (so that a noisy neighbour slows them alike)."""
    counts = {b: calibrate(t, context, seconds) for b, t in templates.items()}
    best = {b: float("inf") for b in templates}
    for _ in range(repeat):
        for backend, template in templates.items():
            start = time.perf_counter()
            for _ in range(counts[backend]):
                template.render(**context)
            best[backend] = min(best[backend], (time.perf_counter() - start) / counts[backend])
    return best


def compile_and_check(source: str, backends: List[str], context: Dict[str, Any]) -> Tuple[Dict, Dict, Dict]:
    """Each backend's template (compiled once, timed), and its output for ``context``."""
    templates, compile_ms, outputs = {}, {}, {}
    for backend in backends:
        start = time.perf_counter()
        if backend == "jinja2":  # the reference: jinja2's own Template.render, without mtok's limits around it
            template = jinja2_backend.make_environment(budgeted=False).from_string(source)
        else:
            template = ChatTemplate(source, backend=backend)
        compile_ms[backend] = (time.perf_counter() - start) * 1000
        try:
            outputs[backend] = template.render(**context)
        except Exception as exc:  # some templates refuse a conversation shape (e.g. no system role)
            outputs[backend] = "error"
            continue
        templates[backend] = template
    return templates, compile_ms, outputs


def measure(name: str, source: str, special: Dict[str, Any], backends: List[str], seconds: float,
            repeat: int) -> List[Dict[str, Any]]:
    rows = []
    for conv, context in WORKLOADS.items():
        context = {**special, **context}
        templates, compile_ms, outputs = compile_and_check(source, backends, context)
        same = len(set(outputs.values())) <= 1
        times = time_renders(templates, context, seconds, repeat)
        for backend, secs in times.items():
            row = {"template": name, "conversation": conv, "backend": backend,
                   "us_per_render": round(secs * 1e6, 2), "compile_ms": round(compile_ms[backend], 2),
                   "chars": len(outputs[backend]), "same_output": same}
            if "jinja2" in times and backend != "jinja2":
                row["ratio"] = round(secs / times["jinja2"], 2)
            rows.append(row)
    return rows


def measure_budget(name: str, source: str, special: Dict[str, Any], backends: List[str],
                   repeat: int) -> List[Dict[str, Any]]:
    """What rendering the big contexts spends of the render budget: the fastest of ``repeat`` renders
    (wall and thread CPU time), its steps and the memory it was charged."""
    rows = []
    for conv, context in BIG_WORKLOADS.items():
        for backend in backends:
            template = ChatTemplate(source, backend=backend)
            best = None
            for _ in range(repeat):
                wall, cpu = time.perf_counter(), time.thread_time()
                try:
                    text, spent = template.measure({**special, **context})
                except Exception:  # the template refuses this conversation's shape
                    break
                wall, cpu = time.perf_counter() - wall, time.thread_time() - cpu
                if best is None or wall < best["ms_per_render"] / 1000:
                    best = {"template": name, "conversation": conv, "backend": backend,
                            "ms_per_render": round(wall * 1000, 1), "cpu_ms": round(cpu * 1000, 1),
                            "steps": spent.steps, "mib_built": round(spent.memory / 2 ** 20, 1),
                            "out_kib": len(text) // 1024}
            if best is not None:
                rows.append(best)
    return rows


def main(argv: Optional[List[str]] = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m mtok.bench chat", description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--template", action="append", default=[], help="a template file (repeatable)")
    parser.add_argument("--backend", default=",".join(reversed(available_backends())),
                        help="backends to measure (default: python and, where installed, jinja2)")
    parser.add_argument("--seconds", type=float, default=0.3, help="length of one timed run (default 0.3)")
    parser.add_argument("--repeat", type=int, default=5, help="runs; the fastest counts (default 5)")
    parser.add_argument("--budget", action="store_true",
                        help="instead: what the largest realistic contexts spend of the render budget")
    parser.add_argument("--json", metavar="OUT")
    args = parser.parse_args(argv)
    rows: List[Dict[str, Any]] = []
    for backend in args.backend.split(","):
        ChatTemplate("{{ x }}", backend=backend).render(x=1)  # imports, so compile_ms is the template's own
    if args.budget:
        for name, source, special in load_templates(args.template):
            rows += measure_budget(name, source, special, args.backend.split(","), max(1, args.repeat))
        print(table(rows, BUDGET_COLUMNS))
        write_json(args.json, "chat-budget", vars(args), rows)
        return 0
    for name, source, special in load_templates(args.template):
        rows += measure(name, source, special, args.backend.split(","), args.seconds, max(1, args.repeat))
    print(table(rows, COLUMNS))
    write_json(args.json, "chat", vars(args), rows)
    return 0 if all(r.get("same_output", True) for r in rows) else 1
