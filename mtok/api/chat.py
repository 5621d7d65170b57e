"""``POST /v1/chat/completions``, in OpenAI's shapes, and ``/tokenize`` of messages.

A chat request becomes the same :class:`GenerateReqInput` as ``/v1/completions``
(its sampling fields go through :func:`~mtok.api.openai.parse_openai_sampling`),
with token ids instead of text: the prompt is the model's chat template
rendered (:mod:`mtok.api.chat_prompt`) and tokenized without adding special tokens
again, since templates write their own ``bos_token`` (as SGLang and vLLM do).

What the model generates reaches the client through an
:class:`~mtok.api.chat_parsing.OutputParser`, chosen per request by
:func:`~mtok.api.chat_parsing.make_output_parser`: the plain one passes text
through as ``content``; a reasoning or tool-call parser can replace it there
and turn text deltas into ``reasoning_content`` / ``tool_calls`` deltas.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any, Dict, Iterator, List, Optional

from .chat_parsing import OutputParser, make_output_parser
from .chat_prompt import ChatInput, parse_chat_input, render_prompt
from .chat_tools import check_tool_request
from .constraints import constrain_tool_choice
from .routes import NOT_YET, Job, Pending, Request, route
from .. import fields
from ..managers.prepare import fit_budget_to_logprobs
from ..wire.io_struct import GenerateReqInput, LogprobParams
from ..managers.limits import logprob_entry_limit
from .logprobs import chat_content
from .openai import StreamUsage, openai_finish, parse_openai_sampling, token_usage
from .parse import parse_rid
from ..validate import bad, require_object

if TYPE_CHECKING:
    from ..models import ModelEntry
    from ..managers.request_handle import ReqState

TOOL_CHOICES = ("none", "auto", "required")


def _check_chat_only(body: Dict[str, Any]) -> None:
    """Fields of chat requests that mtok checks but has no use for beyond the template."""
    choice = body.get("tool_choice")
    if choice is not None and choice not in TOOL_CHOICES and not (
            isinstance(choice, dict) and isinstance(choice.get("function"), dict)
            and isinstance(choice["function"].get("name"), str)):
        raise bad(f"'tool_choice' must be one of {', '.join(map(repr, TOOL_CHOICES))} or "
                  "{\"type\": \"function\", \"function\": {\"name\": ...}}", "tool_choice")
    check_tool_request(body)  # mtok.api.chat_tools: SGLang's checks, before the template or a constraint


def _check_budget(body: Dict[str, Any], got: Dict[str, Any], context_length: int) -> None:
    """A budget over the whole context is refused before the prompt is rendered, in SGLang's words."""
    budget = fields.value(got, fields.CHAT, "max_new_tokens")
    if budget is not None and budget > context_length:
        row = fields.FIELDS[fields.CHAT]["max_new_tokens"]
        param = next((k for k in (row.name,) + row.aliases if body.get(k) is not None), row.name)
        raise bad(f"max_completion_tokens is too large: {budget}. This model supports at most {context_length} "
                  "completion tokens.", param)


def template_extras(body: Dict[str, Any]) -> Dict[str, Any]:
    """Request fields a template may read besides transformers' context (as SGLang passes them)."""
    return {k: body[k] for k in ("tool_choice", "reasoning_effort") if body.get(k) is not None}


def template_input(body: Dict[str, Any]) -> ChatInput:
    """What the chat template renders for a body with ``messages``: for a chat completion or ``/tokenize``."""
    inp = parse_chat_input(body)
    inp.kwargs = dict(template_extras(body), **(inp.kwargs or {}))
    return inp


def prompt_ids(model: "ModelEntry", inp: ChatInput, add_special_tokens: bool = False) -> List[int]:
    return model.tokenizer.encode(render_prompt(model.chat, inp), add_special_tokens)


class ReasoningTokens:
    """SGLang's ``reasoning_tokens`` of one choice: its output tokens up to and including
    those of the reasoning's end marker (all of them until it comes), or none when the
    choice does not reason (no reasoning parser; one not forced whose start marker did
    not open the text).  Each token is scanned once, however often it is asked."""

    def __init__(self, reasoning: Any, tokenizer: Any):
        self.reasoning = reasoning  # an mtok.parsers.ReasoningParser, or None
        self.end = tokenizer.encode(self.reasoning.end, False) if self.reasoning is not None else []
        self.scanned = 0
        self.found: Optional[int] = None

    def count(self, text: str, ids: List[int]) -> int:
        r = self.reasoning
        if r is None or not self.end or not (r.force or text.startswith(r.start)):
            return 0
        if self.found is None:
            self._scan(ids)
        return len(ids) if self.found is None else self.found

    def _scan(self, ids: List[int]) -> None:
        end, k, n = self.end, len(self.end), len(ids)  # ids grow meanwhile: read up to n only
        for i in range(max(0, self.scanned - k + 1), n - k + 1):
            if ids[i] == end[0] and ids[i:i + k] == end:
                self.found = i + k
                return
        self.scanned = n


