#!/usr/bin/env bash
# kvsim-gui at Llama scale: kvsim_gui_latency on one layer of the
# Llama-3.1-8B shape (32 heads, 8 kv heads, head dim 128, float16, q/k and v) at 4,096 tokens,
# in the real window off screen: each policy's re-simulation, the views after a policy change,
# a budget-slider step and a jump (medians of REPEAT, default 3).
#   bash bench/gui.sh
#   POLICIES=h2o,tova TOKENS=2048 bash bench/gui.sh
# Environment: KVSIM_BUILD (default build), TOKENS, REPEAT, POLICIES (default: those of
# bench/README.md's table; every registered policy, POLICIES=all, had not finished after 18 minutes).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${KVSIM_BUILD:-$root/build}
latency=$build/bench/kvsim_gui_latency
[[ -x $build/kvsim ]] || { echo "$build/kvsim not found: build first" >&2; exit 2; }
[[ -x $latency ]] || { echo "$latency not found: build it (needs Qt: qt6-base-dev)" >&2; exit 2; }
tmp=$(mktemp -d "${TMPDIR:-/tmp}/kvsim-gui.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
trace=$tmp/gui-${TOKENS:-4096}.h5
SOURCE_DATE_EPOCH=1735689600 "$build/kvsim" synth "$trace" --layers 1 --heads 32 --kv-heads 8 --head-dim 128 \
  --tokens "${TOKENS:-4096}" --seqs 1 --form qk --dtype float16 >/dev/null
echo "machine: $(lscpu | sed -n 's/^Model name: *//p'), $(nproc) CPUs"
echo "trace: one layer, 32 heads (8 kv heads), head dim 128, ${TOKENS:-4096} tokens; kvsim-gui off screen"
policies=(--policies "${POLICIES:-scissorhands,scissorhands-official,scissorhands-xlayer,h2o,streaming,tova,snapkv,recent,random,oracle,lookahead}")
[[ ${POLICIES:-} == all ]] && policies=()
QT_QPA_PLATFORM=offscreen "$latency" "$trace" --repeat "${REPEAT:-3}" "${policies[@]}" 2>&1 |
  grep -vE '^(QStandardPaths|This plugin does not support)'
