"""What mtok asks of every tokenizer backend, beyond the library's own behaviour."""

from __future__ import annotations

import json
import os

import pytest

from support import hf_installed
from mtok.tokenizer import DEFAULT_TOKENIZER_DIR
from mtok.tokenizer.load import load_tokenizer

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


def gemma_like_tokenizer_json(path):
    """Gemma 3's layout in small: ``<eos>`` (id 1) is a special added token,
    ``</s>`` (id 212) an ordinary one, and no side file names the eos."""
    vocab = {"<pad>": 0, "<eos>": 1, "<bos>": 2, "<unk>": 3}
    vocab.update(("w%d" % i, i) for i in range(4, 212))
    vocab["</s>"] = 212

    def added(i, content, special):
        return {"id": i, "content": content, "single_word": False, "lstrip": False, "rstrip": False,
                "normalized": False, "special": special}
    config = {"version": "1.0", "truncation": None, "padding": None,
              "added_tokens": [added(0, "<pad>", True), added(1, "<eos>", True), added(2, "<bos>", True),
                               added(3, "<unk>", True), added(212, "</s>", False)],
              "normalizer": None, "pre_tokenizer": {"type": "Whitespace"}, "post_processor": None,
              "decoder": None, "model": {"type": "WordLevel", "vocab": vocab, "unk_token": "<unk>"}}
    path.write_text(json.dumps(config))
    return str(path)


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_bare_tokenizer_json_guesses_its_eos_among_special_tokens(backend, tmp_path):
    """Issue 25: a bare Gemma-3 ``tokenizer.json`` got ``</s>`` (212, not special)
    as eos, so generation never stopped at ``<eos>``."""
    tok = load_tokenizer(gemma_like_tokenizer_json(tmp_path / "tokenizer.json"), backend)
    assert tok.eos_token_ids == {1}


@pytest.mark.parametrize("backend", BACKENDS)
def test_the_eos_guess_falls_back_to_an_ordinary_token(backend, tmp_path):
    path = tmp_path / "tokenizer.json"
    gemma_like_tokenizer_json(path)
    config = json.loads(path.read_text())
    config["added_tokens"] = [t for t in config["added_tokens"] if t["content"] != "<eos>"]
    config["model"]["vocab"]["<eos>"] = 213
    config["model"]["vocab"]["w1"] = 1
    path.write_text(json.dumps(config))
    assert load_tokenizer(str(path), backend).eos_token_ids == {212}
