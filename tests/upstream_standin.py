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
"stop_reason", "logprobs": {"content": [{"token_id", "logprob", "top_logprobs"}]}}]}``;
with ``"stream": false`` one JSON answer of the same choice (every id) and, when
``sampling_params.prompt_logprobs`` is k, ``prompt_logprobs``: null, then per
position ``{id: {logprob, rank, decoded_token}}`` (:func:`prompt_lp`).

The "model" echoes the prompt, cycling, so outputs are predictable; its logprob
for the token at output position p is ``-0.5 * (p + 1)``.  ``behaviour`` switches
errors, slowness and dying on; ``max_model_len`` goes on its ``/v1/models``
card; ``behaviour["says"] = ids`` answers those ids
instead, ended by the model's eos (a constrained answer, canned); ``seen``
records each request body and ``cancelled`` the streams whose client went away.

``behaviour["hostile"] = NAME`` answers the next requests as a broken or
hostile upstream would (the ``hostile_NAME`` methods: an endless line, endless
events, silence, a drip, a reset, a redirect...).  Each is bounded -- a loop
of at most ``HOSTILE_BYTES`` bytes or ``HOSTILE_SECONDS`` seconds that also ends
when the client goes away or :meth:`StandIn.stop` is called -- so a stand-in
always stops by itself.
"""

from __future__ import annotations

import json
import socket
import struct
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Dict, List, Optional


HOSTILE_BYTES = 512 << 20  # the most an endless line or body sends before giving up
HOSTILE_SECONDS = 30.0  # the longest a silent or dripping stream stays open
BEYOND_VOCAB = 10 ** 9


def lp(p: int) -> float:
    return -0.5 * (p + 1)


def prompt_lp(p: int) -> float:
    """The stand-in vLLM's logprob of the prompt token at position p (>= 1); the id after it is
    ranked first, 0.5 better, so the token itself is second and further ones follow."""
    return -0.25 * (p + 1)


class StandIn:
    kind = ""

    def __init__(self, port: int = 0, max_model_len: Optional[int] = None):
        self.max_model_len = max_model_len  # on its /v1/models card, when given (both servers' cards carry one)
        self.behaviour: Dict[str, Any] = {}
        self.seen: List[Dict[str, Any]] = []
        self.cancelled = 0
        self.active = 0
        self.max_active = 0
        self.lock = threading.Lock()
        self.closing = threading.Event()  # stop(): the hostile streams that wait give up
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
                if self.path == "/v1/models":
                    card = {"id": "standin", "object": "model", "max_model_len": outer.max_model_len}
                    outer.reply(self, 200, {"object": "list", "data": [card]})
                    return
                if outer.behaviour.get("drip_health"):  # a status line, then the head a byte at a time
                    self.wfile.write(b"HTTP/1.1 200 OK\r\n")
                    for _ in range(int(HOSTILE_SECONDS / 0.2)):
                        if outer.closing.wait(0.2):
                            break
                        self.wfile.write(b"X")
                        self.wfile.flush()
                    self.close_connection = True
                    return
                if outer.behaviour.get("endless_health"):
                    outer.head(self, 200, "application/json", {"Content-Length": str(HOSTILE_BYTES)})
                    try:
                        for _ in range(HOSTILE_BYTES // 65536):
                            self.wfile.write(b" " * 65536)
                    except OSError:
                        pass
                    self.close_connection = True
                    return
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
        self.closing.set()
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
        if b.get("hostile"):
            try:
                getattr(self, "hostile_" + b["hostile"])(h, body, prompt)
            except OSError:  # the client went away: the point of most of these
                h.close_connection = True
            return
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
        says = b.get("says")  # canned output (a constrained answer), ended as the model's eos ends it
        source = says or prompt
        limit = min(self.max_tokens(params), len(says)) if says else self.max_tokens(params)
        stops = set(params.get("stop_token_ids") or ())
        for p in range(limit):
            time.sleep(b.get("delay", 0.0))
            tok = source[p % len(source)]
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
            if says and p + 1 == len(says):
                finish = self.eos()
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

    # -- hostile upstreams (behaviour["hostile"]) -------------------------------------
    @staticmethod
    def head(h: BaseHTTPRequestHandler, status: int = 200, ctype: str = "text/event-stream",
             extra: Optional[Dict[str, str]] = None) -> None:
        h.send_response(status)
        h.send_header("Content-Type", ctype)
        for k, v in (extra or {"Transfer-Encoding": "chunked"}).items():
            h.send_header(k, v)
        h.end_headers()

    @staticmethod
    def chunk(h: BaseHTTPRequestHandler, data: bytes) -> None:
        h.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
        h.wfile.flush()

    def endless(self, h: BaseHTTPRequestHandler, start: bytes, filler: bytes) -> None:
        """``start``, then ``filler`` until HOSTILE_BYTES went out or the client left."""
        self.chunk(h, start)
        for _ in range(HOSTILE_BYTES // len(filler)):
            self.chunk(h, filler)
        h.close_connection = True

    def first_event(self, h: BaseHTTPRequestHandler, body: Dict[str, Any], prompt: List[int]) -> None:
        self.head(h)
        self.event(h, self.make_event(body, prompt, prompt[:1], None))

    def hostile_endless_line(self, h: BaseHTTPRequestHandler, body: Dict[str, Any], prompt: List[int]) -> None:
        self.head(h)
        self.endless(h, b'data: {"output_ids": [', b"1," * 32768)

    def hostile_endless_events(self, h: BaseHTTPRequestHandler, body: Dict[str, Any], prompt: List[int]) -> None:
        self.head(h)
        data = b"data: " + json.dumps(self.empty_event()).encode() + b"\n\n"
        self.endless(h, data, data * 64)

    def hostile_endless_blank_lines(self, h: BaseHTTPRequestHandler, body: Dict[str, Any], prompt: List[int]) -> None:
        self.first_event(h, body, prompt)
        self.endless(h, b"\n", b"\n" * 65536)

    def hostile_huge_error(self, h: BaseHTTPRequestHandler, body: Dict[str, Any], prompt: List[int]) -> None:
        self.head(h, 500, "application/json")
        self.endless(h, b'{"error": {"message": "', b"x" * 65536)

    def hostile_silent(self, h: BaseHTTPRequestHandler, body: Dict[str, Any], prompt: List[int]) -> None:
        """One event, then the stream stays open and says nothing (vLLM draining)."""
        self.first_event(h, body, prompt)
        self.closing.wait(HOSTILE_SECONDS)
        h.close_connection = True

    def hostile_drip(self, h: BaseHTTPRequestHandler, body: Dict[str, Any], prompt: List[int]) -> None:
        """One event, then one byte of the next every 0.2 s, never a whole line."""
        self.first_event(h, body, prompt)
        for _ in range(int(HOSTILE_SECONDS / 0.2)):
            if self.closing.wait(0.2):
                break
            self.chunk(h, b"d")
        h.close_connection = True

    def hostile_slow_first(self, h: BaseHTTPRequestHandler, body: Dict[str, Any], prompt: List[int]) -> None:
        """A long prefill: the first event after behaviour["first_delay"] s, then a normal stream."""
        self.closing.wait(self.behaviour["first_delay"])
        self.stream(h, body, prompt, self.prompt_and_params(body)[1])

    def hostile_reset(self, h: BaseHTTPRequestHandler, body: Dict[str, Any], prompt: List[int]) -> None:
        self.first_event(h, body, prompt)
        h.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        h.connection.close()  # with SO_LINGER 0: an RST, not a FIN
        h.close_connection = True

    def hostile_malformed(self, h: BaseHTTPRequestHandler, body: Dict[str, Any], prompt: List[int]) -> None:
        self.head(h)
        self.chunk(h, b'data: {"output_ids": [5, \n\n')

    def hostile_not_an_object(self, h: BaseHTTPRequestHandler, body: Dict[str, Any], prompt: List[int]) -> None:
        self.head(h)
        self.chunk(h, b"data: [1, 2]\n\n")

    def hostile_wrong_types(self, h: BaseHTTPRequestHandler, body: Dict[str, Any], prompt: List[int]) -> None:
        self.head(h)
        self.event(h, self.wrong_types_event())

    def hostile_beyond_vocab(self, h: BaseHTTPRequestHandler, body: Dict[str, Any], prompt: List[int]) -> None:
        self.head(h)
        self.event(h, self.make_event(body, prompt, [prompt[0], BEYOND_VOCAB], None))

    def hostile_after_finish(self, h: BaseHTTPRequestHandler, body: Dict[str, Any], prompt: List[int]) -> None:
        self.head(h)
        self.event(h, self.make_event(body, prompt, prompt[:1], self.finish(-1, set(), 1, 1)))
        self.event(h, self.make_event(body, prompt, prompt[:1] * 2, None))
        self.event(h, None)
        self.chunk(h, b"")

    def hostile_bad_logprobs(self, h: BaseHTTPRequestHandler, body: Dict[str, Any], prompt: List[int]) -> None:
        self.head(h)
        self.event(h, self.bad_logprobs_event(body, prompt))

    def hostile_redirect(self, h: BaseHTTPRequestHandler, body: Dict[str, Any], prompt: List[int]) -> None:
        self.head(h, 307, "text/plain", {"Location": "http://127.0.0.1:9/elsewhere", "Content-Length": "0"})

    def hostile_json_body(self, h: BaseHTTPRequestHandler, body: Dict[str, Any], prompt: List[int]) -> None:
        """A whole JSON answer where an event stream was asked for."""
        self.reply(h, 200, self.make_event(body, prompt, prompt[:1], self.finish(-1, set(), 1, 1)))

    def hostile_no_body(self, h: BaseHTTPRequestHandler, body: Dict[str, Any], prompt: List[int]) -> None:
        self.head(h, 200, "text/event-stream", {"Content-Length": "0"})

    def hostile_huge_header(self, h: BaseHTTPRequestHandler, body: Dict[str, Any], prompt: List[int]) -> None:
        self.head(h, 200, "text/event-stream", {"X-Junk": "j" * (1 << 20), "Transfer-Encoding": "chunked"})

    def hostile_huge_chunk_size(self, h: BaseHTTPRequestHandler, body: Dict[str, Any], prompt: List[int]) -> None:
        self.head(h)
        for _ in range(HOSTILE_BYTES // 65536):
            h.wfile.write(b"0" * 65536)  # a chunk-size line that never ends

    def empty_event(self) -> Dict[str, Any]:
        """An event with no new token and no finish."""
        raise NotImplementedError

    def wrong_types_event(self) -> Dict[str, Any]:
        raise NotImplementedError

    def bad_logprobs_event(self, body: Dict[str, Any], prompt: List[int]) -> Dict[str, Any]:
        raise NotImplementedError

    def finish(self, tok: int, stops: set, n: int, limit: int) -> Optional[Dict[str, Any]]:
        raise NotImplementedError

    def eos(self) -> Dict[str, Any]:
        """The finish of an output the model ended itself."""
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

    def eos(self) -> Dict[str, Any]:
        return {"type": "stop", "matched": None}

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
            if body.get("token_ids_logprob"):  # asked by id: -1, -2, ... in the order asked (how /v1/score reads)
                asked = [[[-1.0 - i, t, None] for i, t in enumerate(body["token_ids_logprob"])] for _ in out]
                meta["output_token_ids_logprobs"] = asked[-1:] if incremental else asked
            start = body.get("logprob_start_len", -1)
            if start >= 0:
                meta["input_token_logprobs"] = [[None if p == 0 else -0.25, t, None]
                                                for p, t in enumerate(prompt) if p >= start]
        return {"output_ids": out[-1:] if incremental else list(out), "meta_info": meta}


    def empty_event(self) -> Dict[str, Any]:
        return {"output_ids": [], "meta_info": {"completion_tokens": 0, "finish_reason": None}}

    def wrong_types_event(self) -> Dict[str, Any]:
        return {"output_ids": "abc", "meta_info": {"completion_tokens": "3", "finish_reason": None}}

    def bad_logprobs_event(self, body: Dict[str, Any], prompt: List[int]) -> Dict[str, Any]:
        """Rows whose logprobs are not numbers, and prompt rows for more positions than the prompt has."""
        event = self.make_event(body, prompt, prompt[:1], None)
        event["meta_info"]["output_token_logprobs"] = [["high", prompt[0], None]]
        event["meta_info"]["input_token_logprobs"] = [[-1.0, t, None] for t in prompt * 3]
        return event


class VLLMStandIn(StandIn):
    kind = "vllm"

    def stream(self, h: BaseHTTPRequestHandler, body: Dict[str, Any], prompt: List[int], params: Dict[str, Any]) -> None:
        if body.get("stream") is not False:
            super().stream(h, body, prompt, params)
            return
        limit, stops, out, finish = self.max_tokens(params), set(params.get("stop_token_ids") or ()), [], None
        for p in range(limit):
            out.append(prompt[p % len(prompt)])
            finish = self.finish(out[-1], stops, p + 1, limit)
            if finish is not None:
                break
        events = [self.make_event(body, prompt, out[:p + 1], None)["choices"][0] for p in range(len(out))]
        choice = dict(events[-1], token_ids=out, **finish)
        if choice["logprobs"] is not None:
            choice["logprobs"] = {"content": [c for e in events for c in e["logprobs"]["content"]]}
        answer: Dict[str, Any] = {"request_id": "standin", "choices": [choice], "prompt_logprobs": None}
        k = params.get("prompt_logprobs")
        if k is not None:
            answer["prompt_logprobs"] = [None] + [self.prompt_entry(p, t, k) for p, t in enumerate(prompt) if p]
        self.reply(h, 200, answer)

    @staticmethod
    def prompt_entry(p: int, tok: int, k: int) -> Dict[str, Any]:
        own = prompt_lp(p)
        entry = {str(tok + 1): {"logprob": own + 0.5, "rank": 1, "decoded_token": None},
                 str(tok): {"logprob": own, "rank": 2, "decoded_token": None}}
        for i in range(2, k):
            entry[str(tok + i)] = {"logprob": own - i, "rank": i + 1, "decoded_token": None}
        return entry

    def prompt_and_params(self, body: Dict[str, Any]) -> Any:
        return body.get("token_ids"), body.get("sampling_params") or {}

    def max_tokens(self, params: Dict[str, Any]) -> int:
        return params.get("max_tokens", 16)

    def finish(self, tok: int, stops: set, n: int, limit: int) -> Optional[Dict[str, Any]]:
        if tok in stops:
            return {"finish_reason": "stop", "stop_reason": tok}
        return {"finish_reason": "length", "stop_reason": None} if n >= limit else None

    def eos(self) -> Dict[str, Any]:
        return {"finish_reason": "stop", "stop_reason": None}

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

    def empty_event(self) -> Dict[str, Any]:
        return {"request_id": "standin", "choices": [{"index": 0, "token_ids": [], "finish_reason": None}]}

    def wrong_types_event(self) -> Dict[str, Any]:
        return {"request_id": "standin", "choices": [{"index": 0, "token_ids": "abc", "finish_reason": None}]}

    def bad_logprobs_event(self, body: Dict[str, Any], prompt: List[int]) -> Dict[str, Any]:
        """A row whose logprob is not a number and whose top list names ids beyond the vocabulary."""
        tok = prompt[0]
        top = [{"token_id": BEYOND_VOCAB, "logprob": "high", "rank": 1}]
        return {"request_id": "standin", "choices": [{"index": 0, "token_ids": [tok], "finish_reason": None,
                                                       "logprobs": {"content": [{"token_id": tok, "logprob": "x",
                                                                                 "top_logprobs": top}]}}]}
