"""mtok's own ``tokenizer.json`` runtime, in pure Python.

It loads the same files as HuggingFace ``tokenizers`` and gives the same ids and
text, for the components listed in the ``*_from_json`` tables of its modules::

    tok = Tokenizer.from_file("tokenizer.json")
    ids = tok.encode("Hello world")
    text = tok.decode(ids)
"""

from .. import TokenizerError
from .added_vocab import AddedToken
from .tokenizer import Tokenizer

__all__ = ["AddedToken", "Tokenizer", "TokenizerError"]
