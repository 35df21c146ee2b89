#!/usr/bin/env bash
# Checks Tessera's LLM parts against llama.cpp, through npm's node-llama-cpp
# (pinned; installed once into $TESSERA_CACHE/node-llama-cpp, default
# ~/.cache/tessera; works offline afterwards). Not part of CI: it needs npm.
#   scripts/llm_compat.sh [build dir, default build]
#   scripts/llm_compat.sh --install-only     (what bench/llm_compare.py needs)
# Today: every vocabulary GGUF of llama.cpp's source tree (which the package
# carries as a git bundle) loads with `tessera gguf info`, and each
# SentencePiece vocabulary tokenizes llama.cpp's test texts to llama.cpp's ids
# (Tokenizer.LlamaCppVectors), and so does each byte-level BPE one Tessera has
# a pre-tokenizer for; nine vocabularies give llama.cpp's ids, with and without
# special tokens parsed, and its decoded text on 10,000 random strings
# (Tokenizer.MatchesLlamaCppOnRandomStrings); the chat templates of Llama 3.1,
# Mistral Nemo, Qwen 2.5, Gemma 2 and Phi-3.5 render byte for byte as
# @huggingface/jinja renders them on a suite of conversations (system,
# multi-turn, tools, tool results), and every other template in llama.cpp's
# tree is surveyed the same way (ChatTemplate.MatchesHuggingFaceJinja); Tessera's Llama written as GGUF (F32, F16,
# Q8_0, Q4_0; grouped-query attention) loads in llama.cpp and gives the
# log-probs Tessera gives on the same file, through the Llama module and
# through the LLM engine (a random Q4_K/Q6_K file, and Q4_K, Q6_K and Q4_K_M files Tessera quantized, too; and,
# engine only, with linear and YaRN RoPE scaling
# and per-pair RoPE frequency factors) (mean KL per position within the bounds of issue 21,
# the same top token everywhere); and the fortunes models Tessera trained
# (scripts/fortunes_models.sh) give llama.cpp's held-out perplexity within
# 0.5% and its greedy tokens (F32, F16, Q8_0: llama.cpp's top token at every
# step of Tessera's greedy path where its top two differ by 1e-3 or more) on
# their GGUF files in every type; a LoRA adapter `tessera train` makes
# (examples/configs/fortunes_lora.yaml) loads in llama.cpp and gives Tessera's
# greedy text; and the real Llama 3.1, Mistral Nemo and Qwen 2.5 templates are
# read as their tool-call formats (ToolCalls.RealTemplatesFamilies).
set -euo pipefail
cd "$(dirname "$0")/.."
install_only=false
if [ "${1:-}" = "--install-only" ]; then install_only=true; shift; fi
build=${1:-${BUILD_DIR:-build}}
cache=${TESSERA_CACHE:-$HOME/.cache/tessera}
pkg="$cache/node-llama-cpp"
version=3.21.1
if [ ! -f "$pkg/node_modules/node-llama-cpp/package.json" ] ||
   ! grep -q "\"version\": \"$version\"" "$pkg/node_modules/node-llama-cpp/package.json"; then
  command -v npm >/dev/null || { echo "llm_compat: npm is needed (apt-get install npm)" >&2; exit 1; }
  mkdir -p "$pkg"
  (cd "$pkg" && npm i -E --omit=optional --ignore-scripts --no-audit --no-fund \
     "node-llama-cpp@$version" "@node-llama-cpp/linux-x64@$version" >/dev/null)
fi
src="$cache/llama.cpp-$version"
if [ ! -d "$src/models" ]; then
  rm -rf "$src"
  git clone -q "$pkg/node_modules/node-llama-cpp/llama/gitRelease.bundle" "$src" 2>/dev/null
fi
$install_only && exit 0
# Always brought up to date: a binary older than the library it links can crash.
cmake --build "$build" --target tessera_cli tessera_tests tessera_llm_bench >/dev/null

echo "== GGUF: llama.cpp's vocabulary files"
n=0
for f in "$src"/models/ggml-vocab-*.gguf; do
  "$build/apps/tessera" gguf info "$f" >/dev/null || { echo "llm_compat: $f does not load" >&2; exit 1; }
  n=$((n + 1))
done
echo "$n files load"

echo "== tokenizers: llama.cpp's test vectors"
TESSERA_LLAMA_CPP_VOCABS="$src/models" "$build/tests/tessera_tests" --gtest_filter='Tokenizer.LlamaCppVectors' \
  --gtest_brief=1 | grep -E "texts tokenize|PASSED|FAILED"

echo "== tokenizers: 10,000 random strings against node-llama-cpp"
cp scripts/llm_compat_tokenize.mjs "$pkg/"
vocabs=()
for v in llama-spm phi-3 gpt-2 llama-bpe qwen2 command-r starcoder refact mpt; do vocabs+=("$src/models/ggml-vocab-$v.gguf"); done
mkdir -p "$cache/llm_compat_tokens"
cases="$cache/llm_compat_tokens/cases.json"
(cd "$pkg" && node llm_compat_tokenize.mjs 10000 21 "$cases" "${vocabs[@]}" 2>/dev/null)
TESSERA_TOKENIZE_CASES="$cases" "$build/tests/tessera_tests" --gtest_filter='Tokenizer.MatchesLlamaCppOnRandomStrings' \
  --gtest_brief=1 | grep -E "ids [0-9]|PASSED|FAILED"

