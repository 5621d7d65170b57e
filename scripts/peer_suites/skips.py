"""pytest plugin (``-p skips``) that skips the peers' tests whose assertion needs
a real model: exactly the list of docs/api.md, "SGLang's and vLLM's own test
suites", each with its reason.  The test files are not edited.

An entry is (file, class, test); class or test ``None`` means all of them.  An
entry whose file was collected but which matched no test is reported, so a
peer's rename cannot silently turn a skip into a run.
"""

import os

import pytest

WRITES = "needs a real model: what the model writes decides"
SAMPLER = "needs a real model: a constraint the model's sampler must honour, which the echo engine cannot (mtok refuses it)"
INTERNALS = "SGLang's internals, no server behaviour"

TOOL_CHOICE_CLASSES = ("TestToolChoiceLlama32", "TestToolChoiceQwen25", "TestToolChoiceMistral")
TOOL_CHOICE_CONSTRAINED = (
    "test_tool_choice_required_streaming", "test_tool_choice_required_non_streaming",
    "test_tool_choice_specific_function_streaming", "test_tool_choice_specific_function_non_streaming",
    "test_required_streaming_arguments_chunks_json", "test_complex_parameters_required_non_streaming",
    "test_multi_tool_scenario_required",
)

SKIPS = [
    # what the model writes decides
    ("test_openai_server.py", "TestOpenAIServer", "test_response_prefill",
     WRITES + ' (the continuation must begin "name": "SmartHome Mini",)'),
    ("test_openai_server.py", "TestOpenAIServerv1Responses", "test_response_prefill",
     WRITES + ' (the continuation must begin "name": "SmartHome Mini",)'),
    ("test_enable_thinking.py", "TestEnableThinking", "test_chat_completion_with_reasoning",
     WRITES + " (the model must think)"),
    ("test_enable_thinking.py", "TestEnableThinking", "test_stream_chat_completion_with_reasoning",
     WRITES + " (the model must think)"),
] + [
    ("test_reasoning_content.py", "TestReasoningContentAPI", name, WRITES + " (the model must close </think> and answer)")
    for name in ("test_streaming_separate_reasoning_true", "test_streaming_separate_reasoning_true_stream_reasoning_false",
                 "test_nonstreaming_separate_reasoning_true")
] + [
    ("test_usage_tokens.py", "TestNormalDecoding", "test_generate_api_non_streaming",
     WRITES + " (output_ids must hold </think>)"),
    ("test_parallel_tool_calls.py", "TestParallelToolCall", "test_parallel_tool_calls_required",
     WRITES + " (the model must call both tools)"),
    ("test_parallel_tool_calls.py", "TestParallelToolCall", "test_parallel_tool_calls_auto",
     WRITES + " (the model must call both tools)"),
    ("test_tool_choice.py", "TestToolChoiceQwen25", "test_multi_tool_scenario_auto",
     WRITES + " (it must call both travel tools)"),
    ("test_large_max_new_tokens.py", "TestLargeMaxNewTokens", "test_chat_completion",
     WRITES + " (answers long enough for four requests to overlap, read from SGLang's scheduler log)"),
    ("test_matched_stop.py", "TestMatchedStop", "test_finish_stop_regex_str",
     WRITES + " (its chat half needs 'and'/'or' and a full stop in the answer)"),
    # a constraint the sampler must honour
    ("test_openai_server.py", "TestOpenAIServer", "test_regex", SAMPLER + " (regex)"),
    ("test_openai_server.py", "TestOpenAIServerv1Responses", "test_regex", SAMPLER + " (regex)"),
    ("test_openai_server.py", "TestOpenAIServerCustomLogitProcessor", None,
     SAMPLER + " (a pickled torch logit processor)"),
] + [
    ("test_tool_choice.py", cls, name, SAMPLER + " (tool_choice required / a named function)")
    for cls in TOOL_CHOICE_CLASSES for name in TOOL_CHOICE_CONSTRAINED
] + [
    # SGLang's internals
    ("test_matched_stop.py", "TestRegexPatternMaxLength", None, INTERNALS + " (SGLang's regex-length helper)"),
]


def _matches(entry, item) -> bool:
    path, cls, name, _ = entry
    return (os.path.basename(str(item.fspath)) == path
            and (cls is None or (item.cls is not None and item.cls.__name__ == cls))
            and (name is None or getattr(item, "originalname", item.name) == name))


def pytest_collection_modifyitems(config, items):
    used = set()
    for item in items:
        for i, entry in enumerate(SKIPS):
            if _matches(entry, item):
                item.add_marker(pytest.mark.skip(reason=entry[3]))
                used.add(i)
                break
    files = {os.path.basename(str(item.fspath)) for item in items}
    stale = [e for i, e in enumerate(SKIPS) if i not in used and e[0] in files]
    if stale:
        reporter = config.pluginmanager.get_plugin("terminalreporter")
        for path, cls, name, _ in stale:
            line = "skips.py: no test matched %s::%s::%s" % (path, cls or "*", name or "*")
            if reporter is not None:
                reporter.write_line(line, yellow=True)
