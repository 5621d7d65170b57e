"""/v1/responses with the real ``openai`` client against a real server (echo engine).

The template renders the last user message only, so the echo "model" says what the
input says (docs/chat.md, "Tool calls and reasoning"): reasoning, text and a tool call
are deterministic, streamed and not.  A second server's template renders every
message, so the prompt built from input items can be read back.
"""

from __future__ import annotations

import os

import pytest

from support import ROOT, import_real

openai = import_real("openai")

pytestmark = pytest.mark.fast

SAYS = ('<think>Needs a tool.</think>Checking.<tool_call>{"name": "get_weather", "arguments": {"city": "Paris"}}'
        '</tool_call>END')
TOOLS = [{"type": "function", "name": "get_weather", "parameters": {"type": "object"}}]
PLAIN = {"reasoning": {"effort": "none"}, "extra_body": {"stop": ["END"]}}  # qwen3: thinking off, so text is text


@pytest.fixture(scope="module", params=[["--tokenizer-worker-num", "1"], ["--tokenizer-worker-num", "2"],
                                        ["--http-threads-only"]], ids=["N1", "N2", "threads"])
def srv(request, server_factory):
    return server_factory(*request.param, "--chat-template", os.path.join(ROOT, "examples", "chat_template_echo_last.jinja"),
                          "--tool-call-parser", "hermes", "--reasoning-parser", "qwen3", "--api-key", "sk-1")


def client(srv):
    return openai.OpenAI(base_url=f"http://{srv.host}:{srv.port}/v1", api_key="sk-1", max_retries=0)


def plain(items):
    """Output items as JSON, without their random ids and the stream helper's own parsed fields."""
    drop = {"id", "call_id", "parsed", "parsed_arguments"}

    def walk(x):
        if isinstance(x, dict):
            return {k: walk(v) for k, v in x.items() if k not in drop}
        return [walk(v) for v in x] if isinstance(x, list) else x
    return walk([o.model_dump() for o in items])


def auth():
    return {"Authorization": "Bearer sk-1"}


def test_a_response_in_openais_shape(srv):
    resp = client(srv).responses.create(model="mtok-default", input="Hello thereEND", instructions="Be brief.",
                                        temperature=0, top_p=1.0, metadata={"k": "v"}, **PLAIN)
    assert resp.object == "response" and resp.id.startswith("resp_") and resp.created_at > 0
    assert resp.status == "completed" and resp.error is None and resp.incomplete_details is None
    assert resp.output_text == "Hello there" and [o.type for o in resp.output] == ["message"]
    msg = resp.output[0]
    assert msg.role == "assistant" and msg.status == "completed" and msg.content[0].type == "output_text"
    assert resp.instructions == "Be brief." and resp.metadata == {"k": "v"} and resp.model == "mtok-default"
    assert resp.text.format.type == "text" and resp.reasoning.effort == "none" and resp.store is True
    u = resp.usage
    assert u.input_tokens > 0 and u.output_tokens > 0 and u.total_tokens == u.input_tokens + u.output_tokens
    assert (u.prompt_tokens, u.completion_tokens) == (u.input_tokens, u.output_tokens)  # SGLang's tests read these


def test_the_token_budget_makes_it_incomplete(srv):
    resp = client(srv).responses.create(model="m", input="one two three four five", max_output_tokens=2, **PLAIN)
    assert resp.status == "incomplete" and resp.incomplete_details.reason == "max_output_tokens"
    assert resp.usage.output_tokens == 2 and resp.max_output_tokens == 2


def test_reasoning_text_and_a_function_call_are_items(srv):
    resp = client(srv).responses.create(model="m", input=SAYS, tools=TOOLS, extra_body={"stop": ["END"]})
    assert [o.type for o in resp.output] == ["reasoning", "message", "function_call"]
    reasoning, msg, call = resp.output
    assert reasoning.content[0].text == "Needs a tool." and msg.content[0].text == "Checking."
    assert (call.name, call.arguments, call.status) == ("get_weather", '{"city": "Paris"}', "completed")
    assert call.call_id.startswith("call_") and call.id.startswith("fc_")
    assert resp.tools[0].name == "get_weather" and resp.tool_choice == "auto"


def test_the_stream_sends_openais_events_in_order(srv):
    with client(srv).responses.stream(model="m", input=SAYS, tools=TOOLS, extra_body={"stop": ["END"]}) as stream:
        events = list(stream)
        final = stream.get_final_response()
    assert [e.sequence_number for e in events] == list(range(len(events)))
    kinds = [e.type for i, e in enumerate(events)  # a delta may come in pieces, as the steps cut the text
             if not (e.type.endswith(".delta") and i and events[i - 1].type == e.type)]
    item = ["response.output_item.added", "response.content_part.added"]
    done = ["response.content_part.done", "response.output_item.done"]
    assert kinds == (["response.created", "response.in_progress"]
                     + item + ["response.reasoning_text.delta", "response.reasoning_text.done"] + done
                     + item + ["response.output_text.delta", "response.output_text.done"] + done
                     + ["response.output_item.added", "response.function_call_arguments.delta",
                        "response.function_call_arguments.done", "response.output_item.done", "response.completed"])
    assert events[0].response.status == "in_progress" and events[-1].response.status == "completed"
    assert [o.type for o in final.output] == ["reasoning", "message", "function_call"]
    assert final.output[2].arguments == '{"city": "Paris"}' and final.output_text == "Checking."
    assert [i.output_index for i in events if i.type == "response.output_item.done"] == [0, 1, 2]
    whole = client(srv).responses.create(model="m", input=SAYS, tools=TOOLS, extra_body={"stop": ["END"]})
    assert plain(whole.output) == plain(final.output)  # streamed = not streamed


