"""The command line's settings, each declared once, in one table.

Every setting of ``python -m mtok.serve`` is one :class:`Setting` row of
:data:`SETTINGS` (gunicorn's ``config.py`` is the model: name, flags, type,
default, validator, help).  From that row come:

- its argparse option (:func:`add_arguments`), and so its line in ``--help``;
- its field and default in :class:`mtok.wire.args.ServerArgs`, the settings every
  process receives;
- its own check in ``ServerArgs.check()`` (:func:`problems`); checks that span
  several flags stay code there;
- its keyword in ``mtok.launch(**settings)`` / ``mtok.Engine(**settings)``
  (:mod:`mtok.settings`);
- its row in the flag table of docs/operations.md (``python -m mtok.flags``; a
  test keeps that page equal to it).

``help`` is the short text of ``--help``; ``doc`` is the flag table's, which may
say more (gunicorn's ``short`` and ``desc``).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, Callable, Dict, List, Optional, Tuple

from .chat import BACKENDS as CHAT_TEMPLATE_BACKENDS
from .chat.limits import CPU_FLAG as CHAT_CPU_FLAG, MAX_CPU_SECONDS as CHAT_MAX_CPU_SECONDS
from .chat.limits import MAX_MEMORY_MIB as CHAT_MAX_MEMORY_MIB, MEMORY_FLAG as CHAT_MEMORY_FLAG

API_KEY_ENV = "MTOK_API_KEY"  # the API key when neither --api-key nor --api-key-file is given

Check = Callable[[Any], Optional[str]]  # a value -> what is wrong with it, or None


def at_least(lo: int) -> Check:
    return lambda v: None if v is None or v >= lo else f"must be at least {lo}"


def positive(v: Any) -> Optional[str]:
    return None if v > 0 else "must be positive"


def not_negative(v: Any) -> Optional[str]:
    return None if v >= 0 else "must not be negative"


def in_range(lo: int, hi: int) -> Check:
    return lambda v: None if lo <= v <= hi else f"must be in {lo}..{hi}"


@dataclass(frozen=True)
class Setting:
    """One setting: its flags (the first is its name), how argparse reads it,
    its default, its check, and its two texts."""

    flags: Tuple[str, ...]
    help: str  # --help's text (argparse expands %(default)s)
    default: Any = None  # a list for repeatable flags (copied for each use)
    type: Optional[Callable[[str], Any]] = None  # int, float; None: the string as given
    action: Optional[str] = None  # "store_true" (a switch) or "append" (repeatable)
    nargs: Optional[str] = None
    choices: Optional[Tuple[str, ...]] = None
    metavar: Optional[str] = None
    check: Optional[Check] = None
    doc: str = ""  # the flag table's meaning column (docs/operations.md)
    doc_default: str = ""  # the flag table's default column, where the value itself says it badly
    dest: str = ""  # the field's name, where the first flag does not give it
    carried: bool = True  # a ServerArgs field (False: read once at startup, like --api-key-file)

    @property
    def name(self) -> str:
        return self.dest or self.flags[0].lstrip("-").replace("-", "_")

    @property
    def is_switch(self) -> bool:
        return self.action == "store_true"

    @property
    def is_list(self) -> bool:
        return self.action == "append" or self.nargs == "*"

    def annotation(self) -> Any:
        if self.is_list:
            return List[str]
        if self.is_switch:
            return bool
        kind = self.type or str
        return kind if self.default is not None else Optional[kind]

    def fresh_default(self) -> Any:
        return list(self.default) if self.is_list else self.default


_S = Setting
SETTINGS: Tuple[Setting, ...] = (
    # -- where to listen ---------------------------------------------------------------------------
    _S(("--host",), "address to bind (default: %(default)s)", "127.0.0.1", doc="the address to listen on"),
    _S(("--port",), "TCP port; 0 picks a free one (default: %(default)s)", 30000, int, check=in_range(0, 65535),
       doc="the TCP port to listen on (`--port 0` picks a free port)"),
    # -- the model: tokenizer, chat template, engine ---------------------------------------------------
    _S(("--tokenizer-path", "--model-path"), "tokenizer.json, or a directory holding one "
       "(default: mtok's built-in tokenizer)", doc_default="built-in",
       doc="a `tokenizer.json`, or a directory with one (+ `tokenizer_config.json` / `special_tokens_map.json` "
           "for eos/bos)"),
    _S(("--served-model-name",), "model name reported in responses", doc_default="from the path",
       doc="the model name in responses"),
    _S(("--model",), "serve this tokenizer (and engine) as model NAME; repeat for several models; the first is "
       "the default", [], action="append", metavar="NAME=PATH[:ENGINE]", dest="models", doc_default="—",
       doc="serve several models (repeatable; replaces the two flags above)"),
    _S(("--chat-template",), "the chat template: a .jinja file, or a .json file holding it; NAME= for one model of "
       "several (default: the model's chat_template.jinja, else its tokenizer_config.json)", [], action="append",
       metavar="[NAME=]FILE", doc_default="the model's own",
       doc="chat template (`.jinja`, or `.json` holding it); `NAME=` for one model (repeatable)"),
    _S(("--chat-template-backend",), "'jinja2', or 'python' = mtok's own engine; auto = jinja2 when installed "
       "(default: %(default)s)", "auto", choices=CHAT_TEMPLATE_BACKENDS,
       doc="`jinja2`, `python` (mtok's own engine), `auto` (jinja2 when installed)"),
    _S((CHAT_CPU_FLAG,), "CPU seconds one chat template render may use; past them the request gets a 400 "
       "(default: %(default)s)", CHAT_MAX_CPU_SECONDS, float, check=positive,
       doc="CPU time one chat template render may use (400 beyond)"),
    _S((CHAT_MEMORY_FLAG,), "MiB of strings, lists and ints one chat template render may build in all; past them "
       "the request gets a 400 (default: %(default)s)", CHAT_MAX_MEMORY_MIB, int, check=positive,
       doc="memory one chat template render may build, in all (400 beyond)"),
    _S(("--tokenizer-backend",), "'hf' = the tokenizers library, 'python' = mtok's own runtime "
       "(default: %(default)s)", "auto", choices=("auto", "hf", "python"),
       doc="`hf` (the `tokenizers` library), `python` (mtok's runtime), `auto` (hf when installed)"),
    _S(("--tokenizer-worker-num",), "HTTP/tokenizer worker processes (default: %(default)s)", 1, int,
       check=at_least(1)),
    _S(("--detokenizer",), "where token ids become text: 'inline' = in the scheduler's process (one hop less "
       "per step), 'process' = a process of its own, as SGLang (default: %(default)s)", "inline",
       choices=("inline", "process"),
       doc="where token ids become text: `inline` (in the scheduler's process: one hop, one pickling and one "
           "wake-up less per step) or `process` (a process of its own, SGLang's layout: decoding gets a core "
           "of its own) (see [architecture.md](architecture.md#the-processes))"),
    _S(("--engine",), "'echo' or module:attr of an engine class (default: %(default)s)", "echo",
       doc="`echo`, `sglang:URL`, `vllm:URL`, `module:attr` or `path/file.py:attr` "
           "(see `examples/custom_engine.py`)"),
    _S(("--skip-tokenizer-init",), "token ids in (input_ids; text prompts and stop strings are 400s), token ids "
       "out (no text), as SGLang's flag: lets one mtok front another (default: off)", False, action="store_true",
       doc="token ids in, token ids out (no text): an engine host for other mtok frontends"),
    _S(("--engine-step-delay",), "seconds each engine step takes, to emulate a model (default: %(default)s)", 0.0,
       float, check=not_negative, doc="seconds per engine step, to emulate a model's decode step"),
    _S(("--context-length",), "max prompt + generated tokens (default: the tokenizer's model_max_length, "
       "else 65536; an upstream engine's smaller max_model_len wins)", None, int, check=at_least(2),
       doc_default="tokenizer's, else 65536", doc="prompt + `max_new_tokens` limit (an upstream engine's smaller "
                                                  "`max_model_len` wins)"),
    # -- capacity ---------------------------------------------------------------------------------------
    _S(("--max-running-requests",), "requests decoded at once (default: %(default)s)", 256, int, check=positive),
    _S(("--max-queued-requests",), "requests waiting beyond those; more get 503 (default: %(default)s)", 4096, int,
       check=positive, doc="waiting requests beyond those; more get 503 + `Retry-After`"),
    _S(("--max-request-bytes", "--max-payload-size"), "largest HTTP body accepted (default: %(default)s)", 16 << 20,
       int, check=positive,
       doc_default="16 MiB", doc="largest request body (413 beyond)"),
    _S(("--max-connections",), "open client connections per worker; more get 503 (default: %(default)s)", 1024,
       int, check=positive, doc="open client connections per worker (503 beyond)"),
    _S(("--http-threads-only",), "serve every request from a thread per connection, without the event loop "
       "(default: off; the loop needs Linux's epoll)", False, action="store_true",
       doc="no event loop: a thread per connection serves every request "
           "(see [architecture.md](architecture.md#the-http-front))"),
    # -- access -------------------------------------------------------------------------------------------
    _S(("--api-key",), "require 'Authorization: Bearer KEY' on all endpoints but /health (visible to ps: prefer "
       f"--api-key-file or {API_KEY_ENV})",
       doc="require `Authorization: Bearer KEY` everywhere but `/health*`, `/ready`, `/ping`, `/metrics` (the "
           "flag is visible to every local user in `ps`; prefer the next one, or the environment's "
           f"`{API_KEY_ENV}`)"),
    _S(("--api-key-file",), "read the API key from this file's first line", metavar="PATH", carried=False,
       doc=f"the API key, from the file's first line (with neither flag: `${API_KEY_ENV}`)"),
    # -- time limits ----------------------------------------------------------------------------------------
    _S(("--worker-timeout",), "seconds without a heartbeat before a worker is replaced (default: %(default)s)",
       30.0, float, check=positive),
    _S(("--graceful-timeout",), "seconds SIGTERM waits for requests in flight (default: %(default)s)", 30.0, float,
       check=positive),
    _S(("--http-timeout",), "seconds a client may take to send a request, or to take a piece of its response "
       "(default: %(default)s)", 60.0, float, check=positive,
       doc="seconds a client has to send a whole request (slow clients are cut off), and to take each piece of a "
           "response"),
    _S(("--request-timeout",), "seconds a request may run before it fails with 504 (default: %(default)s)", 600.0,
       float, check=positive, doc="seconds a request may run; then it is aborted and the client gets 504"),
    # -- request limits -----------------------------------------------------------------------------------------
    _S(("--max-prompts-per-request",), "prompts in one batch request (default: %(default)s)", 4096, int,
       check=positive, doc="prompts (or embedding inputs) in one request (400 beyond)"),
    _S(("--max-stop-strings",), "stop strings in one request (default: %(default)s)", 256, int, check=positive,
       doc="stop strings in one request (400 beyond)"),
    _S(("--max-stop-chars",), "characters in all of a request's stop strings together (default: %(default)s)",
       16384, int, check=positive, doc="characters in all of one request's stop strings (400 beyond)"),
    _S(("--max-stop-regexes",), "stop_regex patterns in one request (default: %(default)s, SGLang's)", 32, int,
       check=positive, doc="`stop_regex` patterns in one request (400 beyond)"),
    _S(("--max-stop-regex-length",), "characters in one stop_regex pattern (default: %(default)s, SGLang's)", 256,
       int, check=positive, doc="characters in one `stop_regex` pattern (400 beyond)"),
    _S(("--max-logprobs",), "top logprobs per token a request may ask for (default: %(default)s)", 20, int,
       check=not_negative, doc="top logprobs per token a request may ask for, as vLLM's flag (400 beyond)"),
    _S(("--max-logprob-entries",), "logprob values one request may ask for, over its prompts, samples and tokens "
       "(default: 1000000, or 64 tokens' worth at --max-logprobs if that is more)", None, int, check=at_least(1),
       doc_default="1,000,000, or 64 × (1 + `--max-logprobs`) if more",
       doc="logprob values one request may ask for: prompts × `n` × (scored prompt tokens + max new tokens) × "
           "(1 + top logprobs + token ids asked) (400 beyond; chat without `max_tokens` gets the new tokens "
           "that fit, then finish_reason `length`); an operator who raises `--max-logprobs` to the whole "
           "vocabulary (as vLLM's own tests do) can still be asked for 64 tokens at it"),
    # -- behaviour --------------------------------------------------------------------------------------------
    _S(("--listen-mode",), "how workers share the port: one inherited socket ('shared', what auto picks) or one "
       "SO_REUSEPORT socket each (default: %(default)s)", "auto", choices=("auto", "reuseport", "shared"),
       doc="how workers share the port: one inherited socket (`shared`, what `auto` picks: a dying worker loses "
           "no queued connection, and idle workers accept first) or `reuseport` (one `SO_REUSEPORT` socket each)"),
    _S(("--log-level",), "debug, info, warning, error (default: %(default)s)", "info",
       doc="`debug`, `info`, `warning`, `error`"),
    _S(("--strict-fields",), "refuse request fields mtok does not know (default: ignore them, logging each name "
       "once)", False, action="store_true",
       doc="refuse request fields mtok does not know (default: ignore them, logged once)"),
    _S(("--incremental-streaming-output",), "native streams send only what is new in each event: text, output_ids, "
       "output logprobs (default: cumulative, as SGLang)", False, action="store_true",
       doc="native streams send only new text, `output_ids` and output logprobs"),
    _S(("--detokenize-key",), "the key of /detokenize's text: 'text' (SGLang's), 'prompt' (vLLM's) or 'both', so "
       "that a client of either reads its own (default: %(default)s)", "both", choices=("both", "text", "prompt"),
       doc="`/detokenize`'s key for the text: `text` (SGLang's shape), `prompt` (vLLM's) or `both` (see "
           "[api.md](api.md#where-mtok-differs-deliberately))"),
    _S(("--cors-allow-origins",), "origins browsers may call from ('*' for any; default: none)", [], nargs="*",
       metavar="ORIGIN", doc="origins browsers may call from (`*` for any)"),
    _S(("--tool-call-parser",), "SGLang's tool-call parser name (hermes, qwen25, llama3, mistral, ...); MODEL= sets "
       "it for one --model only; repeatable", [], action="append", metavar="[MODEL=]NAME",
       doc="SGLang's tool-call parser name, for every model or one (see [chat.md](chat.md#tool-calls-and-reasoning))"),
    _S(("--reasoning-parser",), "SGLang's reasoning parser name (deepseek-r1, qwen3, glm45, kimi, ...); MODEL= sets "
       "it for one --model only; repeatable", [], action="append", metavar="[MODEL=]NAME",
       doc="SGLang's reasoning parser name, likewise"),
)


def add_arguments(parser: Any) -> None:
    """Each setting as an argparse option of ``parser``."""
    for s in SETTINGS:
        kwargs: Dict[str, Any] = {"default": s.fresh_default(), "help": s.help}
        if s.dest:
            kwargs["dest"] = s.dest
        for key in ("type", "action", "nargs", "choices", "metavar"):
            if getattr(s, key) is not None:
                kwargs[key] = getattr(s, key)
        if s.is_switch:
            del kwargs["default"]  # store_true's own: False
        parser.add_argument(*s.flags, **kwargs)


def dataclass_fields() -> List[Tuple[str, Any, Any]]:
    """(name, type, field) of each carried setting, for ``dataclasses.make_dataclass``."""
    out = []
    for s in SETTINGS:
        if not s.carried:
            continue
        f = dataclasses.field(default_factory=list) if s.is_list else dataclasses.field(default=s.default)
        out.append((s.name, s.annotation(), f))
    return out


def problems(values: Any) -> List[str]:
    """What is wrong with each carried setting of ``values`` on its own, as the flag would say it."""
    out = []
    for s in SETTINGS:
        if s.check is not None and s.carried:
            why = s.check(getattr(values, s.name))
            if why:
                out.append(f"{s.flags[0]} {why}")
    return out


# -- the flag table (docs/operations.md) ------------------------------------------------------------
def _flag_cell(s: Setting) -> str:
    first = s.flags[0] + (f" {s.metavar}" if s.metavar else "") + ("..." if s.nargs == "*" else "")
    aliases = "".join(f" (`{a}`)" for a in s.flags[1:])
    return f"`{first}`{aliases}"


def _default_cell(s: Setting) -> str:
    if s.doc_default:
        return s.doc_default
    if s.is_switch:
        return "off"
    if s.default is None or s.default == []:
        return "none"
    return f"{s.default:g}" if isinstance(s.default, float) else str(s.default)


def _doc_cell(s: Setting) -> str:
    if s.doc:
        return s.doc
    return s.help.split(" (default: ")[0]


TABLE_HEADER = ("| flag | default | meaning |", "|---|---|---|")


def markdown() -> str:
    """The flag table of docs/operations.md (``python -m mtok.flags``; tests/process/test_flags.py keeps them equal)."""
    rows = [f"| {_flag_cell(s)} | {_default_cell(s)} | {_doc_cell(s)} |" for s in SETTINGS]
    return "\n".join(TABLE_HEADER + tuple(rows)) + "\n"


if __name__ == "__main__":
    print(markdown(), end="")
