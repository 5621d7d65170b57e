"""Stand-in for the ``vllm`` package: just what vLLM's model-free
``tests/entrypoints/openai`` tests import (``scripts/peer_suites.md``)."""