echo "== chat templates: @huggingface/jinja on five models' templates, then a survey of every template in llama.cpp's tree"
cp scripts/llm_compat_chat.mjs "$pkg/"
t="$src/models/templates"
(cd "$pkg" && node llm_compat_chat.mjs "$cache/llm_compat_tokens/chat.json" \
   "llama-3.1=$t/meta-llama-Llama-3.1-8B-Instruct.jinja" "mistral-nemo=$t/mistralai-Mistral-Nemo-Instruct-2407.jinja" \
   "qwen-2.5=$t/Qwen-Qwen2.5-7B-Instruct.jinja" "gemma-2=$t/google-gemma-2-2b-it.jinja" \
   "phi-3.5=$t/microsoft-Phi-3.5-mini-instruct.jinja" >/dev/null)
TESSERA_CHAT_CASES="$cache/llm_compat_tokens/chat.json" "$build/tests/tessera_tests" \
  --gtest_filter='ChatTemplate.MatchesHuggingFaceJinja:ToolCalls.RealTemplatesFamilies' --gtest_brief=1 | grep -E "renders match|PASSED|FAILED"
all=()
for f in "$t"/*.jinja; do all+=("$(basename "$f" .jinja)=$f"); done
(cd "$pkg" && node llm_compat_chat.mjs "$cache/llm_compat_tokens/chat_all.json" "${all[@]}" >/dev/null)
TESSERA_CHAT_REPORT_ONLY=1 TESSERA_CHAT_CASES="$cache/llm_compat_tokens/chat_all.json" "$build/tests/tessera_tests" \
  --gtest_filter='ChatTemplate.MatchesHuggingFaceJinja' --gtest_brief=1 | grep -E "renders match"

echo "== logits: Tessera's Llama GGUF files in llama.cpp, and perplexity as llama-perplexity computes it"
out="$cache/llm_compat"
rm -rf "$out" && mkdir -p "$out"
cp scripts/llm_compat_eval.mjs "$pkg/"
status=0
TESSERA_NODE_LLAMA_CPP="$pkg" TESSERA_LLM_COMPAT_DIR="$out" "$build/tests/tessera_tests" \
  --gtest_filter='LlamaGguf.WritesModelsForLlamaCpp:Perplexity.MatchesLlamaCpp' --gtest_brief=1 |
  grep -E "mean KL|perplexity|PASSED|FAILED" || status=1

echo "== fortunes models: held-out perplexity and greedy tokens, Tessera and llama.cpp on the same GGUF files"
# The 2M model is trained here if it is not cached (about 3.5 minutes); the
# 15M and 20M ones are compared when scripts/fortunes_models.sh has made them.
scripts/fortunes_models.sh 2m --build "$build" >/dev/null
cp scripts/llm_compat_fortunes.mjs "$pkg/"
fdir="$cache/fortunes"
for size in 2m 15m 20m; do
  for type in F32 F16 Q8_0 Q4_0; do
    model="$fdir/models/fortunes-$size-$type.gguf"
    [ -f "$model" ] || continue
    base="$out/fortunes-$size-$type"
    "$build/bench/tessera_llm_bench" eval --model "$model" --config "examples/configs/fortunes_llama_$size.yaml" \
      --tokenizer "$fdir/fortunes.model" --windows 16 --greedy 64 --out "$base.tessera.json" >/dev/null
    (cd "$pkg" && node llm_compat_fortunes.mjs "$model" "$base.tessera.json" "$base.llama.json")
    python3 - "$base" "$size" "$type" <<'PY' || status=1
import json, sys
base, size, kind = sys.argv[1:4]
mine, ref = json.load(open(base + ".tessera.json")), json.load(open(base + ".llama.json"))
rel = mine["perplexity"] / ref["perplexity"] - 1
# Greedy tokens, free-running: how long the two paths stay the same. Then the
# issue's rule, position by position along Tessera's path (teacher-forced):
# llama.cpp's top token is Tessera's wherever llama.cpp's top two are 1e-3 or
# more apart (under that, a tie either engine may break its way).
same = next((i for i, (a, b) in enumerate(zip(mine["greedy"], ref["greedy"])) if a != b), len(ref["greedy"]))
clear = [(i, t, m) for i, (t, m) in enumerate(ref["forced"]) if m >= 1e-3]
differ = [(i, t, m) for i, t, m in clear if t != mine["greedy"][i]]
greedy_ok = kind == "Q4_0" or not differ
print(f"{size} {kind}: perplexity {mine['perplexity']:.4f} vs llama.cpp {ref['perplexity']:.4f} ({rel * 100:+.4f}%, "
      f"bound 0.5%); greedy tokens the same for {same} of {len(ref['greedy'])}; along Tessera's path, llama.cpp's "
      f"top token at {len(clear) - len(differ)} of the {len(clear)} positions whose top two differ by 1e-3 or more"
      + ("" if kind != "Q4_0" else " (reported only for Q4_0)"))
for i, (t, m) in enumerate(ref["forced"]):
    if t != mine["greedy"][i]:
        # Up to the first difference both paths are one context, which llama.cpp
        # also decoded token by token: its margin there too (its batched and
        # token-by-token evaluations round differently).
        alone = f" (decoding token by token, {ref['greedy'][i]} by {ref['margins'][i]:.5f})" if i <= same else ""
        print(f"  position {i}{'' if m >= 1e-3 else ' (skipped)'}: llama.cpp's top token {t} leads by {m:.5f}{alone}; "
              f"Tessera's {mine['greedy'][i]} by {mine['margins'][i]:.5f}")
sys.exit(0 if abs(rel) <= 0.005 and greedy_ok else 1)
PY
  done
done

echo "== embeddings: tessera serve-llm's /v1/embeddings against node-llama-cpp's embedding context"
# The 2M fortunes model in F32 and Q8_0, last-token pooling (llama.cpp's for a
# llama GGUF without pooling_type); 8 texts sent to both as the same ids.
cp scripts/llm_compat_embed.mjs "$pkg/"
for type in F32 Q8_0; do
  model="$fdir/models/fortunes-2m-$type.gguf"
  python3 - "$build/apps/tessera" "$model" "$pkg" "$out" <<'PY' || status=1
import json, math, socket, subprocess, sys, time, urllib.request
cli, model, pkg, out = sys.argv[1:5]
with socket.socket() as s:
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
server = subprocess.Popen([cli, "serve-llm", model, "--port", str(port), "--pooling", "last", "--threads", "2"],
                          stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT)
def post(path, body):
    req = urllib.request.Request(f"http://127.0.0.1:{port}{path}", json.dumps(body).encode(),
                                 {"Content-Type": "application/json"})
    return json.loads(urllib.request.urlopen(req, timeout=60).read())
try:
    for _ in range(200):
        try:
            urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=1)
            break
        except OSError:
            time.sleep(0.05)
    texts = ["A fortune cookie.", "You will meet a tall dark stranger.", "Q: What is the meaning of life?",
             "Never trust a computer you cannot throw out a window.", "Hello", "The best things in life are free.",
             "He who laughs last laughs longest.", "Today is a good day for a walk in the park, said the owl."]
    ids = [post("/tokenize", {"prompt": t})["tokens"] for t in texts]
    mine = [d["embedding"] for d in post("/v1/embeddings", {"input": ids})["data"]]
finally:
    server.terminate()
    server.wait()
json.dump(ids, open(f"{out}/embed-ids.json", "w"))
ref = json.loads(subprocess.run(["node", "llm_compat_embed.mjs", model, f"{out}/embed-ids.json"], cwd=pkg,
                                check=True, capture_output=True, text=True).stdout)
cos = []
for a, b in zip(mine, ref):
    dot = sum(x * y for x, y in zip(a, b))
    cos.append(dot / math.sqrt(sum(x * x for x in a) * sum(y * y for y in b)))
print(f"{model.split('/')[-1]}: cosine to llama.cpp's embedding, lowest {min(cos):.6f} of {len(cos)} (bound 0.9999)")
sys.exit(0 if min(cos) >= 0.9999 else 1)
PY
done

echo "== LoRA: Tessera's GGUF adapter in llama.cpp"
# examples/configs/fortunes_lora.yaml (about 25 s): the 2M fortunes model
# tuned on LICENSE; llama.cpp loads the base file and the adapter, and its
# greedy continuation must be Tessera's (the text after the prompt, its
# leading spaces aside: the two detokenize a first "▁" differently).
"$build/apps/tessera" train examples/configs/fortunes_lora.yaml --output "$out/lora" \
  --set lora.base="$fdir/models/fortunes-2m-F32.gguf" --set data.tokenizer="$fdir/models/fortunes-2m-F32.gguf" \
  >/dev/null
cp scripts/llm_compat_lora.mjs "$pkg/"
lprompt="Licensed under the"
mine=$("$build/apps/tessera" generate "$fdir/models/fortunes-2m-F32.gguf" --lora "$out/lora/adapter.gguf" \
  -p "$lprompt" -n 40 --temp 0 2>/dev/null)
(cd "$pkg" && node llm_compat_lora.mjs "$fdir/models/fortunes-2m-F32.gguf" "$out/lora/adapter.gguf" "$lprompt" 40 \
  "$out/lora.llama.json" >/dev/null)
python3 - "$mine" "$lprompt" "$out/lora.llama.json" <<'PY' || status=1
import json, sys
mine, prompt, ref = sys.argv[1], sys.argv[2], json.load(open(sys.argv[3]))
mine = mine[len(prompt):].rstrip("\n")
same = mine.strip() == ref["text"].strip()
print(f"LoRA adapter: Tessera {json.dumps(mine.strip())}, llama.cpp {json.dumps(ref['text'].strip())}: "
      f"{'the same' if same else 'different'} (llama.cpp's smallest top-two margin {min(ref['margins']):.4f})")
sys.exit(0 if same else 1)
PY

exit $status