class ChatRoutes:
    """Mixed into :class:`mtok.api.native.Api`, which provides tm, args, start_stream, usage."""

    @route("POST", "/v1/chat/completions", inline=True, offload=True)
    def chat_completions(self, req: Request) -> Any:
        body = require_object(req.json())
        got = fields.read(body, fields.CHAT, self.args.strict_fields)  # mtok.fields: what each field does
        obj, model, parsers, usage = self.chat_request(body, got)
        lead = echo_lead(body, got)
        rid = self.tm.assign_rids(obj)  # the id holds the rid: /abort_request takes it
        head = {"id": f"chatcmpl-{rid}", "object": "chat.completion", "created": int(time.time()), "model": model.name}
        counts = [ReasoningTokens(getattr(p, "reasoning", None), model.tokenizer) for p in parsers]  # ParsedOutput's
        token_ids = fields.value(got, fields.CHAT, "return_token_ids")

        def answer(handle: Any) -> Any:
            if obj.stream:
                head["object"] = "chat.completion.chunk"
                events = self._chat_chunks(handle, head, parsers, counts, usage, obj.input_ids,  # type: ignore
                                           token_ids)
                return self.start_stream(handle, lead_chunks(events, lead, len(parsers)) if lead else events)
            return Pending(handle, lambda results: vllm_extras(self._chat_completion(head, parsers, counts, results),
                                                               results, lead, obj.logprobs, token_ids))
        return Job((obj, req.watch), answer)

    def chat_request(self, body: Dict[str, Any], got: Dict[str, Any]
                     ) -> "tuple[GenerateReqInput, ModelEntry, List[OutputParser], StreamUsage]":
        """A chat body (``got``: its fields as :func:`fields.read` gave them) as the request to
        submit, its model, one output parser per choice and what its ``stream_options`` ask
        (a :class:`~mtok.api.openai.StreamUsage`); /v1/responses (:mod:`mtok.api.responses`)
        builds on it too."""
        if "messages" not in body:
            raise bad("'messages' is required", "messages")
        _check_chat_only(body)
        sp, usage = parse_openai_sampling(got)
        model = self.tm.model(got.get("model"))
        _check_budget(body, got, model.context_length)
        inp = template_input(body)
        constrain_tool_choice(body, got, sp)  # mtok.api.constraints: "required" / a named tool as a JSON schema
        ids = prompt_ids(model, inp)
        if not ids:
            raise bad("the chat template rendered an empty prompt for these messages", "messages")
        implicit = fields.value(got, fields.CHAT, "max_new_tokens") is None
        if implicit:
            sp.max_new_tokens = max(1, model.context_length - len(ids))
        obj = GenerateReqInput(input_ids=ids, sampling_params=sp, stream=fields.value(got, fields.CHAT, "stream"),
                               model=model.name, lora_path=got.get("lora_path"),
                               logprobs=chat_logprobs(got, model.tokenizer.vocab_size),
                               rid=parse_rid(got.get("rid"), False, 1))
        if implicit:
            fit_budget_to_logprobs(obj, [ids], logprob_entry_limit(self.args.max_logprob_entries,
                                                                   self.args.max_logprobs))
        parsers = [make_output_parser(body, model, self.args) for _ in range(obj.num_outputs)]  # one per choice
        return obj, model, parsers, usage

    def _chat_completion(self, head: Dict[str, Any], parsers: List[OutputParser], counts: List[ReasoningTokens],
                         results: List[Any]) -> Any:
        choices = []
        for st in results:
            finish, matched = openai_finish(st)
            parser = parsers[st.index]
            message = {"role": "assistant", "reasoning_content": None, **parser.message(st.text)}  # SGLang's null
            choices.append({"index": st.index, "message": message,
                            "logprobs": {"content": chat_content(st.logprobs)} if st.logprobs is not None else None,
                            "finish_reason": parser.finish_reason(finish), "stop_reason": matched,
                            "matched_stop": matched})
        reasoning = sum(counts[st.index].count(st.text, st.output_ids) for st in results)
        return dict(head, choices=choices, usage=self.usage(results, len(parsers), reasoning))

    @staticmethod
    def message_tokens(model: "ModelEntry", body: Dict[str, Any], add_special_tokens: bool) -> List[int]:
        """``/tokenize`` with ``messages`` (vLLM's TokenizeChatRequest): the tokens of the prompt
        a chat completion of ``body`` would have (``add_special_tokens`` adds the tokenizer's too)."""
        _check_chat_only(body)
        return prompt_ids(model, template_input(body), add_special_tokens)

    def _chat_chunks(self, states: Iterator["ReqState"], head: Dict[str, Any], parsers: List[OutputParser],
                     counts: List[ReasoningTokens], usage: StreamUsage, prompt: List[int],
                     token_ids: bool = False) -> Iterator[Any]:
        """Per choice: role first, then content deltas (with their logprobs), then the
        finish; then usage, then [DONE] (OpenAI's order).  Every delta has
        ``reasoning_content``, null when it carries none, as SGLang sends it; with
        continuous usage, each content delta its choice's usage so far.  With vLLM's
        ``return_token_ids`` the role chunks carry ``prompt_token_ids`` and each
        choice's chunks its new ``token_ids`` (a chunk goes out for ids whose text
        is held back, as vLLM sends one)."""
        chunk = ChatChunks(head, usage, token_ids)
        for i in range(len(parsers)):
            yield chunk.role(i, prompt)
        sent: Dict[int, int] = {}
        lp_sent: Dict[int, int] = {}
        final: Dict[int, "ReqState"] = {}
        for st in states:
            if st is NOT_YET:  # the event loop's: resumed when the mailbox fills
                yield st
            if st is NOT_YET or st.index in final:  # a state seen finished early is handed over once more
                continue
            i = st.index
            err = st.error()
            if err is not None:
                yield err.body()
                break
            # The receiver thread grows st.text meanwhile: read the finish first (its text
            # is complete by then), then one snapshot of the text for both slice and mark.
            finish, matched = openai_finish(st)
            text = st.text
            if usage.continuous:
                chunk.so_far[i] = token_usage(len(prompt), st.completion_tokens, counts[i].count(text, st.output_ids))
            deltas = parsers[i].feed(text[sent.get(i, 0):])
            sent[i] = len(text)
            logprobs = None
            if st.logprobs is not None and (deltas or finish is not None):  # else they wait for text to go with
                content = chat_content(st.logprobs, lp_sent.get(i, 0))
                lp_sent[i] = lp_sent.get(i, 0) + len(content)
                logprobs = {"content": content} if content else None
            new_ids = chunk.new_ids(st)  # after the finish was read: complete then
            if new_ids and not deltas and finish is None:
                deltas = [{}]  # the ids go out now, their text later
            for n, delta in enumerate(deltas):
                yield chunk(i, delta, logprobs=logprobs if n == 0 else None, ids=new_ids if n == 0 else None)
            if finish is not None:
                for delta in parsers[i].flush():
                    yield chunk(i, delta)
                yield chunk(i, {}, parsers[i].finish_reason(finish), matched,
                            logprobs if not deltas and logprobs else None, counted=False,
                            ids=None if deltas else new_ids)
                final[i] = st
        if usage.final and len(final) == len(parsers):
            reasoning = sum(counts[i].count(st.text, st.output_ids) for i, st in final.items())
            yield dict(head, choices=[], usage=self.usage(list(final.values()), len(parsers), reasoning))
        yield "[DONE]"


