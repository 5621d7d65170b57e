"""Stand-in for ``sglang.test.test_utils``: SGLang's test model names, a URL on a
free local port, and ``popen_launch_server``, which starts mtok with the echo
engine (``mtok_peer.launch``) instead of SGLang."""

import socket
import unittest
from urllib.parse import urlparse

import mtok_peer

DEFAULT_MODEL_NAME_FOR_TEST = "meta-llama/Llama-3.1-8B-Instruct"
DEFAULT_SMALL_MODEL_NAME_FOR_TEST = "meta-llama/Llama-3.2-1B-Instruct"
DEFAULT_SMALL_MODEL_NAME_FOR_TEST_QWEN = "Qwen/Qwen2.5-1.5B-Instruct"
DEFAULT_REASONING_MODEL_NAME_FOR_TEST = "deepseek-ai/DeepSeek-R1-Distill-Qwen-7B"
DEFAULT_ENABLE_THINKING_MODEL_NAME_FOR_TEST = "Qwen/Qwen3-30B-A3B"
DEFAULT_SMALL_CROSS_ENCODER_MODEL_NAME_FOR_TEST = "cross-encoder/ms-marco-MiniLM-L6-v2"

DEFAULT_TIMEOUT_FOR_SERVER_LAUNCH = 120  # mtok starts in seconds; SGLang's 600 is for loading weights
STDOUT_FILENAME = "stdout.txt"
STDERR_FILENAME = "stderr.txt"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


DEFAULT_URL_FOR_TEST = f"http://127.0.0.1:{_free_port()}"


class CustomTestCase(unittest.TestCase):
    """SGLang's adds retries on CI; a plain TestCase here."""


def popen_launch_server(model, base_url, timeout, api_key=None, other_args=(), env=None,
                        return_stdout_stderr=None, **_ignored):
    """mtok serving ``model`` at ``base_url``; the test ends it with ``kill_process_tree``."""
    url = urlparse(base_url)
    out, err = return_stdout_stderr or (None, None)
    return mtok_peer.launch(model, url.hostname, url.port, other_args, api_key=api_key, env=env,
                            stdout=out, stderr=err, timeout=timeout)
