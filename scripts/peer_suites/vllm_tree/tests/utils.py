"""Stand-in for vLLM's ``tests/utils.py`` (copied into the vLLM test tree by
``run.sh``): ``RemoteOpenAIServer`` starts mtok with the echo engine where vLLM's
starts ``vllm serve``; no API key on the server, as in those tests."""

import socket

import openai

import mtok_peer


class RemoteOpenAIServer:
    DUMMY_API_KEY = "token-abc123"  # vLLM's; the server checks none

    def __init__(self, model, vllm_serve_args, *, env_dict=None, max_wait_seconds=None, **_ignored):
        self.host = "127.0.0.1"
        with socket.socket() as s:
            s.bind((self.host, 0))
            self.port = s.getsockname()[1]
        self.proc = mtok_peer.launch(model, self.host, self.port, vllm_serve_args, env=env_dict,
                                     timeout=max_wait_seconds or 120)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        mtok_peer.kill(self.proc.pid)

    @property
    def url_root(self) -> str:
        return f"http://{self.host}:{self.port}"

    def url_for(self, *parts: str) -> str:
        return self.url_root + "/" + "/".join(parts)

    def get_client(self, **kwargs):
        kwargs.setdefault("timeout", 600)
        return openai.OpenAI(base_url=self.url_for("v1"), api_key=self.DUMMY_API_KEY, max_retries=0, **kwargs)

    def get_async_client(self, **kwargs):
        kwargs.setdefault("timeout", 600)
        return openai.AsyncOpenAI(base_url=self.url_for("v1"), api_key=self.DUMMY_API_KEY, max_retries=0,
                                  **kwargs)
