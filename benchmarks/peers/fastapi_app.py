"""The peer: the frontend people write themselves, with FastAPI, uvicorn and ``tokenizers``.

It serves the same endpoints in the same shapes as mtok (``/generate``,
``/v1/completions``, ``/tokenize``, ``/health``), tokenizes with the same
``tokenizers`` fast path mtok's ``hf`` backend uses (``encode_batch_fast``),
talks to an echo engine process over ZMQ, and detokenizes streams
incrementally with ``tokenizers.decoders.DecodeStream`` in the HTTP worker.
It is written the way a careful person would: pydantic models for the bodies,
``JSONResponse`` without FastAPI's generic encoder, one asyncio task per
worker reading the engine's replies.

Configuration comes from the environment because uvicorn imports this module
in each worker: PEER_TOKENIZER, PEER_ENGINE, PEER_IPC_DIR, PEER_MODEL_NAME,
PEER_CONTEXT_LENGTH (set by ``fastapi_server.py``).
"""

from __future__ import annotations

import asyncio
import json
import os
import time
import uuid
from contextlib import asynccontextmanager
from typing import Any, AsyncIterator, Dict, List, Optional, Tuple, Union

import zmq
import zmq.asyncio
from fastapi import FastAPI
from fastapi.responses import JSONResponse, StreamingResponse
from pydantic import BaseModel, ConfigDict
from tokenizers import Tokenizer
from tokenizers.decoders import DecodeStream

TOKENIZER = Tokenizer.from_file(os.environ["PEER_TOKENIZER"])
MODEL = os.environ.get("PEER_MODEL_NAME", "mtok-default")
CONTEXT_LENGTH = int(os.environ.get("PEER_CONTEXT_LENGTH", "65536"))
VOCAB = TOKENIZER.get_vocab_size(with_added_tokens=True)


class SamplingParams(BaseModel):
    model_config = ConfigDict(extra="allow")  # the sampling knobs travel to a real engine; the echo ignores them
    max_new_tokens: int = 128
    ignore_eos: bool = False
    skip_special_tokens: bool = True


class GenerateRequest(BaseModel):
    text: Optional[str] = None
    input_ids: Optional[List[int]] = None
    sampling_params: SamplingParams = SamplingParams()
    stream: bool = False
    rid: Optional[str] = None


class CompletionRequest(BaseModel):
    model_config = ConfigDict(extra="allow")
    prompt: Union[str, List[int]]
    max_tokens: int = 16
    stream: bool = False
    ignore_eos: bool = False
    skip_special_tokens: bool = True
    stream_options: Optional[Dict[str, Any]] = None
    model: Optional[str] = None


class TokenizeRequest(BaseModel):
    prompt: str
    add_special_tokens: bool = True


class EngineClient:
    """This worker's two sockets: requests out to the engine, replies in by rid."""

    def __init__(self) -> None:
        self.addr = f"ipc://{os.environ['PEER_IPC_DIR']}/worker-{os.getpid()}"
        self.push = zmq.Context.instance().socket(zmq.PUSH)
        self.push.connect(os.environ["PEER_ENGINE"])
        self.pull = zmq.asyncio.Context.instance().socket(zmq.PULL)
        self.pull.bind(self.addr)
        self.queues: Dict[str, asyncio.Queue] = {}
        self.task = asyncio.get_running_loop().create_task(self.recv_loop())

    async def recv_loop(self) -> None:
        while True:
            for rid, tok, finish, n_prompt, n_out in await self.pull.recv_pyobj():
                q = self.queues.get(rid)
                if q is not None:
                    q.put_nowait((tok, finish, n_out))

    async def generate(self, ids: List[int], max_new: int, ignore_eos: bool) -> AsyncIterator[Tuple]:
        """(token, finish reason or None, completion tokens) per step; closing early aborts."""
        rid = uuid.uuid4().hex
        q: asyncio.Queue = asyncio.Queue()
        self.queues[rid] = q
        self.push.send_pyobj(("generate", rid, ids, max_new, ignore_eos, self.addr))
        finished = False
        try:
            while not finished:
                item = await q.get()
                finished = item[1] is not None
                yield item
        finally:
            del self.queues[rid]
            if not finished:
                self.push.send_pyobj(("abort", rid))


engine: Optional[EngineClient] = None


@asynccontextmanager
async def lifespan(app: FastAPI):
    global engine
    engine = EngineClient()
    yield
    engine.task.cancel()


app = FastAPI(lifespan=lifespan)


def error(message: str, status: int = 400) -> JSONResponse:
    return JSONResponse({"error": {"message": message, "type": "invalid_request_error", "code": status}}, status)


