"""A checking load generator for tests: many client threads, mixed requests,
and every response compared with the echo of its own prompt."""

from __future__ import annotations

import http.client
import json
import random
import threading
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, List, Optional, Tuple

from mtok.tokenizer.load import load_tokenizer

from prompts import PIECES

KINDS = ("generate", "generate-stream", "generate-batch", "completions", "completions-stream", "tokenize")


@dataclass
class Outcome:
    kind: str
    ok: bool
    worker: Optional[int] = None
    error: str = ""
    conn_worker: int = 0  # the pid of the worker that accepted the connection


@dataclass
class LoadResult:
    outcomes: List[Outcome] = field(default_factory=list)

    @property
    def errors(self) -> List[Outcome]:
        return [o for o in self.outcomes if not o.ok]

    @property
    def workers(self) -> set:
        return {o.worker for o in self.outcomes if o.ok}


class Checker:
    """Builds request i and checks its response."""

    def __init__(self, seed: int = 0, max_new_tokens: Optional[int] = None):
        self.tok = load_tokenizer(None)
        self.rnd = random.Random(seed)
        self.max_new_tokens = max_new_tokens

    def prompt(self, i: int) -> Tuple[str, int]:
        text = f"[{i}] " + " ".join(self.rnd.choice(PIECES) for _ in range(self.rnd.randint(1, 3)))
        return text, len(self.tok.encode(text))

    def build(self, i: int, kind: str) -> Tuple[str, Dict[str, Any], Callable[[Any], bool]]:
        text, n = self.prompt(i)
        m = n if self.max_new_tokens is None else self.max_new_tokens
        want = self.tok.decode((self.tok.encode(text) * (m // n + 1))[:m])  # echo cycles through the prompt
        if kind == "generate":
            return "/generate", {"text": text, "sampling_params": {"max_new_tokens": m}}, lambda r: r["text"] == want
        if kind == "generate-stream":
            body = {"text": text, "stream": True, "sampling_params": {"max_new_tokens": m}}
            return "/generate", body, lambda ev: ev[-1] == "[DONE]" and ev[-2]["text"] == want
        if kind == "generate-batch":
            text2, n2 = self.prompt(i + 1_000_000)
            body = {"text": [text, text2], "sampling_params": [{"max_new_tokens": n}, {"max_new_tokens": n2}]}
            return "/generate", body, lambda r: [x["text"] for x in r] == [text, text2]
        if kind == "completions":
            return "/v1/completions", {"prompt": text, "max_tokens": m}, lambda r: r["choices"][0]["text"] == want
        if kind == "completions-stream":
            body = {"prompt": text, "max_tokens": m, "stream": True}
            return "/v1/completions", body, lambda ev: "".join(e["choices"][0]["text"] for e in ev[:-1]) == want
        ids = self.tok.encode(text)
        return "/tokenize", {"prompt": text}, lambda r: r["tokens"] == ids


def _exchange(conn: http.client.HTTPConnection, path: str, body: Dict[str, Any]) -> Tuple[int, int, Any]:
    conn.request("POST", path, body=json.dumps(body), headers={"Content-Type": "application/json"})
    resp = conn.getresponse()
    worker = int(resp.getheader("X-Mtok-Worker") or 0)
    if body.get("stream"):
        events = []
        for raw in resp:
            line = raw.decode().rstrip("\r\n")
            if line.startswith("data: "):
                payload = line[6:]
                events.append(payload if payload == "[DONE]" else json.loads(payload))
        return resp.status, worker, events
    return resp.status, worker, json.loads(resp.read())


def run_load(host: str, port: int, total: int, concurrency: int, kinds=KINDS, seed: int = 0,
             max_new_tokens: Optional[int] = None, stop: Optional[threading.Event] = None,
             on_outcome: Optional[Callable[[Outcome], None]] = None) -> LoadResult:
    """Send ``total`` requests (or until ``stop`` is set) from ``concurrency``
    threads, each on its own keep-alive connection, reconnecting after a failure."""
    checker = Checker(seed, max_new_tokens)
    result = LoadResult()
    lock = threading.Lock()
    next_index = [0]

    def new_conn() -> Tuple[http.client.HTTPConnection, int]:
        """A keep-alive connection and the pid of the worker that serves it
        (each connection stays with the worker that accepted it)."""
        for _ in range(100):
            conn = http.client.HTTPConnection(host, port, timeout=60)
            try:
                conn.request("GET", "/health")
                resp = conn.getresponse()
                resp.read()
                return conn, int(resp.getheader("X-Mtok-Worker") or 0)
            except (OSError, http.client.HTTPException):
                conn.close()  # accepted by a worker that has just died; try again
        raise RuntimeError("cannot connect")

    def client() -> None:
        conn, conn_worker = new_conn()
        while stop is None or not stop.is_set():
            with lock:
                i = next_index[0]
                next_index[0] += 1
            if i >= total:
                break
            kind = kinds[i % len(kinds)]
            with lock:  # the checker's random stream is shared
                path, body, check = checker.build(i, kind)
            try:
                status, worker, parsed = _exchange(conn, path, body)
                ok = status == 200 and check(parsed)
                outcome = Outcome(kind, ok, worker, "" if ok else f"{status}: {str(parsed)[:200]}", conn_worker)
            except Exception as e:  # noqa: BLE001 - every failure is recorded, not raised
                outcome = Outcome(kind, False, conn_worker, f"{type(e).__name__}: {e}", conn_worker)
                conn.close()
                conn, conn_worker = new_conn()
            with lock:
                result.outcomes.append(outcome)
            if on_outcome is not None:
                on_outcome(outcome)
        conn.close()

    threads = [threading.Thread(target=client, daemon=True) for _ in range(concurrency)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(300)
    return result
