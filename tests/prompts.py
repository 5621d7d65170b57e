"""Deterministic, varied prompts for echo tests: many scripts, emoji, combining
marks, whitespace runs, code and numbers."""

from __future__ import annotations

import random
from typing import List

PIECES = [
    "Hello, world!", "The quick brown fox jumps over the lazy dog.", "def f(x):\n    return x ** 2\n",
    "日本語のテキスト", "中文测试，标点。", "한국어 문장입니다", "Привет, мир", "Γειά σου κόσμε",
    "مرحبا بالعالم", "שלום עולם", "नमस्ते दुनिया", "สวัสดีชาวโลก", "👍🏽", "👨‍👩‍👧‍👦", "🏳️‍🌈", "🇯🇵",
    "e\u0301", "a\u0308\u0323", "Z\u0351\u0352\u0353", "   ", "\t\t", "\n\n\n", "\r\n", "\u3000", "\u00a0",
    "3.14159", "1,000,000", "0x1F600", "2026-11-29T12:00:00Z", "{\"k\": [1, 2, 3]}", "<b>bold</b>",
    "naïve café", "ﬁ ligature", "Ω≈ç√∫", "𝔘𝔫𝔦𝔠𝔬𝔡𝔢", "\U0001F9D1\u200D\U0001F4BB", "ok", "  leading",
    "trailing  ", "MiXeD CaSe",
]


def prompts(n: int = 200, seed: int = 1234) -> List[str]:
    rnd = random.Random(seed)
    out = list(PIECES)
    while len(out) < n:
        k = rnd.randint(1, 5)
        sep = rnd.choice(["", " ", "\n", "  ", "\t"])
        out.append(sep.join(rnd.choice(PIECES) for _ in range(k)))
    return out[:n]
