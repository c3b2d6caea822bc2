#!/usr/bin/env bash
# Sets up, builds and runs kvsim's main job on bundled data; outputs go to out/.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
"$root/scripts/setup.sh"
"$root/scripts/build.sh"
kvsim="${KVSIM_BUILD_DIR:-$root/build}/kvsim"
out="$root/out"
mkdir -p "$out"
"$kvsim" synth "$out/synthetic.h5" --layers 4 --heads 8 --kv-heads 2 --head-dim 64 --tokens 512 --seqs 4
"$kvsim" info "$out/synthetic.h5"
