#!/usr/bin/env bash
# Run mtok's upstream adapters against a REAL SGLang or vLLM server on a GPU
# machine, with a small model, and print what happened (docs/deploy.md).
#   examples/deploy/verify_real_upstream.sh sglang|vllm MODEL_DIR [OUT_DIR]
# MODEL_DIR: a local Hugging Face model directory (tokenizer.json inside).
set -euo pipefail
kind=$1; model=$2; out=${3:-/tmp/mtok-verify}; mkdir -p "$out"
up=31000; front=31001
if [ "$kind" = sglang ]; then
  python -m sglang.launch_server --model-path "$model" --port $up --skip-tokenizer-init >"$out/upstream.log" 2>&1 &
else
  vllm serve "$model" --port $up --enable-scale-out --skip-tokenizer-init >"$out/upstream.log" 2>&1 &
fi
upid=$!
trap 'kill $upid $fpid 2>/dev/null || true' EXIT
for _ in $(seq 600); do curl -sf localhost:$up/health >/dev/null && break; sleep 1; done
python -m mtok.serve --tokenizer-path "$model" --port $front --tokenizer-worker-num 4 \
  --engine "$kind:http://127.0.0.1:$up" >"$out/mtok.log" 2>&1 &
fpid=$!
for _ in $(seq 60); do curl -sf localhost:$front/health >/dev/null && break; sleep 1; done
run() { echo "== $1"; shift; curl -s "$@"; echo; }
{
  run "greedy /generate" localhost:$front/generate --json \
    '{"text":"The capital of France is","sampling_params":{"max_new_tokens":16,"temperature":0}}'
  run "same prompt, upstream directly (ids only)" localhost:$front/tokenize --json '{"prompt":"The capital of France is"}'
  run "logprobs" localhost:$front/generate --json \
    '{"text":"1, 2, 3,","sampling_params":{"max_new_tokens":4,"temperature":0},"return_logprob":true,"top_logprobs_num":3}'
  run "stop string (mtok cuts the upstream stream)" localhost:$front/generate --json \
    '{"text":"Count: 1, 2, 3,","sampling_params":{"max_new_tokens":64,"temperature":0,"stop":" 6"}}'
  run "chat, streamed" -N localhost:$front/v1/chat/completions --json \
    '{"messages":[{"role":"user","content":"Say hello in five words."}],"max_tokens":24,"stream":true}'
  run "n=2 seeded" localhost:$front/v1/completions --json \
    '{"prompt":"Once upon a time","max_tokens":12,"n":2,"temperature":0.8,"seed":1}'
  run "upstream state after the stop-string request (no request should be running)" localhost:$up/get_server_info
  python -m mtok.bench load --help >/dev/null 2>&1 && echo "(mtok.bench available for load runs)"
} | tee "$out/results.txt"
kill -TERM $upid 2>/dev/null; sleep 2; run "health with the upstream gone (expect 503)" localhost:$front/health | tee -a "$out/results.txt"