def encode(text: str, add_special_tokens: bool = True) -> List[int]:
    return TOKENIZER.encode_batch_fast([text], add_special_tokens=add_special_tokens)[0].ids


def check(ids: List[int], max_new: int) -> Optional[JSONResponse]:
    if not ids:
        return error("the prompt is empty")
    if len(ids) + max_new > CONTEXT_LENGTH:
        return error(f"this model's maximum context length is {CONTEXT_LENGTH} tokens")
    if any(not 0 <= t < VOCAB for t in ids):
        return error("token id out of range")
    return None


async def collect(steps: AsyncIterator[Tuple]) -> Tuple[List[int], Any]:
    """Every token of a non-streaming request, and how it finished."""
    out: List[int] = []
    finish = None
    async for tok, finish, _ in steps:
        if tok is not None:
            out.append(tok)
    return out, finish


def sse(obj: Any) -> str:
    return f"data: {obj if isinstance(obj, str) else json.dumps(obj, ensure_ascii=False)}\n\n"


@app.get("/health")
async def health() -> JSONResponse:
    return JSONResponse({"status": "ok"})


@app.post("/tokenize")
async def tokenize(req: TokenizeRequest) -> JSONResponse:
    tokens = encode(req.prompt, req.add_special_tokens)
    return JSONResponse({"tokens": tokens, "count": len(tokens), "max_model_len": CONTEXT_LENGTH})


@app.post("/generate")
async def generate(req: GenerateRequest):
    sp = req.sampling_params
    ids = encode(req.text) if req.text is not None else (req.input_ids or [])
    bad = check(ids, sp.max_new_tokens)
    if bad is not None:
        return bad
    created = time.monotonic()
    steps = engine.generate(ids, sp.max_new_tokens, sp.ignore_eos)
    rid = req.rid or uuid.uuid4().hex

    def result(text: str, out: List[int], finish: Any) -> Dict[str, Any]:
        meta = {"id": rid, "finish_reason": finish, "prompt_tokens": len(ids), "completion_tokens": len(out)}
        if finish is not None:
            meta["e2e_latency"] = round(time.monotonic() - created, 6)
        return {"text": text, "output_ids": list(out), "meta_info": meta}

    if not req.stream:
        out, finish = await collect(steps)
        return JSONResponse(result(TOKENIZER.decode(out, skip_special_tokens=sp.skip_special_tokens), out, finish))

    async def events() -> AsyncIterator[str]:
        decoder = DecodeStream(skip_special_tokens=sp.skip_special_tokens)
        text, out = "", []
        async for tok, finish, _ in steps:
            if tok is not None:
                out.append(tok)
                text += decoder.step(TOKENIZER, tok) or ""
            yield sse(result(text, out, finish))
        yield sse("[DONE]")

    return StreamingResponse(events(), media_type="text/event-stream")


@app.post("/v1/completions")
async def completions(req: CompletionRequest):
    if req.model is not None and req.model != MODEL:
        return error(f"the model {req.model!r} does not exist", 404)
    ids = encode(req.prompt) if isinstance(req.prompt, str) else req.prompt
    bad = check(ids, req.max_tokens)
    if bad is not None:
        return bad
    head = {"id": f"cmpl-{uuid.uuid4().hex}", "object": "text_completion", "created": int(time.time()),
            "model": MODEL}
    steps = engine.generate(ids, req.max_tokens, req.ignore_eos)

    def usage(n_out: int) -> Dict[str, int]:
        return {"prompt_tokens": len(ids), "completion_tokens": n_out, "total_tokens": len(ids) + n_out}

    if not req.stream:
        out, finish = await collect(steps)
        choice = {"index": 0, "text": TOKENIZER.decode(out, skip_special_tokens=req.skip_special_tokens),
                  "logprobs": None, "finish_reason": finish["type"], "stop_reason": finish.get("matched")}
        return JSONResponse(dict(head, choices=[choice], usage=usage(len(out))))

    include_usage = bool((req.stream_options or {}).get("include_usage"))

    async def chunks() -> AsyncIterator[str]:
        decoder = DecodeStream(skip_special_tokens=req.skip_special_tokens)
        n_out = 0
        async for tok, finish, n_out in steps:
            delta = (decoder.step(TOKENIZER, tok) or "") if tok is not None else ""
            if finish is None and not delta:
                continue
            choice = {"index": 0, "text": delta, "logprobs": None,
                      "finish_reason": finish and finish["type"], "stop_reason": finish and finish.get("matched")}
            chunk = dict(head, choices=[choice])
            if include_usage:
                chunk["usage"] = None
            yield sse(chunk)
        if include_usage:
            yield sse(dict(head, choices=[], usage=usage(n_out)))
        yield sse("[DONE]")

    return StreamingResponse(chunks(), media_type="text/event-stream")
