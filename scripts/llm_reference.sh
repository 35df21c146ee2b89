#!/usr/bin/env bash
# The references the LLM compatibility tests check against, made once into
# $TESSERA_CACHE (default ~/.cache/tessera) and reused offline afterwards:
#   - npm's node-llama-cpp, pinned (scripts/llm_compat.sh --install-only), and
#     llama.cpp's source tree from the git bundle it ships: its vocabulary
#     GGUF files with their test vectors (Tokenizer.LlamaCppVectors) and its
#     chat templates;
#   - 10,000 random strings tokenized by llama.cpp in nine vocabularies
#     (Tokenizer.MatchesLlamaCppOnRandomStrings);
#   - the chat templates of Llama 3.1, Mistral Nemo, Qwen 2.5, Gemma 2 and
#     Phi-3.5 rendered by @huggingface/jinja on a suite of conversations
#     (ChatTemplate.MatchesHuggingFaceJinja, ToolCalls.RealTemplatesFamilies);
#   - node-llama-cpp itself, which LlamaGguf.WritesModelsForLlamaCpp runs for
#     llama.cpp's log-probs on the files it writes.
# Prints the environment those tests read, as export lines:
#   eval "$(scripts/llm_reference.sh)"
# scripts/test.sh does this before the tests, so CI checks them all: under CI
# a test whose reference is missing fails, unless this script said why it
# could not make it (TESSERA_REFERENCES_INCOMPLETE: npm unreachable, or a
# Node.js older than node-llama-cpp's 20); elsewhere the test skips. Needs
# node and npm (scripts/setup.sh --test). About 40 s the first time.
set -uo pipefail
cd "$(dirname "$0")/.."
cache=${TESSERA_CACHE:-$HOME/.cache/tessera}
version=3.21.1
pkg="$cache/node-llama-cpp"
src="$cache/llama.cpp-$version"
missing=()  # what could not be made, and why
if ! scripts/llm_compat.sh --install-only >&2; then
  echo "echo 'llm_reference: npm could not install node-llama-cpp $version: no LLM reference'" 
  echo "export TESSERA_REFERENCES_INCOMPLETE='npm could not install node-llama-cpp $version'"
  exit 0
fi
echo "export TESSERA_LLAMA_CPP_VOCABS='$src/models'"
# node-llama-cpp 3.21 runs on Node.js 20 or later (Debian 12's is 18).
node_major=$(node -p 'process.versions.node.split(".")[0]' 2>/dev/null || echo 0)
if [ "$node_major" -lt 20 ]; then
  why="node-llama-cpp $version needs Node.js 20 or later; this machine has $(node --version 2>/dev/null || echo none)"
  echo "echo 'llm_reference: $why: the tokenizer, template and logit references are not made'"
  echo "export TESSERA_REFERENCES_INCOMPLETE='$why'"
  exit 0
fi
cp scripts/llm_compat_tokenize.mjs scripts/llm_compat_chat.mjs scripts/llm_compat_eval.mjs "$pkg/"
refs="$cache/llm_reference-$version"
mkdir -p "$refs"
# Each reference is written under a temporary name and renamed when whole,
# and made again when the script that makes it changes.
stamp() { sha256sum "$1" | cut -c1-16; }
tokens="$refs/tokens-$(stamp scripts/llm_compat_tokenize.mjs).json"
if [ ! -s "$tokens" ]; then
  vocabs=()
  for v in llama-spm phi-3 gpt-2 llama-bpe qwen2 command-r starcoder refact mpt; do
    vocabs+=("$src/models/ggml-vocab-$v.gguf")
  done
  (cd "$pkg" && node llm_compat_tokenize.mjs 10000 21 "$tokens.tmp" "${vocabs[@]}" >/dev/null 2>&1) &&
    mv "$tokens.tmp" "$tokens" || missing+=("the random-string tokenizations failed")
fi
[ -s "$tokens" ] && echo "export TESSERA_TOKENIZE_CASES='$tokens'"
chat="$refs/chat-$(stamp scripts/llm_compat_chat.mjs).json"
if [ ! -s "$chat" ]; then
  t="$src/models/templates"
  (cd "$pkg" && node llm_compat_chat.mjs "$chat.tmp" \
     "llama-3.1=$t/meta-llama-Llama-3.1-8B-Instruct.jinja" "mistral-nemo=$t/mistralai-Mistral-Nemo-Instruct-2407.jinja" \
     "qwen-2.5=$t/Qwen-Qwen2.5-7B-Instruct.jinja" "gemma-2=$t/google-gemma-2-2b-it.jinja" \
     "phi-3.5=$t/microsoft-Phi-3.5-mini-instruct.jinja" >/dev/null) &&
    mv "$chat.tmp" "$chat" || missing+=("the chat-template renders failed")
fi
[ -s "$chat" ] && echo "export TESSERA_CHAT_CASES='$chat'"
echo "export TESSERA_NODE_LLAMA_CPP='$pkg'"
if [ ${#missing[@]} -gt 0 ]; then
  echo "export TESSERA_REFERENCES_INCOMPLETE='${missing[*]}'"
fi
exit 0
