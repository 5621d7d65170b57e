"""The peer: the frontend people write themselves, with FastAPI, uvicorn and ``tokenizers``.

It serves the same endpoints in the same shapes as mtok (``/generate``,
``/v1/completions``, ``/v1/chat/completions``, ``/tokenize``, ``/health``), tokenizes with the same
``tokenizers`` fast path mtok's ``hf`` backend uses (``encode_batch_fast``),
talks to an echo engine process over ZMQ, and detokenizes streams
incrementally with ``tokenizers.decoders.DecodeStream`` in the HTTP worker.
It is written the way a careful person would: pydantic models for the bodies,
``JSONResponse`` without FastAPI's generic encoder, one asyncio task per
worker reading the engine's replies.  Chat renders the model's template with
jinja2 as transformers does and parses the output's reasoning and tool calls
(``fastapi_chat.py``), streamed token by token like everything else.

Configuration comes from the environment because uvicorn imports this module
in each worker: PEER_TOKENIZER, PEER_ENGINE, PEER_IPC_DIR, PEER_MODEL_NAME,
PEER_CONTEXT_LENGTH, PEER_TOKENIZER_DIR, PEER_CHAT_TEMPLATE, PEER_TOOL_PARSER,
PEER_REASONING_PARSER (set by ``fastapi_server.py``).
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

import fastapi_chat as chat

TOKENIZER = Tokenizer.from_file(os.environ["PEER_TOKENIZER"])
MODEL = os.environ.get("PEER_MODEL_NAME", "mtok-default")
CONTEXT_LENGTH = int(os.environ.get("PEER_CONTEXT_LENGTH", "65536"))
VOCAB = TOKENIZER.get_vocab_size(with_added_tokens=True)
TEMPLATE_SOURCE, SPECIAL_TOKENS = chat.load_template(os.environ.get("PEER_CHAT_TEMPLATE"),
                                                     os.environ.get("PEER_TOKENIZER_DIR"))
TEMPLATE = chat.compile_template(TEMPLATE_SOURCE) if TEMPLATE_SOURCE else None
TOOL_PARSER = os.environ.get("PEER_TOOL_PARSER") or None
REASONING_PARSER = os.environ.get("PEER_REASONING_PARSER") or None


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


class ChatMessage(BaseModel):
    model_config = ConfigDict(extra="allow")
    role: str
    content: Optional[Union[str, List[Dict[str, Any]]]] = None
    name: Optional[str] = None
    tool_calls: Optional[List[Dict[str, Any]]] = None
    tool_call_id: Optional[str] = None
    reasoning_content: Optional[str] = None


class FunctionSpec(BaseModel):
    name: str
    description: Optional[str] = None
    parameters: Optional[Dict[str, Any]] = None


class Tool(BaseModel):
    type: str = "function"
    function: FunctionSpec


class ChatRequest(BaseModel):
    model_config = ConfigDict(extra="allow")
    messages: List[ChatMessage]
    tools: Optional[List[Tool]] = None
    tool_choice: Optional[Union[str, Dict[str, Any]]] = None
    max_tokens: Optional[int] = None
    max_completion_tokens: Optional[int] = None
    stream: bool = False
    stream_options: Optional[Dict[str, Any]] = None
    ignore_eos: bool = False
    skip_special_tokens: bool = True
    chat_template_kwargs: Optional[Dict[str, Any]] = None
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


def render_chat(req: ChatRequest) -> Tuple[List[int], Optional[List[Dict[str, Any]]]]:
    """The prompt's ids, as transformers' apply_chat_template(tokenize=True) gives them, and the tools."""
    messages = [m.model_dump(exclude_none=True) for m in req.messages]
    tools = [t.model_dump(exclude_none=True) for t in req.tools] if req.tools else None
    kwargs = dict(SPECIAL_TOKENS, **(req.chat_template_kwargs or {}))
    prompt = TEMPLATE.render(messages=messages, tools=tools, documents=None, add_generation_prompt=True, **kwargs)
    return encode(prompt, add_special_tokens=False), tools


def parsers(req: ChatRequest, tools: Optional[List[Dict[str, Any]]]) -> Tuple[Optional[bool], Optional[set]]:
    """Whether the output opens in reasoning (None: no reasoning parser) and the tool names (None: no parsing)."""
    thinking = None
    if REASONING_PARSER:
        thinking = (req.chat_template_kwargs or {}).get("enable_thinking") is not False
    names = chat.tool_names(tools) if TOOL_PARSER and tools and req.tool_choice != "none" else None
    return thinking, names


def finish_reason(finish: Any, calls: bool) -> str:
    return "tool_calls" if calls and finish["type"] == "stop" else finish["type"]


def tool_call(index: int, call: Dict[str, str]) -> Dict[str, Any]:
    return {"index": index, "id": f"call_{uuid.uuid4().hex[:24]}", "type": "function",
            "function": {"name": call["name"], "arguments": call["arguments"]}}


@app.post("/v1/chat/completions")
async def chat_completions(req: ChatRequest):
    if req.model is not None and req.model != MODEL:
        return error(f"the model {req.model!r} does not exist", 404)
    if TEMPLATE is None:
        return error("this model has no chat template (start the peer with --chat-template)")
    try:
        ids, tools = render_chat(req)
    except chat.jinja2.exceptions.TemplateError as e:
        return error(f"the chat template failed: {e}")
    max_new = req.max_completion_tokens or req.max_tokens or CONTEXT_LENGTH - len(ids)
    bad = check(ids, max_new)
    if bad is not None:
        return bad
    thinking, names = parsers(req, tools)
    head = {"id": f"chatcmpl-{uuid.uuid4().hex}", "object": "chat.completion", "created": int(time.time()),
            "model": MODEL}
    steps = engine.generate(ids, max_new, req.ignore_eos)

    def usage(n_out: int) -> Dict[str, int]:
        return {"prompt_tokens": len(ids), "completion_tokens": n_out, "total_tokens": len(ids) + n_out}

    if not req.stream:
        out, finish = await collect(steps)
        reasoning, content = "", TOKENIZER.decode(out, skip_special_tokens=req.skip_special_tokens)
        if thinking is not None:
            reasoning, content = chat.split_reasoning(content, thinking)
        calls: List[Dict[str, str]] = []
        if names is not None:
            content, calls = chat.parse_calls(content, names)
        message = {"role": "assistant", "content": content or None, "reasoning_content": reasoning or None,
                   "tool_calls": [tool_call(i, c) for i, c in enumerate(calls)] or None}
        choice = {"index": 0, "message": message, "logprobs": None, "finish_reason": finish_reason(finish, calls)}
        return JSONResponse(dict(head, choices=[choice], usage=usage(len(out))))

    include_usage = bool((req.stream_options or {}).get("include_usage"))
    head["object"] = "chat.completion.chunk"

    def chunk(delta: Dict[str, Any], finish: Optional[str] = None) -> str:
        return sse(dict(head, choices=[{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}]))

    async def chunks() -> AsyncIterator[str]:
        decoder = DecodeStream(skip_special_tokens=req.skip_special_tokens)
        think = chat.ReasoningStream(thinking) if thinking is not None else None
        calls = chat.ToolCallStream(names) if names is not None else None
        n_calls = n_out = 0
        yield chunk({"role": "assistant", "content": ""})
        async for tok, finish, n_out in steps:
            piece = (decoder.step(TOKENIZER, tok) or "") if tok is not None else ""
            last = finish is not None
            reasoning, content = think.feed(piece) if think else ("", piece)
            if last and think:
                r, c = think.finish()
                reasoning, content = reasoning + r, content + c
            new: List[Dict[str, str]] = []
            if calls is not None:
                content, new = calls.feed(content)
                if last:
                    content += calls.finish()
            if reasoning:
                yield chunk({"reasoning_content": reasoning})
            if content:
                yield chunk({"content": content})
            if new:
                yield chunk({"tool_calls": [tool_call(n_calls + i, c) for i, c in enumerate(new)]})
                n_calls += len(new)
            if last:
                yield chunk({}, finish_reason(finish, n_calls > 0))
        if include_usage:
            yield sse(dict(head, choices=[], usage=usage(n_out)))
        yield sse("[DONE]")

    return StreamingResponse(chunks(), media_type="text/event-stream")
