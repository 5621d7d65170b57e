"""The field table against the pinned schemas, and every field sent at its default and at a wrong type."""

from __future__ import annotations

import importlib.util
import json
import os
import sys

import pytest

from mtok import fields
from support import ROOT

PINNED = os.path.join(ROOT, "tests", "data", "pinned_request_fields.json")

# Which part of mtok serves each pinned schema.
SCHEMA_API = {
    "sglang.GenerateReqInput": fields.GEN,
    "sglang.SamplingParams": fields.SP,
    "sglang.EmbeddingReqInput": fields.ENC,
    "sglang.CompletionRequest": fields.CMPL,
    "sglang.ChatCompletionRequest": fields.CHAT,
    "sglang.EmbeddingRequest": fields.EMB,
    "vllm.CompletionRequest": fields.CMPL,
    "vllm.ChatCompletionRequest": fields.CHAT,
    "vllm.EmbeddingCompletionRequest": fields.EMB,
    "openai.CompletionCreateParams": fields.CMPL,
    "openai.ChatCompletionCreateParams": fields.CHAT,
    "openai.EmbeddingCreateParams": fields.EMB,
}


def missing_from_table(schemas):
    return sorted(f"{schema}.{name}" for schema, names in schemas.items()
                  for name in names if name not in fields.FIELDS[SCHEMA_API[schema]])


@pytest.mark.fast
def test_every_pinned_field_is_in_the_table():
    with open(PINNED) as f:
        pinned = json.load(f)["schemas"]
    assert set(pinned) == set(SCHEMA_API)
    assert missing_from_table(pinned) == []


@pytest.mark.fast
def test_the_table_against_the_installed_packages():
    """The live packages, where installed: the openai client (a test dependency),
    and sglang / vllm when present, read by the same script that pins them."""
    sys.path.insert(0, os.path.join(ROOT, "scripts"))
    try:
        import pin_request_schemas as pin
    finally:
        sys.path.pop(0)
    roots = {}
    for pkg in ("openai", "sglang", "vllm"):
        spec = importlib.util.find_spec(pkg)
        if spec is not None and spec.submodule_search_locations:
            roots[pkg] = list(spec.submodule_search_locations)[0]
    if "openai" not in roots:
        pytest.skip("the openai package is not installed")
    live = {}
    for schema, (pkg, files, cls, kind) in pin.SCHEMAS.items():
        paths = [os.path.join(roots.get(pkg, ""), f) for f in files]
        if pkg not in roots or not all(os.path.isfile(p) for p in paths):
            continue
        classes = pin._classes(paths)
        if cls not in classes:
            continue
        if kind == "class":
            live[schema] = pin.class_fields(classes, cls)
        else:
            with open(paths[0]) as f:
                live[schema] = pin.api_fields(classes, cls, f.read())
    assert any(s.startswith("openai.") for s in live)
    assert missing_from_table(live) == []


@pytest.mark.fast
def test_every_row_is_well_formed():
    actions = {fields.USED, fields.FORWARDED, fields.IGNORED, fields.REFUSED}
    from mtok.engines import CAPABILITIES

    for f in fields.TABLE:
        assert f.action in actions and f.where, f
        assert f.capability is None or f.capability in CAPABILITIES, f
        assert f.action != fields.REFUSED or f.why, f


# -- every field, over HTTP -------------------------------------------------------------
BASES = {
    fields.GEN: ("/generate", {"text": "fuzz me", "sampling_params": {"max_new_tokens": 2}}),
    fields.SP: ("/generate", {"text": "fuzz me"}),
    fields.ENC: ("/encode", {"text": "fuzz me"}),
    fields.CMPL: ("/v1/completions", {"prompt": "fuzz me", "max_tokens": 2}),
    fields.CHAT: ("/v1/chat/completions", {"messages": [{"role": "user", "content": "fuzz me"}], "max_tokens": 2}),
    fields.EMB: ("/v1/embeddings", {"input": "fuzz me"}),
    fields.TOK: ("/tokenize", {"messages": [{"role": "user", "content": "fuzz me"}]}),
    fields.DETOK: ("/detokenize", {"tokens": [70, 71]}),
    fields.RESP: ("/v1/responses", {"input": "fuzz me", "max_output_tokens": 2}),
    fields.SCORE: ("/v1/score", {"query": "fuzz", "items": [" me"], "label_token_ids": [1]}),
    fields.RERANK: ("/v1/rerank", {"query": "fuzz", "documents": ["me"]}),
}
# Fields whose default cannot stand alone in a body (the prompt and its alternatives).
PROMPT_FIELDS = {"text", "input_ids", "prompt", "messages", "input", "sampling_params", "rid", "tokens", "query",
                 "items", "label_token_ids", "documents"}


