"""The official openai client against mtok, N = 1 and N = 2."""

from __future__ import annotations

import pytest

from support import import_real

openai = import_real("openai")

from mtok.engines.echo import echo_embedding  # noqa: E402

pytestmark = pytest.mark.fast


@pytest.fixture(scope="module", params=[1, 2], ids=["N1", "N2"])
def srv(request, server_factory):
    return server_factory("--tokenizer-worker-num", str(request.param), "--api-key", "sk-test")


@pytest.fixture(scope="module")
def client(srv):
    return openai.OpenAI(base_url=f"http://{srv.host}:{srv.port}/v1", api_key="sk-test", max_retries=0, timeout=30)


def n_tokens(srv, text):
    status, _, body = srv.request("POST", "/tokenize", {"prompt": text}, headers={"Authorization": "Bearer sk-test"})
    return body["count"]


def test_models(client):
    models = client.models.list()
    assert [m.id for m in models.data] == ["mtok-default"]


def test_completion(client, srv):
    text = "The official client speaks to mtok."
    resp = client.completions.create(model="mtok-default", prompt=text, max_tokens=n_tokens(srv, text))
    assert resp.choices[0].text == text and resp.choices[0].finish_reason == "length"
    assert resp.usage.completion_tokens == n_tokens(srv, text)
    resp = client.completions.create(model="mtok-default", prompt=text, max_tokens=50, stop=["speaks"])
    assert resp.choices[0].text == "The official client " and resp.choices[0].finish_reason == "stop"


def test_streamed_completion(client, srv):
    text = "Streaming through the client, piece by piece."
    stream = client.completions.create(model="mtok-default", prompt=text, max_tokens=n_tokens(srv, text), stream=True,
                                       stream_options={"include_usage": True})
    chunks = list(stream)
    assert "".join(c.choices[0].text for c in chunks if c.choices) == text
    assert chunks[-1].usage.completion_tokens == n_tokens(srv, text)


def test_embeddings(client, srv):
    texts = ["embed me", "and me too"]
    resp = client.embeddings.create(model="mtok-default", input=texts)  # the client asks for base64 itself
    assert [d.index for d in resp.data] == [0, 1]
    for d, t in zip(resp.data, texts):
        ids = srv.request("POST", "/tokenize", {"prompt": t}, headers={"Authorization": "Bearer sk-test"})[2]["tokens"]
        assert all(abs(a - b) < 1e-6 for a, b in zip(d.embedding, echo_embedding(ids)))
    resp = client.embeddings.create(model="mtok-default", input="float please", encoding_format="float")
    assert len(resp.data[0].embedding) == 64


def test_errors_raise_the_right_exceptions(client, srv):
    with pytest.raises(openai.BadRequestError) as e:
        client.completions.create(model="mtok-default", prompt="x", max_tokens=0)
    assert e.value.status_code == 400 and "max_tokens" in str(e.value)
    with pytest.raises(openai.BadRequestError) as e:
        client.completions.create(model="mtok-default", prompt="x", max_tokens=1, extra_body={"regex": "[0-9]+"})
    assert e.value.status_code == 400 and "regex" in str(e.value)
    with pytest.raises(openai.BadRequestError):
        client.embeddings.create(model="mtok-default", input=[])
    bad = openai.OpenAI(base_url=f"http://{srv.host}:{srv.port}/v1", api_key="wrong", max_retries=0)
    with pytest.raises(openai.AuthenticationError):
        bad.models.list()
