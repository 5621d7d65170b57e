"""A streaming client for mtok, standard library only.

    python examples/client.py "Once upon a time" --max-tokens 32
    python examples/client.py "Hello" --openai        # via /v1/completions
"""

from __future__ import annotations

import argparse
import http.client
import json
import sys


def stream(host: str, port: int, path: str, body: dict):
    conn = http.client.HTTPConnection(host, port, timeout=60)
    conn.request("POST", path, body=json.dumps(body), headers={"Content-Type": "application/json"})
    resp = conn.getresponse()
    if resp.status != 200:
        raise SystemExit(f"HTTP {resp.status}: {resp.read().decode()}")
    for raw in resp:
        line = raw.decode().strip()
        if line.startswith("data: ") and line != "data: [DONE]":
            yield json.loads(line[6:])
    conn.close()


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("prompt")
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=30000)
    p.add_argument("--max-tokens", type=int, default=16)
    p.add_argument("--openai", action="store_true", help="use /v1/completions instead of /generate")
    a = p.parse_args()
    if a.openai:
        body = {"prompt": a.prompt, "max_tokens": a.max_tokens, "stream": True}
        for chunk in stream(a.host, a.port, "/v1/completions", body):
            sys.stdout.write(chunk["choices"][0]["text"])
            sys.stdout.flush()
    else:
        body = {"text": a.prompt, "stream": True, "sampling_params": {"max_new_tokens": a.max_tokens}}
        shown = 0
        for chunk in stream(a.host, a.port, "/generate", body):
            text = chunk["text"]  # cumulative, as in SGLang
            sys.stdout.write(text[shown:])
            sys.stdout.flush()
            shown = len(text)
    print()


if __name__ == "__main__":
    main()
