"""Stand-ins for upstream servers, answering as their sources say they do.

``SGLangStandIn`` is an SGLang server started with ``--skip-tokenizer-init``
(sglang 0.5.23, ``srt/managers/tokenizer_manager.py`` ``_handle_batch_output``,
the ``BatchTokenIDOutput`` branch; ``srt/entrypoints/http_server.py``
``generate_request``): ``/generate`` takes ``input_ids``, refuses text, and
answers ``{"output_ids", "meta_info"}`` with no ``text``; streams are
``data: {...}\\n\\n`` events, cumulative (or incremental with
``incremental=True``), then ``data: [DONE]``; logprob triples are
``[logprob, id, None]``; errors are ``{"error": {"message"}}`` bodies or, in a
stream, an ``{"error": {...}}`` event.

``VLLMStandIn`` is vLLM 0.33's token-in/token-out ``/inference/v1/generate``
(``entrypoints/scale_out/token_in_token_out``): ``token_ids`` in, streamed
``{"request_id", "choices": [{"index", "token_ids" (new ones), "finish_reason",
"stop_reason", "logprobs": {"content": [{"token_id", "logprob", "top_logprobs"}]}}]}``.

The "model" echoes the prompt, cycling, so outputs are predictable; its logprob
for the token at output position p is ``-0.5 * (p + 1)``.  ``behaviour`` switches
errors, slowness and dying on; ``seen`` records each request body and
``cancelled`` the streams whose client went away.
"""

from __future__ import annotations

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Dict, List, Optional


def lp(p: int) -> float:
    return -0.5 * (p + 1)


class StandIn:
    kind = ""

    def __init__(self, port: int = 0):
        self.behaviour: Dict[str, Any] = {}
        self.seen: List[Dict[str, Any]] = []
        self.cancelled = 0
        self.active = 0
        self.max_active = 0
        self.lock = threading.Lock()
        self.server = self._serve(port)
        self.port = self.server.server_address[1]
        self.url = f"http://127.0.0.1:{self.port}"

    def _serve(self, port: int) -> ThreadingHTTPServer:
        outer = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *a: Any) -> None:
                pass

            def do_GET(self) -> None:
                healthy = not outer.behaviour.get("unhealthy")
                outer.reply(self, 200 if healthy else 503, {} if healthy else {"error": {"message": "warming up"}})

            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))) or b"{}")
                outer.post(self, self.path, body)

        server = ThreadingHTTPServer(("127.0.0.1", port), Handler)
        server.daemon_threads = True
        threading.Thread(target=server.serve_forever, daemon=True).start()
        return server

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()

    # -- answering -------------------------------------------------------------------
    @staticmethod
    def reply(h: BaseHTTPRequestHandler, status: int, body: Any) -> None:
        data = json.dumps(body).encode()
        h.send_response(status)
        h.send_header("Content-Type", "application/json")
        h.send_header("Content-Length", str(len(data)))
        h.end_headers()
        h.wfile.write(data)

    def post(self, h: BaseHTTPRequestHandler, path: str, body: Dict[str, Any]) -> None:
        if path == "/flush_cache":
            self.flushed = getattr(self, "flushed", 0) + 1
            self.reply(h, 200, {})
            return
        with self.lock:
            self.seen.append(body)
        b = self.behaviour
        if b.get("status"):
            self.reply(h, b["status"], {"error": {"message": b.get("message", "upstream says no")}})
            return
        prompt, params = self.prompt_and_params(body)
        if not prompt:
            self.reply(h, 400, {"error": {"message": "give token ids"}})
            return
        with self.lock:
            self.active += 1
            self.max_active = max(self.max_active, self.active)
        try:
            self.stream(h, body, prompt, params)
        except (BrokenPipeError, ConnectionResetError):
            with self.lock:
                self.cancelled += 1
        finally:
            with self.lock:
                self.active -= 1

    def stream(self, h: BaseHTTPRequestHandler, body: Dict[str, Any], prompt: List[int], params: Dict[str, Any]) -> None:
        h.send_response(200)
        h.send_header("Content-Type", "text/event-stream")
        h.send_header("Transfer-Encoding", "chunked")
        h.end_headers()
        b, out = self.behaviour, []
        limit = self.max_tokens(params)
        stops = set(params.get("stop_token_ids") or ())
        for p in range(limit):
            time.sleep(b.get("delay", 0.0))
            tok = prompt[p % len(prompt)]
            out.append(tok)
            if b.get("die_after") is not None and p >= b["die_after"]:
                h.wfile.write(b"40\r\ndata: {\"output_i")  # half an event, then the connection drops
                h.wfile.flush()
                h.close_connection = True
                h.connection.close()
                return
            if b.get("error_after") is not None and p >= b["error_after"]:
                self.event(h, {"error": {"message": "out of memory", "code": 500}})
                break
            finish = self.finish(tok, stops, p + 1, limit)
            self.event(h, self.make_event(body, prompt, out, finish))
            if finish is not None:
                break
        self.event(h, None)
        h.wfile.write(b"0\r\n\r\n")
        h.wfile.flush()
        if b.get("drop_idle"):  # close the kept-alive connection without saying so
            h.close_connection = True

    @staticmethod
    def event(h: BaseHTTPRequestHandler, obj: Optional[Dict[str, Any]]) -> None:
        data = b"data: " + (b"[DONE]" if obj is None else json.dumps(obj).encode()) + b"\n\n"
        h.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
        h.wfile.flush()

    def finish(self, tok: int, stops: set, n: int, limit: int) -> Optional[Dict[str, Any]]:
        raise NotImplementedError

    def prompt_and_params(self, body: Dict[str, Any]) -> Any:
        raise NotImplementedError

    def max_tokens(self, params: Dict[str, Any]) -> int:
        raise NotImplementedError

    def make_event(self, body: Dict[str, Any], prompt: List[int], out: List[int], finish: Any) -> Dict[str, Any]:
        raise NotImplementedError