def test_a_created_stream_adds_up_to_the_text(srv):
    deltas, last = [], None
    for event in client(srv).responses.create(model="m", input="Stream me pleaseEND", stream=True, **PLAIN):
        if event.type == "response.output_text.delta":
            deltas.append(event.delta)
        last = event
    assert "".join(deltas) == "Stream me please" and last.type == "response.completed"
    assert last.response.output_text == "Stream me please" and last.response.usage.output_tokens > 0


@pytest.mark.parametrize("body, status, words", [
    ({"input": "Hi", "previous_response_id": "bad"}, 400, "previous_response_id"),
    ({"input": "Hi", "previous_response_id": "resp_123"}, 400, "keeps no responses"),
    ({"input": "Hi", "background": True}, 400, "background"),
    ({}, 400, "'input' is required"),
    ({"input": []}, 400, "'input' must be a string or a non-empty list"),
    ({"input": [{"role": "user", "content": [{"type": "input_image", "image_url": "x"}]}]}, 400, "text only"),
    ({"input": "Hi", "tools": [{"type": "web_search"}]}, 400, "only 'function' tools"),
    ({"input": "Hi", "tools": [{"type": "function"}]}, 400, "Function tools must include a name."),
    ({"input": "Hi", "max_output_tokens": 0}, 400, "max_output_tokens"),
    ({"input": "Hi", "temperature": -1}, 400, "temperature"),
    ({"input": [{"type": "file_search_call"}]}, 400, "is not supported"),
])
def test_errors_have_the_nested_shape_and_the_server_keeps_serving(srv, body, status, words):
    got, _, err = srv.request("POST", "/v1/responses", body, headers=auth())
    assert got == status, err
    assert set(err["error"]) >= {"message", "type", "code"} and words in err["error"]["message"], err
    assert client(srv).responses.create(model="m", input="okEND", **PLAIN).output_text == "ok"


def test_a_response_cannot_be_retrieved(srv):
    status, _, err = srv.request("GET", "/v1/responses/resp_123", headers=auth())
    assert status == 404 and err["error"]["message"].startswith("Response with id 'resp_123' not found")


def test_a_json_format_needs_an_engine_that_constrains(srv):
    with pytest.raises(openai.BadRequestError) as e:
        client(srv).responses.create(model="m", input="{}", text={"format": {"type": "json_object"}})
    assert "constrain" in str(e.value) or "json_schema" in str(e.value)


ALL_MESSAGES = ("{%- for m in messages -%}{{ m.role }}:{{ m.content or '' }}"
                "{%- for c in m.tool_calls or [] %}[{{ c.id }} {{ c.function.name }}{{ c.function.arguments }}]"
                "{%- endfor %}{% if m.tool_call_id %}({{ m.tool_call_id }}){% endif %}|{%- endfor -%}")


def test_input_items_become_the_chat_messages(server_factory, tmp_path):
    template = tmp_path / "all.jinja"
    template.write_text(ALL_MESSAGES)
    srv = server_factory("--chat-template", str(template))
    items = [{"role": "developer", "content": "Rules."},
             {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "Weather?"}]},
             {"type": "reasoning", "id": "rs_1", "summary": []},
             {"type": "function_call", "call_id": "c1", "name": "get_weather", "arguments": "{}"},
             {"type": "function_call_output", "call_id": "c1", "output": "sunny"}]
    expected = "system:Be brief.|system:Rules.|user:Weather?|assistant:[c1 get_weather{}]|tool:sunny(c1)|"
    c = openai.OpenAI(base_url=f"http://{srv.host}:{srv.port}/v1", api_key="x", max_retries=0)
    size = c.responses.create(model="m", input=items, instructions="Be brief.", max_output_tokens=1).usage.input_tokens
    resp = c.responses.create(model="m", input=items, instructions="Be brief.", max_output_tokens=size)
    assert resp.output_text == expected  # the echo engine says the prompt back: the template saw these messages


def test_an_upstream_failing_mid_stream_ends_it_with_response_failed(server_factory):
    from upstream_standin import SGLangStandIn

    standin = SGLangStandIn()
    try:
        srv = server_factory("--engine", f"sglang:{standin.url}?timeout=10",
                             "--chat-template", os.path.join(ROOT, "examples", "chat_template_echo_last.jinja"))
        standin.behaviour.update(error_after=3, delay=0.05)
        events = list(openai.OpenAI(base_url=f"http://{srv.host}:{srv.port}/v1", api_key="x", max_retries=0)
                      .responses.create(model="m", input="a few words to say back", stream=True))
        assert events[-1].type == "response.failed" and events[-1].response.status == "failed"
        assert "out of memory" in events[-1].response.error.message
        assert [e.sequence_number for e in events] == list(range(len(events)))
        assert any(e.type == "response.output_text.delta" for e in events)  # it had begun
    finally:
        standin.stop()


@pytest.mark.parametrize("field", ["reasoning", "text", "metadata", "chat_template_kwargs"])
def test_an_object_field_given_as_something_else_is_a_400(srv, field):
    status, _, err = srv.request("POST", "/v1/responses", {"input": "Hi", field: "high"}, headers=auth())
    assert status == 400 and err["error"]["param"] == field, err
