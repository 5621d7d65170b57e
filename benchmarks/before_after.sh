#!/usr/bin/env bash
# mtok at an earlier revision beside mtok here, alternately, in one run: the rows a transport or
# pipeline change must not regress (2 KB /generate N = 1 and 2, short /tokenize, streaming 256
# tokens at c = 64, c = 1 latency, a streamed chat with tools), each in --rounds alternating rounds.
#
#   benchmarks/before_after.sh REV [PYTHON]
#
# REV is checked out into a temporary worktree; each server is started from its own tree (the bench
# of each tree drives its server, so both measure with the load generator of their time).  The chat
# row needs Qwen3's tokenizer.json in a directory named by $QWEN3_TOKENIZER (run_all.sh says where to
# get it) and is skipped without it.  Results: benchmarks/results/before-after/*.json, and a table.
# Run it on a quiet machine.
set -euo pipefail
cd "$(dirname "$0")/.."
REV=${1:?usage: before_after.sh REV [PYTHON]}
PY=${2:-python3}
ROUNDS=${ROUNDS:-3}
OUT=benchmarks/results/before-after
HERE=$(pwd)
BEFORE=$(mktemp -d "${TMPDIR:-/tmp}/mtok-before.XXXXXX")
trap 'git -C "$HERE" worktree remove --force "$BEFORE" >/dev/null 2>&1 || rm -rf "$BEFORE"' EXIT
git worktree add --detach "$BEFORE" "$REV" >/dev/null
mkdir -p "$OUT"
RUN=(--duration "${DURATION:-10}" --warmup 2 --quiet)

row() {  # row NAME ARGS...: one load run per tree per round (ONLY=NAME: that row alone)
  local name=$1; shift
  if [ -n "${ONLY:-}" ] && [ "$ONLY" != "$name" ]; then return; fi
  for round in $(seq 1 "$ROUNDS"); do
    for side in before after; do
      local tree=$HERE; [ "$side" = before ] && tree=$BEFORE
      echo "== $name, round $round, $side" >&2
      (cd "$tree" && PYTHONPATH="$tree" "$PY" -m mtok.bench load --python "$PY" "${RUN[@]}" "$@" \
        --json "$HERE/$OUT/$name-$side-$round.json")
    done
  done
}

row generate-2kb-n1 --endpoint generate --input-len 400 --output-len 1 --concurrency 32
row generate-2kb-n2 --workers 2 --endpoint generate --input-len 400 --output-len 1 --concurrency 32
row tokenize-short --endpoint tokenize --input-len 16 --concurrency 32
row stream-256 --endpoint completions --stream --input-len 16 --output-len 256 --concurrency 64
row latency-c1 --endpoint generate --input-len 8 --output-len 1 --concurrency 1 --clients 1
if [ -n "${QWEN3_TOKENIZER:-}" ] && [ -f "$QWEN3_TOKENIZER/tokenizer.json" ]; then
  row chat-tools-n2 --workers 2 --endpoint chat-3turn --stream --concurrency 32 --tokenizer-path "$QWEN3_TOKENIZER" \
    --chat-template tests/chat_templates/qwen3.json --tool-call-parser qwen25 --reasoning-parser qwen3
else
  echo "QWEN3_TOKENIZER is not set: the chat row is skipped" >&2
fi
"$PY" benchmarks/before_after.py "$OUT"
