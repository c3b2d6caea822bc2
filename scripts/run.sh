#!/usr/bin/env bash
# Sets up, builds and runs kvsim's main job on the bundled real traces: Scissorhands against
# H2O, StreamingLLM, TOVA, a recency window and the oracle bound at budgets 10%..90%.
# Prints the retention-vs-budget table; writes out/sweep.csv, out/sweep.json, out/sweep.png.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
"$root/scripts/setup.sh"
"$root/scripts/build.sh"
kvsim="${KVSIM_BUILD_DIR:-$root/build}/kvsim"
out="$root/out"
mkdir -p "$out"
"$kvsim" sweep "$root/data/traces/stories15M-8x256.h5" \
  --policies scissorhands,h2o,streaming,tova,recent,oracle \
  --budgets 10%,20%,30%,40%,50%,60%,70%,80%,90% \
  --csv "$out/sweep.csv" --json "$out/sweep.json" --plot "$out/sweep.png"
echo "wrote $out/sweep.csv, $out/sweep.json and $out/sweep.png"
