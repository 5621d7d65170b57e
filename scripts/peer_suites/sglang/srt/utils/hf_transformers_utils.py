"""Stand-in for ``sglang.srt.utils.hf_transformers_utils``: ``get_tokenizer`` gives
transformers' fast tokenizer on the model directory mtok serves (the tests' reference)."""

from transformers import PreTrainedTokenizerFast

import mtok_peer


def get_tokenizer(tokenizer_name, *args, **kwargs):
    return PreTrainedTokenizerFast.from_pretrained(mtok_peer.model_dir(tokenizer_name))
