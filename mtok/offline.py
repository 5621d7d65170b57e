"""``mtok.Engine``: the serving pipeline inside your process, with no HTTP.

The scheduler (with its engine) and the detokenizer are child processes, as in
the server; the TokenizerManager runs in the caller's process, as in the
single-worker server, and requests go through the very routes the HTTP server
calls (``Api.generate``, ``Api.encode``) with the body already a dict, so
validation, sampling parameters, stop handling and the output dicts are the
server's own: ``{"text", "output_ids", "meta_info"}``, SGLang's shape.  Names
and argument shapes follow ``sglang.Engine``.

One process tokenizes: the caller's.  Worker processes parallelize HTTP
parsing and tokenization across connections; here there is one caller and no
HTTP, so ``tokenizer_worker_num`` must stay 1.

A batch larger than the scheduler's capacity (``max_running_requests`` +
``max_queued_requests``) is sent in windows of that size, so the engine never
refuses the caller's own batch.  The asyncio methods run the blocking ones on
a thread pool of the engine's own.
"""

from __future__ import annotations

import asyncio
import atexit
import functools
import os
import threading
from concurrent.futures import ThreadPoolExecutor
from multiprocessing.connection import wait
from typing import Any, AsyncIterator, Dict, Iterator, List, Optional, Set, Tuple

from .api.native import Api
from .api.routes import EventStream, Request, settle_blocking
from .serve import Arbiter, BootError
from .settings import server_args_from
from .wire.status import FIRST_WORKER_SLOT, ServerState, SlotState
from .validate import APIError

__all__ = ["Engine"]

# per-prompt fields of a batch, sliced when a batch is sent in windows
_PER_PROMPT = ("text", "input_ids", "sampling_params", "rid", "return_logprob", "logprob_start_len",
               "top_logprobs_num")


class _Pipeline(Arbiter):
    """The server's processes less the HTTP side: no listening socket, no
    signal handlers (a library must not take them), and a thread that fails
    every request at once if a core process dies."""

    closing = False
    # Segments are named by pid, and a process may hold several engines; each
    # engine's socket directory is its own, so its board lives there as a file
    # and its arguments ride the process-start pipe.
    use_shared_memory = False

    def open_listener(self) -> None:
        pass

    def start(self) -> Any:
        from .managers.tokenizer_manager import TokenizerManager

        self._sig_r, self._wake_w = os.pipe()  # _wait_for_boot waits on it; shutdown writes to it
        os.set_blocking(self._sig_r, False)
        try:
            self.setup()
            self.spawn_core()
            self._wait_for_boot(self.core)
            self.board.claim(FIRST_WORKER_SLOT, self.pid)
            try:
                tm = TokenizerManager(self.args, self.port_args, self.authkey).start()
            except Exception as e:
                raise BootError(f"the tokenizer manager failed to start: {type(e).__name__}: {e}") from None
        except BaseException:
            self.close()
            raise
        self.board.set_state(FIRST_WORKER_SLOT, SlotState.READY)
        self.board.state = ServerState.SERVING
        threading.Thread(target=self._watch, args=(tm,), name="mtok-watch", daemon=True).start()
        return tm

    def _watch(self, tm: Any) -> None:
        ready = wait([c.process.sentinel for c in self.core] + [self._sig_r])
        if self.closing:
            return
        for c in self.core:
            if c.process.sentinel in ready:
                c.process.join(5.0)  # its pipe closes a moment before it can be reaped
        failure = self.reap_core()
        if failure:
            self.board.state = ServerState.FAILED
            tm.fail_all(failure)

    def close(self) -> None:
        if self._sig_r is None:
            return
        self.closing = True
        os.write(self._wake_w, b"x")
        self.stop(graceful=False)
        self.teardown()
        for fd in (self._sig_r, self._wake_w):
            os.close(fd)
        self._sig_r = None


def _body(prompt: Any, input_ids: Any, extra: Dict[str, Any]) -> Dict[str, Any]:
    """A /generate body: what was given, leaving out what was left at its default."""
    body = {"text": prompt, "input_ids": input_ids, **extra}
    return {k: v for k, v in body.items() if v is not None and v is not False}


# transformers' apply_chat_template options for its tokenizer call; mtok's has none.
_TOKENIZER_OPTIONS = ("padding", "truncation", "max_length", "return_tensors", "return_assistant_tokens_mask",
                      "tokenizer_kwargs", "sanitize_control_tokens")


def _render_chat(chat: Any, body: Dict[str, Any]) -> str:
    """One conversation's prompt text, through the chat route's own parsing."""
    from .api.chat_prompt import parse_chat_input, render_prompt

    return render_prompt(chat, parse_chat_input({k: v for k, v in body.items() if v is not None}))


