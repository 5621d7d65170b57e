"""A longer, seeded fuzz of mtok's runtime against tokenizers (test_tokenizer_differential's big cousin)."""

from __future__ import annotations

import random
import sys
import unicodedata
from typing import List

import pytest

from support import import_real

tokenizers = import_real("tokenizers")

import tokenizer_families as families  # noqa: E402
from test_tokenizer_differential import (  # noqa: E402
    CASES, SHAPE_CASES, added_contents, assert_same_decoding, assert_same_encoding, load,
)

pytestmark = [pytest.mark.slow, pytest.mark.unit]


def _random_text(rng: random.Random, pool: List[str], contents: List[str]) -> str:
    out = []
    for _ in range(rng.randint(0, 40)):
        r = rng.random()
        if r < 0.6:
            out.append(rng.choice(FUZZ_PIECES))
        elif r < 0.85:
            out.append(rng.choice(pool))
        elif contents:
            out.append(rng.choice(contents) + rng.choice(["", " ", "  "]))
    return "".join(out)


FUZZ_PIECES = (
    list("abc XYZ  \t\n\r'\"-_.,;:!?()[]{}<>/\\|@#$%^&*+=~`0123456789ÀéïõüßñçÆØ\u3000\xa0\x85\u2028\ufeff\x00\x1c")
    + ["\r\n", "  ", "   ", "\n\n", "'s", "'ll", "'S", "e\u0301", "👍🏽", "👨\u200d👩\u200d👧", "🇫🇷", "\u2581", "Ġ"]
    + [w for s in map(families.known_to_python, families.SCRIPTS) for w in s.split()[:4]]
)


@pytest.mark.parametrize("case", CASES + SHAPE_CASES)
def test_fuzz(case):
    ref, mine = load(case)
    rng = random.Random(f"fuzz:{case}")
    pool = [chr(c) for c in rng.sample(range(sys.maxunicode), 20000) if unicodedata.category(chr(c)) not in ("Cn", "Cs")]
    contents = added_contents(ref)
    n = ref.get_vocab_size()
    for _ in range(1000):
        text = _random_text(rng, pool, contents)
        assert_same_encoding(ref, mine, text)
        assert_same_decoding(ref, mine, ref.encode(text).ids)
        assert_same_decoding(ref, mine, [rng.randrange(n + 3) for _ in range(rng.randint(0, 30))])
