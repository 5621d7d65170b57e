"""The SentencePiece-BPE shape (Llama-2, Mistral, Phi-3, Gemma) against ``tokenizers`` on the
edges its fast paths touch: the text cut at ``▁`` runs and merged chunk by chunk (cached), unknown
characters mapped to byte tokens, whitespace runs, the ``▁`` mark in the input, long chunks,
empty text and added tokens around spaces.

Shapes: the Llama-2/Mistral/Phi-3 normalizer (Prepend + Replace), Gemma's (Replace only),
Phi-3's added tokens (rstrip), no byte fallback, a vocabulary that merges across ``▁`` (not cut);
trained here, and Mistral-7B's real file from ``../shared/tokenizers`` when present.
"""

from __future__ import annotations

import functools
import json
import os

import pytest

from support import ROOT, import_real, skip_real

tokenizers = import_real("tokenizers")

from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

import tokenizer_families as families  # noqa: E402
from mtok.tokenizer.pyrt import Tokenizer  # noqa: E402

pytestmark = [pytest.mark.fast, pytest.mark.unit]

MARK = "\u2581"
MISTRAL = os.path.join(ROOT, "..", "shared", "tokenizers", "mistral-7b-v0.1.json")
PHI3_TOKENS = [("<|user|>", True), ("<|assistant|>", True), ("<|end|>", True), ("<|system|>", True)]


@functools.lru_cache(maxsize=None)
def _trained() -> str:
    """Llama-2's shape on a vocabulary trained on ``▁``-led words, as SentencePiece's are, so
    that the model can be cut at each ``▁`` run (families.sentencepiece_bpe's merges join across)."""
    from tokenizers import Tokenizer as HF, models, pre_tokenizers, trainers

    tok = HF(models.BPE(unk_token="<unk>", fuse_unk=True))
    tok.pre_tokenizer = pre_tokenizers.Metaspace(replacement=MARK, prepend_scheme="always", split=True)
    trainer = trainers.BpeTrainer(vocab_size=600, special_tokens=["<unk>", "<s>", "</s>"], limit_alphabet=150,
                                  show_progress=False)
    tok.train_from_iterator(families.training_texts(6), trainer)
    config = json.loads(families.sentencepiece_bpe())
    config["model"] = json.loads(families._add_byte_tokens(tok.to_str()))["model"]
    config["added_tokens"] = [t for t in config["added_tokens"] if t["content"] in ("<unk>", "<s>", "</s>")]
    return json.dumps(config)


def _llama() -> dict:
    return json.loads(_trained())


def _joined() -> dict:
    return json.loads(families.trained("sentencepiece_bpe"))  # merges across "▁": merged whole


def _gemma() -> dict:
    config = _llama()
    config["normalizer"] = {"type": "Replace", "pattern": {"String": " "}, "content": MARK}
    return config


def _phi3() -> dict:
    config = _llama()
    next_id = max(config["model"]["vocab"].values()) + 1 + len(config["added_tokens"])
    for i, (content, rstrip) in enumerate(PHI3_TOKENS):
        config["added_tokens"].append({"id": next_id + i, "content": content, "single_word": False, "lstrip": False,
                                       "rstrip": rstrip, "normalized": False, "special": True})
    return config


def _no_fallback() -> dict:
    config = _llama()
    config["model"]["byte_fallback"] = False
    return config


def _mistral() -> dict:
    if not os.path.exists(MISTRAL):
        skip_real(f"no {MISTRAL} (../shared/tokenizers is absent in a fresh clone elsewhere)")
    with open(MISTRAL, encoding="utf-8") as f:
        return json.load(f)


def _bytes_merged() -> dict:
    """A merge of two byte tokens (newline, newline): unknown characters' bytes may
    then merge, so the model must merge over them, not only between them."""
    config = _llama()
    vocab = config["model"]["vocab"]
    vocab["<0x0A><0x0A>"] = max(vocab.values()) + 1 + len(config["added_tokens"])
    config["model"]["merges"].insert(0, ["<0x0A>", "<0x0A>"] if isinstance(config["model"]["merges"][0], list)
                                     else "<0x0A> <0x0A>")
    return config


SHAPES = {"llama": _llama, "joined": _joined, "gemma": _gemma, "phi3": _phi3, "no_fallback": _no_fallback,
          "mistral": _mistral, "bytes_merged": _bytes_merged}
# the shapes where no merge touches a byte token, so runs between unknown characters merge apart
INERT_BYTES = {"llama", "joined", "gemma", "phi3", "mistral"}
_loaded: dict = {}


def load(shape: str):
    """(tokenizers.Tokenizer, pyrt Tokenizer) for a shape, loaded once."""
    if shape not in _loaded:
        text = json.dumps(SHAPES[shape]())
        _loaded[shape] = (tokenizers.Tokenizer.from_str(text), Tokenizer.from_str(text))
    return _loaded[shape]


def edge_texts(added: list) -> list:
    texts = [
        "", " ", "  ", "     x", "x     ", "a  b   c", " " * 300 + "end", "end" + " " * 300, "\t\n \n",
        MARK, MARK * 3, f"{MARK}{MARK}x {MARK}y", f"x{MARK}", f"x {MARK} y", f"{MARK} ",
        "🫠 😀 ꙮ 𝔘 \x00 \x7f \ufffd", "\U0010fffd", "zzzzqqqqxxxx" * 30, "a" * 300, "ab" * 200,
        "我能吞下玻璃而不伤身体。" * 30, "Hello 世界  🌍 and 다람쥐 헌 쳇바퀴에", "line\nnext\r\n  indented",
    ]
    texts += [s for s in families.SCRIPTS]
    for tok in added:
        texts += [tok, f"{tok} x", f"x{tok}", f"  {tok}  ", f"{tok}{tok}", f"{tok}\n{tok} ", f"a {tok}  b"]
    return texts


def _added(ref) -> list:
    return [t.content for _, t in sorted(ref.get_added_tokens_decoder().items())]


@pytest.mark.parametrize("shape", sorted(SHAPES))
def test_edges_equal_to_tokenizers(shape):
    ref, mine = load(shape)
    assert (mine.model._cuts is None) == (shape == "joined")  # cut at "▁" runs wherever that is exact
    assert mine.model._inert_bytes == (shape in INERT_BYTES)
    for text in edge_texts(_added(ref)):
        for add in (True, False):
            expected = ref.encode(text, add_special_tokens=add).ids
            assert mine.encode(text, add_special_tokens=add) == expected, (text, add)
            assert mine.encode(text, add_special_tokens=add) == expected, (text, add)  # from the caches


_pieces = st.one_of(
    st.text(st.characters(blacklist_categories=("Cs", "Cn")), max_size=10),
    st.sampled_from([" ", "  ", "    ", MARK, MARK + MARK, "\n", "\t", "the", " the", "ab", "🫠", "世界", "<|end|>"]),
)


@pytest.mark.parametrize("shape", ["llama", "gemma", "phi3"])
@settings(max_examples=60, deadline=None, suppress_health_check=list(HealthCheck))
@given(parts=st.lists(_pieces, max_size=10))
def test_random_text_equal_to_tokenizers(shape, parts):
    ref, mine = load(shape)
    text = "".join(parts)
    assert mine.encode(text) == ref.encode(text).ids