def _windows(body: Dict[str, Any], size: int) -> Iterator[Tuple[int, Dict[str, Any]]]:
    """(offset, body) for each window of at most ``size`` prompts."""
    prompts = body.get("text", body.get("input_ids"))
    batch = isinstance(body.get("text"), list) or (isinstance(prompts, list) and prompts
                                                   and isinstance(prompts[0], list))
    n = len(prompts) if batch and prompts else 0
    if n <= size:
        yield 0, body
        return
    for start in range(0, n, size):
        part = dict(body)
        for k in _PER_PROMPT:
            if isinstance(body.get(k), list) and len(body[k]) == n:
                part[k] = body[k][start:start + size]
        yield start, part


class Engine:
    """The pipeline without HTTP; takes the settings of ``python -m mtok.serve``."""

    def __init__(self, **settings: Any):
        args = server_args_from("Engine", settings)
        if args.tokenizer_worker_num != 1:
            raise ValueError("mtok.Engine tokenizes in the calling process; tokenizer_worker_num is for the "
                             "HTTP server (mtok.launch) and must be 1 here")
        self.server_args = args
        self._pipeline = _Pipeline(args)
        self.tokenizer_manager = self._pipeline.start()
        self._api = Api(self.tokenizer_manager, self._pipeline.board, FIRST_WORKER_SLOT)
        self.pids: Dict[str, int] = {c.role: c.process.pid for c in self._pipeline.core}
        self._window = args.max_running_requests + args.max_queued_requests
        self._executor: Optional[ThreadPoolExecutor] = None
        self._lock = threading.Lock()
        _LIVE.add(self)

    # -- generation ------------------------------------------------------------------
    def generate(self, prompt: Any = None, sampling_params: Any = None, input_ids: Any = None,
                 return_logprob: Any = False, logprob_start_len: Any = None, top_logprobs_num: Any = None,
                 stream: bool = False, rid: Any = None, **kwargs: Any) -> Any:
        """One prompt (a dict back) or a batch (a list), as text or token ids; with
        ``stream=True`` an iterator of dicts whose ``text`` is cumulative (a batch's carry ``index``).
        Other fields of SGLang's ``/generate`` body pass through as keywords."""
        body = _body(prompt, input_ids, dict(sampling_params=sampling_params, return_logprob=return_logprob,
                                             logprob_start_len=logprob_start_len, top_logprobs_num=top_logprobs_num,
                                             stream=stream, rid=rid, **kwargs))
        if stream:
            return self._stream(body)
        out: List[Any] = []
        for offset, part in _windows(body, self._window):
            result = self._call(self._api.generate, part)
            if offset == 0 and not isinstance(result, list):
                return result
            out += result
        return out

    def _stream(self, body: Dict[str, Any]) -> Iterator[Dict[str, Any]]:
        for offset, part in _windows(body, self._window):
            yield from self._events(self._call(self._api.generate, part), offset)

    @staticmethod
    def _events(events: EventStream, offset: int) -> Iterator[Dict[str, Any]]:
        """A route's server-sent events as dicts; an error event is raised."""
        try:
            for event in events.events:
                if event == "[DONE]":
                    break
                if "error" in event:
                    err = event["error"]
                    raise APIError(err["message"], err.get("code", 500))
                if offset and "index" in event:
                    event["index"] += offset
                yield event
        finally:
            events.close()  # the stream's owner closes its handle: aborts what has not finished

    def encode(self, prompt: Any, rid: Any = None, **kwargs: Any) -> Any:
        """Embeddings of a text, token ids, or a batch of either: ``{"embedding", "meta_info"}`` each."""
        ids = isinstance(prompt, list) and prompt and not isinstance(prompt[0], str)
        body = _body(None if ids else prompt, prompt if ids else None, dict(rid=rid, **kwargs))
        return self._call(self._api.encode, body)

    # -- chat ------------------------------------------------------------------------
    def chat(self, messages: List[Dict[str, Any]], stream: bool = False, **fields: Any) -> Any:
        """A chat completion in OpenAI's shape (``choices[0].message``...), through
        the same route as ``/v1/chat/completions``; ``fields`` are that request's
        (``max_tokens``, ``temperature``, ``tools``, ``chat_template_kwargs``...).
        With ``stream=True``, an iterator of ``chat.completion.chunk`` dicts."""
        body = _body(None, None, dict(fields, messages=messages, stream=stream))
        result = self._call(self._api.chat_completions, body)
        if not stream:
            return result
        return self._events(result, 0)

    def apply_chat_template(self, conversation: Any, tools: Optional[List[Any]] = None,
                            documents: Optional[List[Any]] = None, chat_template: Optional[str] = None,
                            add_generation_prompt: bool = False, continue_final_message: bool = False,
                            tokenize: bool = True, return_dict: bool = True, model: Optional[str] = None,
                            chat_template_kwargs: Optional[Dict[str, Any]] = None, **kwargs: Any) -> Any:
        """The model's chat template rendered, with transformers' signature and
        defaults (its 5.x): ``{"input_ids", "attention_mask"}`` of the prompt (no
        special tokens added), its ids with ``return_dict=False``, its text with
        ``tokenize=False``; a list of conversations gives a list of each.  Extra
        keywords reach the template's context, as in transformers, and so does
        ``chat_template_kwargs`` (the HTTP field's dict; a keyword wins)."""
        given = ["chat_template"] * (chat_template is not None) + [k for k in _TOKENIZER_OPTIONS if kwargs.get(k)]
        if given:
            raise TypeError("mtok.Engine.apply_chat_template renders the template the engine was started with "
                            "(mtok.Engine(chat_template=...)) and tokenizes plainly: it takes no %r" % given[0])
        entry = self.tokenizer_manager.model(model)
        context = dict(chat_template_kwargs or {}, **{k: v for k, v in kwargs.items() if k not in _TOKENIZER_OPTIONS})
        batch = bool(conversation) and isinstance(conversation[0], (list, tuple))
        texts = [_render_chat(entry.chat, dict(messages=list(c), tools=tools, documents=documents,
                                               add_generation_prompt=add_generation_prompt,
                                               continue_final_message=continue_final_message,
                                               chat_template_kwargs=context or None))
                 for c in (conversation if batch else [conversation])]
        if not tokenize:
            return texts if batch else texts[0]
        ids = [entry.tokenizer.encode(t, False) for t in texts]
        if not return_dict:
            return ids if batch else ids[0]
        masks = [[1] * len(i) for i in ids]
        return {"input_ids": ids if batch else ids[0], "attention_mask": masks if batch else masks[0]}

    def _call(self, route: Any, body: Dict[str, Any]) -> Any:
        if self._pipeline.closing:
            raise RuntimeError("this mtok.Engine has been shut down")
        result = route(Request(method="POST", path="", query="", headers={}, raw=b"", watch=None, _json=body))
        return settle_blocking(result, self._api.submit_all)

    # -- asyncio ---------------------------------------------------------------------
    async def async_generate(self, prompt: Any = None, sampling_params: Any = None, input_ids: Any = None,
                             stream: bool = False, **kwargs: Any) -> Any:
        """``generate`` for asyncio; with ``stream=True`` it returns an async iterator."""
        call = functools.partial(self.generate, prompt, sampling_params, input_ids, stream=stream, **kwargs)
        if stream:
            return self._aiter(call)
        return await self._in_thread(call)

    async def async_encode(self, prompt: Any, **kwargs: Any) -> Any:
        return await self._in_thread(functools.partial(self.encode, prompt, **kwargs))

    async def _aiter(self, make: Any) -> AsyncIterator[Dict[str, Any]]:
        done = object()
        it = await self._in_thread(make)
        try:
            while True:
                item = await self._in_thread(functools.partial(next, it, done))
                if item is done:
                    return
                yield item
        finally:
            await self._in_thread(it.close)

    def _in_thread(self, fn: Any) -> "asyncio.Future[Any]":
        with self._lock:
            if self._executor is None:
                self._executor = ThreadPoolExecutor(self.server_args.max_running_requests, "mtok-async")
        return asyncio.get_running_loop().run_in_executor(self._executor, fn)

    # -- tokens ----------------------------------------------------------------------
    def tokenize(self, prompt: Any, add_special_tokens: bool = True, model: Optional[str] = None) -> Any:
        """Token ids of a text, or of each text in a list."""
        tok = self.tokenizer_manager.model(model).tokenizer
        if isinstance(prompt, list):
            return [tok.encode(p, add_special_tokens) for p in prompt]
        return tok.encode(prompt, add_special_tokens)

    def detokenize(self, ids: Any, skip_special_tokens: bool = False, model: Optional[str] = None) -> Any:
        """The text of token ids, or of each list of them."""
        tok = self.tokenizer_manager.model(model).tokenizer
        if ids and isinstance(ids[0], list):
            return [tok.decode(x, skip_special_tokens) for x in ids]
        return tok.decode(ids, skip_special_tokens)

    # -- lifetime --------------------------------------------------------------------
    def shutdown(self) -> None:
        """Stop every process and remove the socket directory and shared memory; idempotent."""
        _LIVE.discard(self)
        if self._executor is not None:
            self._executor.shutdown(wait=False)
        self._pipeline.close()
        self.tokenizer_manager.close()

    def __enter__(self) -> "Engine":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.shutdown()


_LIVE: "Set[Engine]" = set()  # every engine not yet shut down, for the exit handler


@atexit.register
def _shutdown_all() -> None:
    for engine in list(_LIVE):
        engine.shutdown()
