"""Stand-in for ``vllm.config``: ``ModelConfig(model=...).get_vocab_size()`` counts
the tokenizer of the model directory mtok serves, as mtok does (with added tokens)."""

from tokenizers import Tokenizer

import mtok_peer


class ModelConfig:
    def __init__(self, model, tokenizer=None, **_ignored):
        self.model = model
        self.tokenizer = tokenizer or model

    def get_vocab_size(self) -> int:
        path = mtok_peer.model_dir(self.tokenizer) + "/tokenizer.json"
        return Tokenizer.from_file(path).get_vocab_size(with_added_tokens=True)