def cases():
    for api, table in sorted(fields.FIELDS.items()):
        for name, f in sorted(table.items()):
            yield api, name, f


def body_with(api, name, value):
    path, base = BASES[api]
    body = json.loads(json.dumps(base))
    if api == fields.SP:
        body["sampling_params"] = {name: value}
    else:
        if fields.FIELDS[api][name].name == "max_new_tokens":
            body.pop("max_tokens", None)  # one name of the three at a time
        body[name] = value
    return path, body


def wrong_value(f):
    """A value of the wrong JSON type for the field: an object, or a string where an object goes."""
    return "not-an-object" if f.check is not None and f.check.__name__ == "as_object" else {"wrong": [1]}


@pytest.fixture(scope="module")
def srv(server_factory):
    return server_factory("--chat-template", os.path.join(ROOT, "examples", "chat_template_echo_last.jinja"))


def check_answer(status, body, what):
    assert status in (200, 400), (what, status, body)
    if status == 400:
        err = body["error"]
        assert err["message"] and err["type"] == "invalid_request_error" and err["code"] == 400, (what, body)


@pytest.mark.fast
def test_every_field_at_its_default_is_served(srv):
    conn = srv.conn()
    for api, name, f in cases():
        if name in PROMPT_FIELDS or name in ("model",):
            continue
        path, body = body_with(api, name, f.default)
        status, _, resp = srv.request("POST", path, body, conn=conn)
        if name in ("tools", "functions", "documents") and status == 400:
            continue  # the chat template's business: null is not a list of tools
        assert status == 200, (api, name, f.default, resp)


@pytest.mark.fast
def test_every_field_at_a_wrong_type_is_a_200_or_a_clear_400(srv):
    conn = srv.conn()
    for api, name, f in cases():
        path, body = body_with(api, name, wrong_value(f))
        status, _, resp = srv.request("POST", path, body, conn=conn)
        check_answer(status, resp, (api, name))
        if f.action == fields.USED and f.check is not None and name not in PROMPT_FIELDS:
            assert status == 400, (api, name, resp)
        if f.action == fields.IGNORED:
            assert status == 200, (api, name, resp)
    assert srv.post("/generate", {"text": "still serving"})[0] == 200


def pinned_refused_defaults():
    """(surface, field, SGLang's default) of every refused field the pinned schemas give a default."""
    with open(PINNED) as f:
        pinned = json.load(f)["defaults"]
    out = set()
    for schema, defaults in sorted(pinned.items()):
        api = SCHEMA_API[schema]
        for name, default in defaults.items():
            if fields.FIELDS[api][name].action == fields.REFUSED:
                out.add((api, name, json.dumps(default)))
    return [(api, name, json.loads(default)) for api, name, default in sorted(out)]


@pytest.mark.fast
@pytest.mark.unit
def test_every_refused_field_takes_its_pinned_default():
    """A client that sends SGLang's own default of a field mtok refuses (as
    SGLang's clients do) asks for nothing mtok cannot do."""
    cases = pinned_refused_defaults()
    assert ("generate", "routed_experts_start_len", 0) in cases  # the pin holds the defaults
    wrong = [(api, name, default) for api, name, default in cases
             if not fields.is_default(default, fields.FIELDS[api][name].default)]
    assert wrong == [], "give these rows the pinned default"


@pytest.mark.fast
def test_every_refused_field_at_sglangs_default_is_served_and_refused_beyond_it(srv):
    conn = srv.conn()
    for api, name, default in pinned_refused_defaults():
        path, body = body_with(api, name, default)
        status, _, resp = srv.request("POST", path, body, conn=conn)
        assert status == 200, (api, name, default, resp)
    status, resp = srv.post("/generate", {"text": "a", "routed_experts_start_len": 3})
    assert status == 400 and resp["error"]["param"] == "routed_experts_start_len", resp


