"""Stand-in for vLLM's ``tests/entrypoints/openai/test_completion.py`` (copied into
the vLLM test tree by ``run.sh``): only the ``zephyr_lora_files`` fixture, which
``test_tokenization.py`` imports and does not use.  No tests here."""

import pytest


@pytest.fixture(scope="module")
def zephyr_lora_files():
    pytest.skip("mtok serves no LoRA adapters")
