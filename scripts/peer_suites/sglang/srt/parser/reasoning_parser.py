"""Stand-in for ``sglang.srt.parser.reasoning_parser``: ``ReasoningParser(name)``
with only ``detector.think_end_token`` (what ``test_usage_tokens.py`` reads)."""

from types import SimpleNamespace

THINK_END = {"deepseek-r1": "</think>", "qwen3": "</think>", "qwen3-thinking": "</think>", "glm45": "</think>",
             "kimi": "\u25c1/think\u25b7"}


class ReasoningParser:
    def __init__(self, model_type, stream_reasoning=True, force_reasoning=None):
        if model_type not in THINK_END:
            raise ValueError(f"Unsupported model type: {model_type}")
        self.detector = SimpleNamespace(think_end_token=THINK_END[model_type])
