"""Every request field mtok knows, in one table, and how a body is read through it.

Clients send what their server of choice accepts: SGLang's ``GenerateReqInput``
and ``SamplingParams``, OpenAI's request bodies, and the extras SGLang's and
vLLM's OpenAI servers take.  A server that refuses unknown fields breaks those
clients; one that drops a constraint silently answers the wrong question.  So
each field has one row here saying what mtok does with it:

- ``USED``: read by the frontend or the scheduler (checked, then acted on);
- ``FORWARDED``: handed to the engine; when the row names a capability, an
  engine without it refuses the request with a 400 (see ``mtok.engines``);
- ``IGNORED``: meaningless in this server (routing hints, tracing, billing);
  accepted at any value and logged once at debug level;
- ``REFUSED``: accepted at its default, a 400 naming the field and the reason
  otherwise (mtok cannot do what a non-default value asks).

A field in no row is ignored and logged once (as vLLM does), or refused under
``--strict-fields``.  The table is the one place where a field's default and
bounds are declared: :class:`~mtok.wire.io_struct.SamplingParams` takes its
defaults from the ``sampling_params`` rows (so the table sits low in the
package, beside the settings table :mod:`mtok.flags`, under the wire), and
the routes read defaults through :func:`value` and :func:`from_body`.  Where OpenAI's surface differs
from SGLang's (the token budget's default, the shape of ``logprobs``), the
field has one row per surface.  ``tests/api/test_fields.py`` walks this table
against the pinned SGLang / vLLM / OpenAI schemas
(``tests/data/pinned_request_fields.json``).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any, Callable, Dict, FrozenSet, Iterable, Optional, Tuple

from . import validate as v

logger = logging.getLogger(__name__)

USED, FORWARDED, IGNORED, REFUSED = "used", "forwarded", "ignored", "refused unless default"

# Where a field may appear: the native /generate body, its sampling_params, the
# native /encode body, and OpenAI's completions, chat completions, embeddings.
GEN, SP, ENC, CMPL, CHAT, EMB = "generate", "sampling_params", "encode", "completions", "chat", "embeddings"
# SGLang's scoring routes and OpenAI's Responses API (mtok.api.scoring, mtok.api.responses).
SCORE, RERANK, RESP = "score", "rerank", "responses"
# /tokenize (vLLM's TokenizeCompletionRequest and TokenizeChatRequest, SGLang's TokenizeRequest) and /detokenize.
TOK, DETOK = "tokenize", "detokenize"
OAI = frozenset((CMPL, CHAT))
SAMPLING = frozenset((SP, CMPL, CHAT))


@dataclass(frozen=True)
class Field:
    name: str
    where: FrozenSet[str]
    action: str
    check: Optional[Callable[[Any, str], Any]] = None  # type and bounds; returns the value to use
    default: Any = None
    aliases: Tuple[str, ...] = ()
    capability: Optional[str] = None  # FORWARDED: the engine capability it needs
    why: str = ""  # REFUSED: what mtok cannot do; otherwise a note for docs/fields.md


def _where(*names: Any) -> FrozenSet[str]:
    out = set()
    for n in names:
        out |= set(n) if isinstance(n, frozenset) else {n}
    return frozenset(out)


def _rows(action: str, where: Iterable[str], names: str, why: str = "", default: Any = None) -> Tuple[Field, ...]:
    w = _where(*where)
    return tuple(Field(n, w, action, default=default, why=why) for n in names.split())


_int0 = lambda x, n: v.as_int(x, n, 0)  # noqa: E731
_int1 = lambda x, n: v.as_int(x, n, 1)  # noqa: E731
_int_all = lambda x, n: v.as_int(x, n, -1)  # noqa: E731  (-1: every token of the vocabulary, vLLM's)
_PYDANTIC_BOOLS = dict.fromkeys(("true", "t", "yes", "y", "on", "1"), True)
_PYDANTIC_BOOLS.update(dict.fromkeys(("false", "f", "no", "n", "off", "0"), False))


def _lax_bool(x: Any, name: str) -> bool:
    """A boolean, or a string pydantic reads as one (SGLang's and vLLM's request
    models do: vLLM's own test_chat_echo sends chat's ``logprobs: "true"``)."""
    if isinstance(x, str) and x.lower() in _PYDANTIC_BOOLS:
        return _PYDANTIC_BOOLS[x.lower()]
    return v.as_bool(x, name)


_MAX_ALIASES = ("max_tokens", "max_completion_tokens")
_MULTIMODAL = "this server's engines take text only"
_RETURN = "this server does not produce it"

TABLE: Tuple[Field, ...] = (
    # -- the prompt and the request ---------------------------------------------------
    Field("text", _where(GEN, ENC), USED), Field("input_ids", _where(GEN, ENC), USED),
    Field("prompt", _where(CMPL), USED), Field("messages", _where(CHAT), USED),
    Field("input", _where(EMB), USED),
    Field("sampling_params", _where(GEN), USED), Field("stream", _where(GEN, OAI), USED, v.as_bool, False),
    Field("stream_options", _where(OAI), USED), Field("rid", _where(GEN, OAI), USED),
    Field("model", _where(GEN, ENC, OAI, EMB), USED, v.as_str),
    Field("encoding_format", _where(EMB), USED, lambda x, n: v.one_of(x, n, ("float", "base64")), "float"),
    Field("dimensions", _where(ENC, EMB), USED, _int1),
    Field("echo", _where(CMPL), USED, v.as_bool, False),
    Field("suffix", _where(CMPL), REFUSED, why="insertion (suffix) is not supported"),
    # -- generation length and stops ---------------------------------------------------
    # SGLang's default is 128, OpenAI's for completions 16; a chat without one may fill the context
    # (as SGLang's and vLLM's chat routes do).  0 on completions only with 'echo' (mtok.openai_api).
    Field("max_new_tokens", _where(SP), USED, _int0, 128, _MAX_ALIASES),
    Field("max_new_tokens", _where(CMPL), USED, _int0, 16, _MAX_ALIASES),
    Field("max_new_tokens", _where(CHAT), USED, _int1, None, _MAX_ALIASES, why="without it, the rest of the context"),
    Field("min_new_tokens", SAMPLING, USED, _int0, 0, ("min_tokens",)),
    Field("stop", SAMPLING, USED, v.stop_list, None),
    Field("stop_token_ids", SAMPLING, USED, v.token_list, None),
    Field("ignore_eos", SAMPLING, USED, v.as_bool, False),
    Field("skip_special_tokens", SAMPLING, USED, v.as_bool, True),
    Field("spaces_between_special_tokens", SAMPLING, USED, v.as_bool, True),
    Field("no_stop_trim", SAMPLING, USED, v.as_bool, False, ("include_stop_str_in_output",)),
    Field("stop_regex", SAMPLING, USED, v.stop_list, None, why="matched in linear time: no backreferences, "
          "lookaround or case folding"),
    # -- sampling knobs: the engine's business ------------------------------------------
    # One bound on every surface.  OpenAI documents temperature 0..2, but SGLang's and vLLM's
    # OpenAI servers take any temperature >= 0, so /v1/* takes what /generate takes.
    Field("temperature", SAMPLING, FORWARDED, lambda x, n: v.as_float(x, n, 0.0, 100.0), 1.0),
    Field("top_p", SAMPLING, FORWARDED, lambda x, n: v.as_float(x, n, 0.0, 1.0), 1.0),
    Field("top_k", SAMPLING, FORWARDED, lambda x, n: v.as_int(x, n, -1), -1),
    Field("min_p", SAMPLING, FORWARDED, lambda x, n: v.as_float(x, n, 0.0, 1.0), 0.0),
    Field("frequency_penalty", SAMPLING, FORWARDED, lambda x, n: v.as_float(x, n, -2.0, 2.0), 0.0),
    Field("presence_penalty", SAMPLING, FORWARDED, lambda x, n: v.as_float(x, n, -2.0, 2.0), 0.0),
    Field("repetition_penalty", SAMPLING, FORWARDED, lambda x, n: v.as_float(x, n, 0.0, 2.0), 1.0),
    Field("seed", SAMPLING, FORWARDED, v.as_int, None, ("sampling_seed",)),
    Field("custom_params", SAMPLING, FORWARDED, v.as_object),
    Field("logit_bias", SAMPLING, FORWARDED, v.as_object, None, capability="logit_bias"),
    # -- parallel sampling ---------------------------------------------------------------
    Field("n", SAMPLING, USED, lambda x, n: v.as_int(x, n, 1, 128), 1, capability="n"),
    Field("best_of", _where(CMPL), USED, lambda x, n: v.as_int(x, n, 1, 128)),
    # -- structured output: a constraint is forwarded or refused, never dropped ----------
    Field("regex", _where(SAMPLING), FORWARDED, v.as_str, capability="regex"),
    Field("json_schema", _where(SAMPLING), FORWARDED, v.as_str, capability="json_schema"),
    Field("ebnf", _where(SAMPLING), FORWARDED, v.as_str, capability="ebnf"),
    Field("structural_tag", _where(SP), FORWARDED, v.as_str, capability="structural_tag"),
    Field("response_format", OAI, FORWARDED, v.as_object, capability="json_schema",
          why="`json_object` and `json_schema` as a JSON schema, `structural_tag` as one (capability "
              "`structural_tag`); `text` constrains nothing"),
    Field("structured_outputs", OAI, REFUSED, why="use 'regex', 'json_schema', 'ebnf' or 'response_format'"),
    # -- logprobs --------------------------------------------------------------------------
    Field("return_logprob", _where(GEN), USED, v.as_bool, False, capability="logprobs"),
    Field("logprob_start_len", _where(GEN), USED, lambda x, n: v.as_int(x, n, -1), -1),
    # how many top logprobs: bounded by --max-logprobs (20, as vLLM and OpenAI), checked in mtok.managers.limits
    Field("top_logprobs_num", _where(GEN), USED, _int0, 0, capability="top_logprobs"),
    Field("token_ids_logprob", _where(GEN), USED, v.token_list, None, capability="token_ids_logprob"),
    Field("return_text_in_logprobs", _where(GEN), USED, v.as_bool, False),
    # OpenAI's shapes: completions' 'logprobs' is how many top tokens, chat's a switch (with 'top_logprobs')
    Field("logprobs", _where(CMPL), USED, _int0, None, capability="logprobs"),
    Field("logprobs", _where(CHAT), USED, _lax_bool, False, capability="logprobs", why="also pydantic's \"true\""),
    Field("top_logprobs", _where(CHAT), USED, _int_all, 0, capability="top_logprobs", why="-1: the whole vocabulary"),
    Field("prompt_logprobs", _where(CHAT), USED, _int_all, None, capability="logprobs",
          why="vLLM's: each prompt token's logprob and k top ones (-1: the whole vocabulary) as the "
              "response's prompt_logprobs; not with stream"),
    Field("prompt_logprobs", _where(GEN, SP, ENC, CMPL, EMB), REFUSED, why=_RETURN),
    # -- adapters: forwarded to an engine that has them ---------------------------------
    Field("lora_path", _where(GEN, ENC, OAI, EMB), FORWARDED, v.as_str, capability="lora"),
    Field("lora_id", _where(GEN, ENC), FORWARDED, v.as_str, capability="lora"),
    # -- the chat endpoint's own fields (read by mtok's chat route) --------------------------
    *_rows(USED, [CHAT], "tools chat_template_kwargs documents"),
    Field("tool_choice", _where(CHAT), USED, why="`required` or a named function: a JSON-schema constraint "
                                                   "(engine capability `json_schema`), read back as the calls"),
    Field("continue_final_message", _where(CHAT), USED, v.as_bool, False),
    Field("add_generation_prompt", _where(CHAT), USED, v.as_bool, why="without it, not continue_final_message"),
    Field("parallel_tool_calls", _where(CHAT), USED, v.as_bool, True),
    Field("reasoning_effort", _where(CHAT), USED, v.as_str),
    Field("thinking", _where(CHAT), REFUSED, why="use 'chat_template_kwargs' (e.g. enable_thinking)"),
    # read by the reasoning parsers (branch parsers); without a --reasoning-parser they change nothing
    Field("separate_reasoning", _where(CHAT), USED, v.as_bool, True),
    Field("stream_reasoning", _where(CHAT), USED, v.as_bool, True),
    Field("include_reasoning", _where(CHAT), USED),
    *_rows(REFUSED, [CHAT], "functions function_call", "use 'tools' and 'tool_choice'"),
    Field("chat_template", _where(CHAT), REFUSED, why="the server's --chat-template renders every request"),
    Field("input_ids", _where(CHAT), REFUSED, why="send 'messages'; the chat template makes the prompt"),
    Field("echo", _where(CHAT), USED, v.as_bool, False,
          why="vLLM's: the last message's content, when it is the assistant's, leads each choice's"),
    # -- asks for something this server cannot do -------------------------------------------
    *_rows(REFUSED, [GEN, ENC, OAI, EMB], "image_data video_data audio_data input_embeds "
           "mm_processor_kwargs images_config video_config max_dynamic_patch min_dynamic_patch "
           "image_max_dynamic_patch video_max_dynamic_patch use_audio_in_video encoder_urls mm_hashes "
           "mm_content_hashes prompt_embeds media_io_kwargs audio mm_payload embed_override_token_id "
           "embed_overrides positional_embed_overrides return_mm_kwargs", _MULTIMODAL),
    Field("modalities", _where(GEN, ENC, CHAT), REFUSED, default=["text"], why=_MULTIMODAL),
    *_rows(REFUSED, [GEN, SP, ENC, OAI, EMB], "return_hidden_states return_routed_experts "
           "routed_experts_prompt_start return_entropy return_bytes return_sampling_mask return_indexer_topk "
           "return_flat_raw_top_logprobs return_flat_raw_output_top_logprobs "
           "return_cached_tokens_details return_spec_tokens_details return_meta_info return_input_ids_in_sglext "
           "return_output_ids_in_sglext return_prompt_token_ids return_tokens_as_token_ids "
           "return_token_offsets return_prompt_text return_weight_versions return_pooled_hidden_states "
           "logprob_token_ids sampling_logprobs_mode", _RETURN),
    Field("return_token_ids", OAI, USED, v.as_bool, False,
          why="vLLM's: the prompt's ids (`prompt_token_ids`: a completion choice's, a chat response's) and each "
              "choice's `token_ids`; streamed, the prompt's on the first chunk (of each choice on completions) and "
              "each chunk's new ids"),
    Field("return_token_ids", _where(GEN, SP, ENC, EMB), REFUSED, why=_RETURN),
    # refused fields whose SGLang default is not empty (tests/api/test_fields.py holds each to the pinned one)
    Field("routed_experts_start_len", _where(GEN, SP, ENC, OAI, EMB), REFUSED, default=0, why=_RETURN),
    Field("return_flat_raw_top_logprobs_b64", _where(GEN, SP, ENC, OAI, EMB), REFUSED, default=True, why=_RETURN),
    *_rows(REFUSED, [GEN, SP, ENC, OAI, EMB], "beam_width use_beam_search watermark watermarking bad_words "
           "allowed_token_ids custom_logit_processor session_params truncate_prompt_tokens max_thinking_tokens "
           "thinking_token_budget repetition_detection vllm_xargs kv_transfer_params "
           "ec_transfer_params token_indices_to_pool multi_item_delimiter_indices is_cross_encoder_request "
           "prediction web_search_options use_activation decision_layout", "this server does not support it"),
    Field("require_reasoning", _where(GEN), USED, v.as_bool, False,
          why="meta_info's reasoning_tokens, counted with the model's --reasoning-parser"),
    Field("require_reasoning", _where(SP, ENC, OAI, EMB), REFUSED, why="this server does not support it"),
    Field("length_penalty", OAI, REFUSED, default=1.0, why="beam search is not supported"),
    Field("add_special_tokens", _where(OAI, EMB), REFUSED, default=True,
          why="prompts are always tokenized with the tokenizer's special tokens"),
    Field("embed_dtype", _where(EMB), REFUSED, default="float32", why="embeddings are float32"),
    Field("endianness", _where(EMB), REFUSED, default="native", why="embeddings are sent in native byte order"),
    Field("rid", _where(ENC, EMB), IGNORED), Field("sampling_params", _where(ENC), IGNORED),
    # -- /v1/score and /v1/rerank (SGLang's ScoringRequest, V1RerankReqInput) -----------------
    *_rows(USED, [SCORE], "query items label_token_ids"),
    Field("apply_softmax", _where(SCORE), USED, v.as_bool, False),
    Field("item_first", _where(SCORE), USED, v.as_bool, False),
    Field("return_token_logprobs", _where(SCORE), USED, v.as_bool, False),
    Field("temperature", _where(SCORE), USED, lambda x, n: v.as_float(x, n, 0.0, 100.0), 1.0,
          why="divides the label logprobs before the softmax; above 0, and only with apply_softmax"),
    *_rows(REFUSED, [SCORE], "embed_override_token_id query_embed_overrides item_embed_overrides "
           "return_pooled_hidden_states score_extraction_token", "this server does not support it"),
    *_rows(USED, [RERANK], "query documents"),
    Field("top_n", _where(RERANK), USED, why="checked by the route, in SGLang's words"),
    Field("return_documents", _where(RERANK), USED, v.as_bool, True),
    Field("instruct", _where(RERANK), REFUSED, why="reranking is by embeddings here, with no reranker template"),
    Field("model", _where(SCORE, RERANK), USED, v.as_str),
    # -- /v1/responses: read here, then as a chat completion (mtok.api.responses) ----------------
    *_rows(USED, [RESP], "input tools tool_choice"),
    *(Field(n, _where(RESP), USED, v.as_object) for n in ("reasoning", "text", "metadata", "chat_template_kwargs")),
    Field("instructions", _where(RESP), USED, v.as_str),
    Field("max_output_tokens", _where(RESP), USED, _int1, why="without it, the rest of the context"),
    Field("stream", _where(RESP), USED, v.as_bool, False),
    Field("store", _where(RESP), USED, v.as_bool, True, why="accepted; nothing is kept (no response store)"),
    Field("previous_response_id", _where(RESP), REFUSED,
          why="this server keeps no responses (SGLang without --enable-response-store)"),
    Field("background", _where(RESP), REFUSED, default=False, why="background responses need a response store"),
    Field("truncation", _where(RESP), REFUSED, default="disabled", why="prompts are never truncated"),
    *_rows(REFUSED, [RESP], "include max_tool_calls", _RETURN),
    Field("top_logprobs", _where(RESP), REFUSED, default=0, why=_RETURN),
    Field("parallel_tool_calls", _where(RESP), USED, v.as_bool, True),
    # checked by the chat completions rows they become
    *_rows(USED, [RESP], "model temperature top_p top_k min_p frequency_penalty presence_penalty "
           "repetition_penalty stop seed user", why="checked as on chat"),
    *_rows(IGNORED, [RESP], "service_tier request_id priority prompt_cache_key safety_identifier"),
    # -- /tokenize and /detokenize (mtok.api.native), in vLLM's and SGLang's shapes ------------------
    Field("prompt", _where(TOK), USED, why="a string, or SGLang's list of them"), Field("messages", _where(TOK), USED),
    Field("add_special_tokens", _where(TOK), USED, v.as_bool, why="without it, true with 'prompt', false with "
          "'messages' (the template writes its own)"),
    Field("return_token_strs", _where(TOK), USED, v.as_bool, False),
    *_rows(USED, [TOK], "tools tool_choice chat_template_kwargs documents", "with 'messages', what the template sees"),
    Field("continue_final_message", _where(TOK), USED, v.as_bool, False),
    Field("add_generation_prompt", _where(TOK), USED, v.as_bool, why="without it, not continue_final_message"),
    Field("reasoning_effort", _where(TOK), USED, v.as_str),
    Field("chat_template", _where(TOK), REFUSED, why="the server's --chat-template renders every request"),
    Field("tokens", _where(DETOK), USED, v.token_list),
    Field("skip_special_tokens", _where(DETOK), USED, v.as_bool, False),
    Field("model", _where(TOK, DETOK), USED, v.as_str),
    # -- meaningless here: routing, tracing, accounting, caching hints ----------------------------
    *_rows(IGNORED, [GEN, SP, ENC, OAI, EMB], "routed_dp_rank data_parallel_rank disagg_prefill_dp_rank "
           "bootstrap_host bootstrap_port bootstrap_room bootstrap_pair_key decode_tp_size priority log_metrics "
           "user external_trace_header received_time http_worker_ipc custom_labels extra_key cache_salt no_logs "
           "routing_key conversation_id kv_hints num_items_assigned need_wait_for_mm_inputs metadata store "
           "service_tier safety_identifier prompt_cache_key prompt_cache_retention prompt_cache_options "
           "moderation request_id session_id background stream_interval verbosity task truncation_side padding"),
)


def _index() -> Dict[str, Dict[str, Field]]:
    by_api: Dict[str, Dict[str, Field]] = {}
    for f in TABLE:
        for api in f.where:
            for name in (f.name,) + f.aliases:
                if name in by_api.setdefault(api, {}):
                    raise AssertionError(f"field {name!r} is in the table twice for {api}")
                by_api[api][name] = f
    return by_api


FIELDS = _index()


def value(got: Dict[str, Any], api: str, name: str) -> Any:
    """A field of :func:`read`'s result, else its default on that surface (the table's)."""
    return got[name] if name in got else FIELDS[api][name].default


def from_body(body: Dict[str, Any], api: str, name: str) -> Any:
    """A field of a raw body, checked by its row, else its default on that surface."""
    f = FIELDS[api][name]
    value = body.get(name)
    if value is None:
        return f.default
    return value if f.check is None else f.check(value, name)


def sampling_default(name: str) -> Any:
    """The default of a ``sampling_params`` field (SGLang's): what
    :class:`~mtok.wire.io_struct.SamplingParams` takes."""
    return FIELDS[SP][name].default


def surface_defaults(api: str, names: Iterable[str]) -> Dict[str, Any]:
    """Of ``names``, the fields whose default on ``api`` is set and differs from SGLang's."""
    table = FIELDS[api]
    return {n: table[n].default for n in names
            if n in table and table[n].default is not None and table[n].default != sampling_default(n)}


_logged: set = set()


def _log_once(kind: str, name: str, where: str) -> None:
    if (kind, name) not in _logged:
        _logged.add((kind, name))
        level = logging.INFO if kind == "unknown" else logging.DEBUG
        logger.log(level, "%s field %r%s is ignored", kind, name, where)


def is_default(value: Any, default: Any) -> bool:
    """A refused field may still be sent at its default, or empty, or null."""
    return value is None or value is False or value == default or value in ("", [], {})


def _unknown(key: str, strict: bool, prefix: str) -> None:
    where = f" in {prefix.rstrip('.')}" if prefix else ""
    if strict:
        raise v.bad(f"unknown field {v.show(key)}{where}", prefix + key)
    _log_once("unknown", key, where)


def read(body: Dict[str, Any], api: str, strict: bool, prefix: str = "") -> Dict[str, Any]:
    """The fields of ``body`` mtok acts on, checked, by canonical name.

    Ignored fields are dropped (logged once), refused ones at a non-default
    value raise a 400, unknown ones are dropped (logged once) or, when
    ``strict``, refused.  Null means "the default" and is dropped.
    """
    table = FIELDS[api]
    out: Dict[str, Any] = {}
    for key, value in body.items():
        f = table.get(key)
        if f is None:
            _unknown(key, strict, prefix)
            continue
        action = f.action
        if action is USED or action is FORWARDED:
            if value is None:
                continue
            if f.name in out:
                names = (f.name,) + f.aliases
                raise v.bad(f"give only one of {', '.join(repr(prefix + n) for n in names)}", prefix + key)
            out[f.name] = value if f.check is None else f.check(value, prefix + key)
        elif action is IGNORED:
            _log_once("ignored", key, "")
        elif not is_default(value, f.default):
            raise v.bad(f"'{prefix + key}' is not supported here: {f.why}", prefix + key)
    return out


def markdown() -> str:
    """The table as docs/fields.md (``python -m mtok.fields > docs/fields.md``; a test keeps them equal)."""
    lines = ["# Request fields", "",
             "Generated from `mtok/fields.py` by `python -m mtok.fields > docs/fields.md`; do not edit by hand.",
             "Where: `generate` (`/generate`), `sampling_params` (its `sampling_params`), `encode` (`/encode`),",
             "`completions`, `chat`, `embeddings`, `responses`, `score` and `rerank` (`/v1/...`).  A field in no row",
             "is ignored and logged once (`--strict-fields`: a 400).",
             "`tokenize` and `detokenize` are `/tokenize` and `/detokenize`.", "",
             "| field | aliases | where | what mtok does | default |", "|---|---|---|---|---|"]
    for f in sorted(TABLE, key=lambda f: (_ORDER.index(f.action), f.name)):
        what = f.action
        if f.capability:
            what += f" (engine capability `{f.capability}`)"
        if f.why:
            what += f": {f.why}"
        aliases = ", ".join(f"`{a}`" for a in f.aliases)
        default = "" if f.default is None else f"`{f.default!r}`"
        lines.append(f"| `{f.name}` | {aliases} | {', '.join(sorted(f.where))} | {what} | {default} |")
    return "\n".join(lines) + "\n"


_ORDER = (USED, FORWARDED, REFUSED, IGNORED)

if __name__ == "__main__":
    print(markdown(), end="")
