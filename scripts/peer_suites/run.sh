#!/usr/bin/env bash
# Run SGLang's and vLLM's own OpenAI-server tests, unchanged, against mtok with
# the echo engine (scripts/peer_suites.md says what, and why this way).
#
#   scripts/peer_suites/run.sh SGLANG_CHECKOUT VLLM_CHECKOUT     # "-" for either skips that suite
#
# A checkout is the root of the peer's repository (or any tree holding the test
# files at their paths).  The listed files are copied, at their paths, into a
# scratch tree ($PEER_RUN_DIR, default a new /tmp/mtok-peer-run.*) beside the
# stand-ins vLLM's tests import from tests/ (vllm_tree/), so neither checkout is
# touched and no peer conftest.py (which would import the real packages) loads.
#
# Environment:
#   PEER_PYTHON       the tests' Python (openai, requests, pytest, pytest-asyncio,
#                     pytest-timeout, numpy, transformers, tokenizers)  [python3]
#   MTOK_PYTHON       the Python that runs mtok (mtok importable)        [PEER_PYTHON]
#   MTOK_PEER_MODELS  the directories of build_models.py                [/tmp/mtok-peer-models]
#   MTOK_PEER_LOGS    where each server's log goes                       [/tmp/mtok-peer-logs]
#   SGLANG_PEER_ARGS  mtok flags for every server of SGLang's suite      [none]
#   VLLM_PEER_ARGS    mtok flags for every server of vLLM's suite        [--detokenize-key prompt]
#                     (either set to "" for none)
#   SUITE_TIMEOUT     seconds one suite may take in all                  [1800]
# Further arguments after the two checkouts go to both pytest runs.
set -u
HERE="$(cd "$(dirname "$0")" && pwd)"
if [ $# -lt 2 ]; then
    sed -n '2,25p' "$0" | sed 's/^# \{0,1\}//'
    exit 2
fi
SGLANG_CHECKOUT="$1"; VLLM_CHECKOUT="$2"; shift 2
PEER_PYTHON="${PEER_PYTHON:-python3}"
export MTOK_PYTHON="${MTOK_PYTHON:-$PEER_PYTHON}"
export MTOK_PEER_MODELS="${MTOK_PEER_MODELS:-/tmp/mtok-peer-models}"
export MTOK_PEER_LOGS="${MTOK_PEER_LOGS:-/tmp/mtok-peer-logs}"
export QWEN3_8B="${QWEN3_8B:-Qwen/Qwen3-8B}"
export DEEPSEEK_R1_DISTILL_QWEN_7B="${DEEPSEEK_R1_DISTILL_QWEN_7B:-deepseek-ai/DeepSeek-R1-Distill-Qwen-7B}"
SUITE_TIMEOUT="${SUITE_TIMEOUT:-1800}"
RUN="${PEER_RUN_DIR:-$(mktemp -d /tmp/mtok-peer-run.XXXXXX)}"

SGLANG_FILES="basic/test_openai_server.py
features/test_continuous_usage_stats.py features/test_enable_thinking.py
features/test_reasoning_content.py features/test_usage_tokens.py
function_call/test_parallel_tool_calls.py function_call/test_tool_choice.py
validation/test_large_max_new_tokens.py validation/test_matched_stop.py
validation/test_openai_server_ignore_eos.py validation/test_request_body_validation.py
validation/test_request_length_validation.py"
VLLM_FILES="tests/entrypoints/openai/test_tokenization.py tests/entrypoints/openai/test_chat_echo.py
tests/entrypoints/openai/test_chat_logit_bias_validation.py
tests/entrypoints/openai/chat_completion/test_chat_stop_token_ids_validation.py"

timeout 60 "$MTOK_PYTHON" -c "import mtok" || { echo "MTOK_PYTHON=$MTOK_PYTHON cannot import mtok" >&2; exit 2; }
for d in llama3 qwen3 mistral zephyr bert; do
    [ -f "$MTOK_PEER_MODELS/$d/tokenizer.json" ] || {
        echo "$MTOK_PEER_MODELS/$d missing: run $HERE/build_models.py --shared DIR --qwen3 DIR --out $MTOK_PEER_MODELS" >&2
        exit 2; }
done

copy() {  # copy FROM_ROOT TO_ROOT FILE...: each file at its path
    local from="$1" to="$2"; shift 2
    for f in "$@"; do
        [ -f "$from/$f" ] || { echo "$from/$f: not found" >&2; return 1; }
        mkdir -p "$to/$(dirname "$f")" && cp "$from/$f" "$to/$f"
    done
}

suite() {  # suite NAME DIR FILES...: pytest in DIR, its output in $RUN/NAME.log, counts in $RUN/NAME.xml
    local name="$1" dir="$2"; shift 2
    local t0=$SECONDS
    echo "== $name: $dir (MTOK_PEER_ARGS='$MTOK_PEER_ARGS')"
    (cd "$dir" && PYTHONPATH="$HERE" timeout "$SUITE_TIMEOUT" "$PEER_PYTHON" -m pytest -p skips --timeout 300 \
        -p no:cacheprovider -o asyncio_default_fixture_loop_scope=function --rootdir "$dir" -rfEs --junitxml "$RUN/$name.xml" "$@" $EXTRA) 2>&1 | tee "$RUN/$name.log"
    local rc=${PIPESTATUS[0]}
    echo "== $name: exit $rc, $((SECONDS - t0)) s"
    return "$rc"
}

EXTRA="$*"
status=0
if [ "$SGLANG_CHECKOUT" != - ]; then
    src="$SGLANG_CHECKOUT/test/srt/openai_server" dst="$RUN/sglang/test/srt/openai_server"
    copy "$src" "$dst" $SGLANG_FILES || exit 2
    MTOK_PEER_ARGS="${SGLANG_PEER_ARGS-}" suite sglang "$dst" $SGLANG_FILES || status=1
fi
if [ "$VLLM_CHECKOUT" != - ]; then
    dst="$RUN/vllm"
    copy "$VLLM_CHECKOUT" "$dst" $VLLM_FILES || exit 2
    cp -R "$HERE/vllm_tree/tests" "$dst/"  # the stand-in tests/utils.py and test_completion.py
    for p in tests tests/entrypoints tests/entrypoints/openai tests/entrypoints/openai/chat_completion; do
        [ -f "$VLLM_CHECKOUT/$p/__init__.py" ] && cp "$VLLM_CHECKOUT/$p/__init__.py" "$dst/$p/" || touch "$dst/$p/__init__.py"
    done
    MTOK_PEER_ARGS="${VLLM_PEER_ARGS---detokenize-key prompt}" suite vllm "$dst" $VLLM_FILES || status=1
fi
echo "== logs: $RUN (pytest), $MTOK_PEER_LOGS (servers)"
exit $status
