#!/usr/bin/env bash
# The fortunes models: Llamas of ~2M, ~15M and ~20M parameters trained by
# Tessera on Debian's fortunes in subword tokens (scripts/fortunes_tokenizer.sh),
# each exported as GGUF in F32, F16, Q8_0 and Q4_0 for the perplexity, greedy-
# token and speed comparisons with llama.cpp (scripts/llm_compat.sh,
# bench/llm_compare.py). Cached under $TESSERA_CACHE/fortunes (default
# ~/.cache/tessera): a run already trained to its steps is not trained again.
#   scripts/fortunes_models.sh [sizes, default: 2m 15m 20m] [--build DIR]
# The recipes are examples/configs/fortunes_llama_<size>.yaml (seed 1 each);
# MANIFEST.txt records each run's config, steps, held-out perplexity and the
# sha256 of the tokenizer and every GGUF file. On 2 cores: the 2M model takes
# about 3.5 minutes, the 15M 22 (AMD Zen 5) to 43 (Intel Xeon) minutes, the 20M
# about half as long again. A run stopped part way resumes from its last
# checkpoint (every 200 steps), so the script can be run a piece at a time.
set -euo pipefail
cd "$(dirname "$0")/.."
build=${BUILD_DIR:-build}
sizes=()
while [ $# -gt 0 ]; do
  case "$1" in
    --build) build=$2; shift 2 ;;
    *) sizes+=("$1"); shift ;;
  esac
done
[ ${#sizes[@]} -eq 0 ] && sizes=(2m 15m 20m)
cache=${TESSERA_CACHE:-$HOME/.cache/tessera}
out="$cache/fortunes"
tessera="$build/apps/tessera"
[ -x "$tessera" ] || cmake --build "$build" --target tessera_cli
scripts/fortunes_tokenizer.sh "$out" >/dev/null
mkdir -p "$out/runs" "$out/models"
for size in "${sizes[@]}"; do
  cfg="examples/configs/fortunes_llama_$size.yaml"
  [ -f "$cfg" ] || { echo "fortunes_models: no $cfg" >&2; exit 1; }
  run="$out/runs/$size"
  steps=$(grep -E '^  steps:' "$cfg" | awk '{print $2}')
  if [ -f "$run/checkpoints/step-$(printf '%09d' "$steps")/state.json" ]; then
    echo "== $size: trained ($run)"
  elif [ -d "$run/checkpoints" ]; then
    echo "== $size: resuming $run"
    "$tessera" train "$cfg" --output "$run" --set data.tokenizer="$out/fortunes.model" --resume latest --plain
  else
    echo "== $size: training into $run"
    "$tessera" train "$cfg" --output "$run" --set data.tokenizer="$out/fortunes.model" --plain
  fi
  for type in F32 F16 Q8_0 Q4_0; do
    "$tessera" export "$run" --format gguf --gguf-type "$type" --output "$out/models/fortunes-$size-$type.gguf"
  done
done
# The manifest covers every model in the cache, not only those made now.
{
  echo "# fortunes models ($(date -u +%Y-%m-%d), $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs))"
  (cd "$out" && sha256sum fortunes.model)
  for size in 2m 15m 20m; do
    # A size counts once its files are written (another run may be training it).
    [ -f "$out/models/fortunes-$size-Q4_0.gguf" ] || continue
    echo "## $size: examples/configs/fortunes_llama_$size.yaml (sha256 $(sha256sum "examples/configs/fortunes_llama_$size.yaml" | cut -c1-64)), seed 1"
    "$tessera" info "$out/runs/$size" 2>/dev/null | grep -E "parameters|step|perplexity" | sed 's/^/  /' || true
    (cd "$out/models" && sha256sum fortunes-"$size"-*.gguf)
  done
} > "$out/MANIFEST.txt"
cat "$out/MANIFEST.txt"