class ChatChunks:
    """One chat stream's chunks: the head, a choice's delta with ``reasoning_content``
    (null when it carries none, as SGLang sends it), its usage so far (``so_far``,
    with continuous usage) and, with vLLM's ``return_token_ids``, its new ids."""

    def __init__(self, head: Dict[str, Any], usage: StreamUsage, token_ids: bool):
        self.head, self.usage, self.token_ids = head, usage, token_ids
        self.so_far: Dict[int, Dict[str, Any]] = {}  # per choice, as of its last state
        self.ids_sent: Dict[int, int] = {}

    def __call__(self, index: int, delta: Dict[str, Any], finish: Optional[str] = None, matched: Any = None,
                 logprobs: Any = None, counted: bool = True, ids: Optional[List[int]] = None) -> Dict[str, Any]:
        choice = {"index": index, "delta": dict(delta, reasoning_content=delta.get("reasoning_content")),
                  "logprobs": logprobs, "finish_reason": finish, "stop_reason": matched}
        if self.token_ids:
            choice["token_ids"] = ids or []
        return self.usage.mark(dict(self.head, choices=[choice]), self.so_far.get(index) if counted else None)

    def role(self, index: int, prompt: List[int]) -> Dict[str, Any]:
        """A choice's first chunk; with ``return_token_ids`` it carries the prompt's ids."""
        out = self(index, {"role": "assistant", "content": ""}, counted=False)
        return dict(out, prompt_token_ids=list(prompt)) if self.token_ids else out

    def new_ids(self, st: "ReqState") -> List[int]:
        """The ids of ``st`` not yet sent (none without ``return_token_ids``)."""
        if not self.token_ids:
            return []
        start = self.ids_sent.get(st.index, 0)
        new = st.output_ids[start:]
        self.ids_sent[st.index] = start + len(new)
        return new


