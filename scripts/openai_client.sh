#!/usr/bin/env bash
# `tessera serve-llm` through npm's official `openai` client (pinned;
# installed once into $TESSERA_CACHE/openai-client, default ~/.cache/tessera;
# works offline afterwards). Not part of CI: it needs npm. Serves the 2M
# fortunes model (scripts/fortunes_models.sh makes it, about 3.5 minutes the
# first time) and runs scripts/openai_client.mjs against it: every route, stream
# and non-stream giving the same text, n and logprobs, the errors the client
# raises, a stream the client aborts (its request ends on the server), and
# structured output: the 31 schemas of scripts/json_schemas.json as
# response_format, each answer that stops validated by npm's ajv (pinned);
# then, served with scripts/chat_tools.jinja, tool calling
# (scripts/openai_client_tools.mjs): forced calls stream and not, the client's
# stream accumulator and runTools loop.
#   scripts/openai_client.sh [--build DIR] [--model FILE.gguf]
set -euo pipefail
cd "$(dirname "$0")/.."
build=${BUILD_DIR:-build}
model=""
while [ $# -gt 0 ]; do
  case "$1" in
    --build) build=$2; shift 2 ;;
    --model) model=$2; shift 2 ;;
    *) echo "openai_client: unknown argument $1" >&2; exit 2 ;;
  esac
done
cache=${TESSERA_CACHE:-$HOME/.cache/tessera}
pkg="$cache/openai-client"
version=7.60.0
ajv=8.17.1  # validates the structured outputs against their schemas
if [ ! -f "$pkg/node_modules/openai/package.json" ] ||
   ! grep -q "\"version\": \"$version\"" "$pkg/node_modules/openai/package.json" ||
   ! grep -q "\"version\": \"$ajv\"" "$pkg/node_modules/ajv/package.json" 2>/dev/null; then
  command -v npm >/dev/null || { echo "openai_client: npm is needed (apt-get install npm)" >&2; exit 1; }
  mkdir -p "$pkg"
  (cd "$pkg" && npm i -E --ignore-scripts --no-audit --no-fund "openai@$version" "ajv@$ajv" >/dev/null)
fi
cmake --build "$build" --target tessera_cli >/dev/null
if [ -z "$model" ]; then
  scripts/fortunes_models.sh 2m --build "$build" >/dev/null
  model="$cache/fortunes/models/fortunes-2m-Q8_0.gguf"
fi
work=$(mktemp -d)
trap 'kill "$server" 2>/dev/null || true; rm -rf "$work"' EXIT
head -c 24 /dev/urandom | od -An -tx1 | tr -d ' \n' > "$work/key"
# Serves MODEL with the given flags, runs the client script against it, and
# stops it with SIGTERM, checking that it stopped cleanly.
run_against_server() {
  local script=$1
  shift
  "$build/apps/tessera" serve-llm "$model" --name fortunes --port 0 --api-key-file "$work/key" --threads 2 "$@" \
    > "$work/log" 2>&1 &
  server=$!
  for _ in $(seq 100); do grep -q "KV cache:" "$work/log" && break; sleep 0.1; done
  port=$(sed -n 's|.*listening on http://127.0.0.1:\([0-9]*\)/v1.*|\1|p' "$work/log")
  [ -n "$port" ] || { cat "$work/log" >&2; exit 1; }
  OPENAI_CLIENT_DIR="$pkg" node "$script" "http://127.0.0.1:$port" "$(cat "$work/key")"
  kill -TERM "$server"
  wait "$server"
  grep -q "^stopped" "$work/log" || { cat "$work/log" >&2; exit 1; }
}
run_against_server scripts/openai_client.mjs --max-seqs 8 --max-batched-tokens 256
echo "openai_client: the server stopped cleanly"
# Tool calling: the same model with a chat template that shows tools.
run_against_server scripts/openai_client_tools.mjs --chat-template scripts/chat_tools.jinja
