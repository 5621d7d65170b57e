"""What mtok asks of every tokenizer backend, beyond the library's own behaviour."""

from __future__ import annotations

import json
import os

import pytest

from support import hf_installed
from mtok.tokenizer import DEFAULT_TOKENIZER_DIR, load_tokenizer

pytestmark = [pytest.mark.fast, pytest.mark.unit]

BACKENDS = ["python"] + (["hf"] if hf_installed() else [])


@pytest.mark.parametrize("backend", BACKENDS)
def test_prompts_are_never_truncated_or_padded(backend, tmp_path):
    """A file's truncation and padding settings are for training pipelines."""
    with open(os.path.join(DEFAULT_TOKENIZER_DIR, "tokenizer.json")) as f:
        config = json.load(f)
    plain = load_tokenizer(DEFAULT_TOKENIZER_DIR, backend)
    config["truncation"] = {"direction": "Right", "max_length": 4, "strategy": "LongestFirst", "stride": 0}
    config["padding"] = {"strategy": {"Fixed": 64}, "direction": "Right", "pad_to_multiple_of": None, "pad_id": 0,
                         "pad_type_id": 0, "pad_token": "<|endoftext|>"}
    (tmp_path / "tokenizer.json").write_text(json.dumps(config))
    tok = load_tokenizer(str(tmp_path), backend)
    text = "a sentence well over four tokens long, and far under sixty-four"
    assert tok.encode(text) == plain.encode(text)
    assert 4 < len(tok.encode(text)) < 64
    assert tok.encode_batch([text, "short"]) == plain.encode_batch([text, "short"])


@pytest.mark.parametrize("backend", BACKENDS)
def test_spaces_between_special_tokens(backend):
    tok = load_tokenizer(None, backend)
    eos = next(iter(tok.eos_token_ids))
    ids = tok.encode("left") + [eos] + tok.encode("right")
    assert tok.decode(ids, skip_special_tokens=False) == "left<|endoftext|>right"
    assert tok.decode(ids, skip_special_tokens=False, spaces_between_special_tokens=False) == "left<|endoftext|>right"
    assert tok.decode(ids, skip_special_tokens=True, spaces_between_special_tokens=False) == "leftright"


@pytest.mark.parametrize("backend", BACKENDS)
def test_byte_tokens_are_found(backend):
    tok = load_tokenizer(None, backend)
    assert tok.byte_token_ids == frozenset()  # byte-level BPE has none; SentencePiece files do