class SGLangStandIn(StandIn):
    kind = "sglang"

    def prompt_and_params(self, body: Dict[str, Any]) -> Any:
        return body.get("input_ids"), body.get("sampling_params") or {}

    def max_tokens(self, params: Dict[str, Any]) -> int:
        return params.get("max_new_tokens", 128)

    def finish(self, tok: int, stops: set, n: int, limit: int) -> Optional[Dict[str, Any]]:
        if tok in stops:
            return {"type": "stop", "matched": tok}
        return {"type": "length", "length": n} if n >= limit else None

    def make_event(self, body: Dict[str, Any], prompt: List[int], out: List[int], finish: Any) -> Dict[str, Any]:
        incremental = self.behaviour.get("incremental")
        meta: Dict[str, Any] = {"id": "standin", "finish_reason": finish, "prompt_tokens": len(prompt),
                                "completion_tokens": len(out), "cached_tokens": 0}
        if body.get("return_logprob"):
            rows = [[lp(p), t, None] for p, t in enumerate(out)]
            meta["output_token_logprobs"] = rows[-1:] if incremental else rows
            if body.get("top_logprobs_num"):
                tops = [[[lp(p), t, None]] + [[lp(p) - 1 - i, t + 1 + i, None]
                                              for i in range(body["top_logprobs_num"] - 1)] for p, t in enumerate(out)]
                meta["output_top_logprobs"] = tops[-1:] if incremental else tops
            start = body.get("logprob_start_len", -1)
            if start >= 0:
                meta["input_token_logprobs"] = [[None if p == 0 else -0.25, t, None]
                                                for p, t in enumerate(prompt) if p >= start]
        return {"output_ids": out[-1:] if incremental else list(out), "meta_info": meta}


class VLLMStandIn(StandIn):
    kind = "vllm"

    def prompt_and_params(self, body: Dict[str, Any]) -> Any:
        return body.get("token_ids"), body.get("sampling_params") or {}

    def max_tokens(self, params: Dict[str, Any]) -> int:
        return params.get("max_tokens", 16)

    def finish(self, tok: int, stops: set, n: int, limit: int) -> Optional[Dict[str, Any]]:
        if tok in stops:
            return {"finish_reason": "stop", "stop_reason": tok}
        return {"finish_reason": "length", "stop_reason": None} if n >= limit else None

    def make_event(self, body: Dict[str, Any], prompt: List[int], out: List[int], finish: Any) -> Dict[str, Any]:
        p, tok = len(out) - 1, out[-1]
        choice: Dict[str, Any] = {"index": 0, "token_ids": [tok], "finish_reason": None, "stop_reason": None,
                                  "logprobs": None}
        choice.update(finish or {})
        k = (body.get("sampling_params") or {}).get("logprobs")
        if k is not None:  # the sampled token first, then the top k (here: it is the best, then tok+1, ...)
            top = [{"token_id": tok, "logprob": lp(p), "rank": 1}] + [
                {"token_id": tok + i, "logprob": lp(p) - i, "rank": i + 1} for i in range(1, k)]
            choice["logprobs"] = {"content": [{"token_id": tok, "logprob": lp(p), "rank": 1, "top_logprobs": top}]}
        return {"request_id": "standin", "choices": [choice]}
