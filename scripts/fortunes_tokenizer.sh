#!/usr/bin/env bash
# The fortunes SentencePiece tokenizer: 8,000 BPE pieces with byte fallback,
# trained by Debian's `sentencepiece` (spm_train) on Debian's `fortunes`
# corpus, the same text `tessera train` reads for data.dataset: fortunes
# (every regular file of /usr/share/games/fortunes but the .dat and .u8
# ones, in byte order of their names). The identity normalizer and kept
# whitespace make spm_encode, Tessera and llama.cpp tokenize alike.
#   scripts/fortunes_tokenizer.sh [OUTDIR, default $TESSERA_CACHE/fortunes]
# Writes OUTDIR/corpus.txt, OUTDIR/fortunes.model and .vocab, and prints
# their sha256 (training is deterministic: the same Debian packages give the
# same files).
set -euo pipefail
cache=${TESSERA_CACHE:-$HOME/.cache/tessera}
out=${1:-$cache/fortunes}
dir=${TESSERA_FORTUNES_DIR:-/usr/share/games/fortunes}
command -v spm_train >/dev/null || { echo "fortunes_tokenizer: spm_train is needed (apt-get install sentencepiece; scripts/setup.sh --test)" >&2; exit 1; }
mkdir -p "$out"
cd "$out"
find "$dir" -maxdepth 1 -type f ! -name '*.dat' ! -name '*.u8' | LC_ALL=C sort | xargs cat > corpus.txt
# Relative paths: spm_train records its input and prefix in the model.
spm_train --input=corpus.txt --model_prefix=fortunes --vocab_size=8000 --model_type=bpe --byte_fallback=true \
  --normalization_rule_name=identity --remove_extra_whitespaces=false --character_coverage=1.0 \
  --num_threads=2 --minloglevel=2 >/dev/null 2>&1
sha256sum corpus.txt fortunes.model fortunes.vocab