def chat_logprobs(got: Dict[str, Any], vocab: int) -> Optional[LogprobParams]:
    """Chat's ``logprobs: true`` and ``top_logprobs: k``, and vLLM's ``prompt_logprobs: k``
    (each prompt token with its k top); -1 in either is the whole vocabulary (vLLM's),
    held to ``--max-logprobs`` as any k (mtok.managers.prepare)."""
    wanted = fields.value(got, fields.CHAT, "logprobs")
    if not wanted and got.get("top_logprobs"):
        raise bad("'top_logprobs' needs 'logprobs': true", "top_logprobs")
    prompt = got.get("prompt_logprobs")
    if prompt is not None and fields.value(got, fields.CHAT, "stream"):
        raise bad("'prompt_logprobs' are not available when 'stream' is true", "prompt_logprobs")
    if not wanted and prompt is None:
        return None
    return LogprobParams(start_len=-1 if prompt is None else 0, top_n=_whole(got.get("top_logprobs", 0), vocab)
                         if wanted else 0, with_text=True, param="top_logprobs", output=bool(wanted),
                         prompt_top_n=None if prompt is None else _whole(prompt, vocab))


def _whole(k: int, vocab: int) -> int:
    return vocab if k == -1 else k


def echo_lead(body: Dict[str, Any], got: Dict[str, Any]) -> str:
    """vLLM's chat ``echo``: the last message's content, when it is the assistant's
    (the reply continues it, as with ``continue_final_message``), leads each
    choice's content; its text parts are joined by newlines."""
    last = body["messages"][-1] if got.get("echo") and body["messages"] else None
    if not isinstance(last, dict) or last.get("role") != "assistant":
        return ""
    content = last.get("content") or ""
    if isinstance(content, list):
        return "\n".join(p["text"] for p in content if isinstance(p, dict) and isinstance(p.get("text"), str))
    return content if isinstance(content, str) else ""


def lead_chunks(events: Iterator[Any], lead: str, n: int) -> Iterator[Any]:
    """A chat stream with the echoed ``lead``: after the choices' role chunks, one
    content chunk each, as vLLM sends it."""
    roles = [next(events) for _ in range(n)]
    yield from roles
    for role in roles:
        out = dict(role, choices=[dict(role["choices"][0], delta={"content": lead, "reasoning_content": None})])
        out.pop("prompt_token_ids", None)  # return_token_ids: the role chunk had them
        yield out
    yield from events


def vllm_extras(resp: Dict[str, Any], results: List[Any], lead: str, lp: Optional[LogprobParams],
                token_ids: bool = False) -> Dict[str, Any]:
    """A finished chat response with vLLM's extensions: the echoed ``lead`` before
    each choice's content, ``prompt_logprobs`` (a list: null for the first
    token, then {id: {logprob, rank, decoded_token}} with the token's own and its
    top ones; rank null where the engine's top does not hold the token), and with
    ``return_token_ids`` the prompt's ids and each choice's."""
    if token_ids:
        for choice, st in zip(resp["choices"], results):
            choice["token_ids"] = list(st.output_ids)
        resp["prompt_token_ids"] = list(results[0].prompt_ids) if results else []
    for choice in resp["choices"]:
        if lead:
            choice["message"]["content"] = lead + (choice["message"]["content"] or "")
        if lp is not None and not lp.output:
            choice["logprobs"] = None
        elif lp is not None and lp.prompt_top_n is not None:  # an upstream asked for one k for both sides
            for entry in choice["logprobs"]["content"]:
                del entry["top_logprobs"][lp.top_n:]
    if lp is not None and lp.prompt_top_n is not None and results:
        resp["prompt_logprobs"] = prompt_logprob_rows(results[0].logprobs or {}, lp.prompt_top_n)
    return resp


def prompt_logprob_rows(got: Dict[str, list], k: int) -> List[Optional[Dict[str, Any]]]:
    tops = got.get("input_top_logprobs") or []
    out: List[Optional[Dict[str, Any]]] = []
    for i, (lp, tid, text) in enumerate(got.get("input_token_logprobs", [])):
        if lp is None:
            out.append(None)
            continue
        top = tops[i][:k] if i < len(tops) and tops[i] else []
        ranks = {t: r for r, (_, t, _) in enumerate(top, 1)}
        entry = {str(tid): {"logprob": lp, "rank": ranks.get(tid), "decoded_token": text}}
        for r, (x, t, s) in enumerate(top, 1):
            entry.setdefault(str(t), {"logprob": x, "rank": r, "decoded_token": s})
        out.append(entry)
    return out
