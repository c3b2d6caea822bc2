#!/usr/bin/env bash
# Makes the bundled real traces, data/traces/stories15M-8x256.h5, byte for byte:
# stories15M (llama2.c) on the CPU, greedy decoding, one sequence per line of
# data/traces/prompts.txt, each continued to the full 256-token context (a story the model
# ends is followed by a new one: --continue-after-eos), q/k/v float16, gzip 4 + shuffle.
# SOURCE_DATE_EPOCH pins the `created` attribute, so the same kvsim and HDF5 give the same
# bytes (the sha256 is in data/README.md).
# Usage: scripts/make-traces.sh [OUT.h5]   (default: data/traces/stories15M-8x256.h5)
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
out=${1:-$root/data/traces/stories15M-8x256.h5}
kvsim="${KVSIM_BUILD_DIR:-$root/build}/kvsim"
[[ -x $kvsim ]] || "$root/scripts/build.sh"
models=$("$root/scripts/fetch-model.sh" --print-dir)

SOURCE_DATE_EPOCH=1735689600 "$kvsim" capture \
  --model "$models/stories15M.bin" --tokenizer "$models/tokenizer.bin" \
  --prompts "$root/data/traces/prompts.txt" --tokens 256 --continue-after-eos \
  --dtype float16 --compress 4 --out "$out"
sha256sum "$out"