@pytest.mark.fast
def test_unknown_fields_are_ignored_and_strict_fields_refuses_them(srv, server_factory):
    status, resp = srv.post("/generate", {"text": "a", "no_such_field": 1, "sampling_params": {"nor_this": 2}})
    assert status == 200, resp
    assert srv.post("/v1/completions", {"prompt": "a", "max_tokens": 1, "typo_tokens": 3})[0] == 200
    strict = server_factory("--strict-fields")
    status, resp = strict.post("/generate", {"text": "a", "no_such_field": 1})
    assert status == 400 and resp["error"]["param"] == "no_such_field", resp
    status, resp = strict.post("/generate", {"text": "a", "sampling_params": {"nor_this": 2}})
    assert status == 400 and resp["error"]["param"] == "sampling_params.nor_this", resp
    status, resp = strict.post("/v1/completions", {"prompt": "a", "typo_tokens": 3})
    assert status == 400 and resp["error"]["param"] == "typo_tokens", resp
    # known-but-ignored fields are not typos
    assert strict.post("/generate", {"text": "a", "routed_dp_rank": 3, "log_metrics": False})[0] == 200


@pytest.mark.fast
def test_docs_fields_md_is_generated_from_the_table():
    with open(os.path.join(ROOT, "docs", "fields.md")) as f:
        assert f.read() == fields.markdown(), "run: python -m mtok.fields > docs/fields.md"


# -- the table is the one declaration of sampling defaults and bounds ------------------------------
@pytest.mark.fast
@pytest.mark.unit
def test_sampling_params_takes_its_defaults_from_the_table():
    import dataclasses

    from mtok.wire.io_struct import SamplingParams

    sp = SamplingParams()
    for f in dataclasses.fields(SamplingParams):
        if f.metadata.get("internal"):
            continue
        row = fields.FIELDS[fields.SP][f.name]
        assert getattr(sp, f.name) == (row.default if row.default is not None or f.default_factory is
                                       dataclasses.MISSING else []), f.name


@pytest.mark.fast
def test_each_surface_has_its_own_default_budget_from_the_table(srv):
    prompt = " ".join(["word"] * 200)
    assert fields.FIELDS[fields.SP]["max_new_tokens"].default == 128
    assert fields.FIELDS[fields.CMPL]["max_tokens"].default == 16
    status, resp = srv.post("/v1/completions", {"prompt": prompt})
    assert status == 200 and resp["usage"]["completion_tokens"] == 16, resp
    status, resp = srv.post("/generate", {"text": prompt})
    assert status == 200 and resp["meta_info"]["completion_tokens"] == 128, resp


@pytest.mark.fast
def test_bounds_that_differ_by_surface(srv):
    chat = {"messages": [{"role": "user", "content": "a b c d"}]}
    status, resp = srv.post("/v1/chat/completions", dict(chat, max_completion_tokens=0))
    assert status == 400 and resp["error"]["param"] == "max_completion_tokens", resp
    status, resp = srv.post("/v1/completions", {"prompt": "a", "max_tokens": 0, "echo": True})
    assert status == 200, resp  # 0 is a completion's "just score the prompt", with echo
    status, resp = srv.post("/v1/completions", {"prompt": "a", "max_tokens": 1, "logprobs": 21})
    assert status == 400 and resp["error"]["param"] == "logprobs" and "at most 20" in resp["error"]["message"], resp
    status, resp = srv.post("/v1/chat/completions", dict(chat, max_tokens=1, logprobs=3))
    assert status == 400 and "must be a boolean" in resp["error"]["message"], resp
    status, resp = srv.post("/generate", {"text": "a", "sampling_params": {"temperature": 100.5}})
    assert status == 400 and resp["error"]["param"] == "sampling_params.temperature", resp


@pytest.mark.fast
def test_a_chat_min_tokens_without_max_tokens_is_measured_against_the_context(srv):
    """The chat budget defaults to the rest of the context; min_tokens was once checked against 1 instead."""
    body = {"messages": [{"role": "user", "content": "a b c d"}], "min_tokens": 2, "stop": [" b"]}
    status, resp = srv.post("/v1/chat/completions", body)
    assert status == 200 and resp["choices"][0]["finish_reason"] == "stop", resp
