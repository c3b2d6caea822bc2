#!/usr/bin/env bash
# Peak memory of a sweep against the layers, the sequences and the context,
# on the Llama-3.1-8B shape (32 heads, 8 kv heads, head dim 128, float16, q/k and v), the 6 x 9
# grid of big_trace.sh with output error (the default when v is there). It measures peak RSS
# under /usr/bin/time -v for 1, 2 and 4 layers of TOKENS tokens (one and two threads) and for
# 1 and 2 sequences, then prints the per-item and per-value terms of the formula in
# bench/README.md and what it gives at 32 layers x 32k and 128k tokens.
#   bash bench/memory.sh                 # TOKENS=4096
#   TOKENS=2048 OE=off bash bench/memory.sh
# Environment: KVSIM_BUILD (default build), TOKENS, OE (on/off, default on), REPEAT (default 1).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${KVSIM_BUILD:-$root/build}
repeat=${REPEAT:-1}
n=${TOKENS:-4096}
oe=${OE:-on}
kvsim=$build/kvsim
[[ -x $kvsim ]] || { echo "$kvsim not found: build first" >&2; exit 2; }
[[ -x /usr/bin/time ]] || { echo "/usr/bin/time not found (apt install time)" >&2; exit 2; }
tmp=$(mktemp -d "${TMPDIR:-/tmp}/kvsim-memory.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
source "$root/bench/timing.sh"

grid=(--policies full,scissorhands,h2o,streaming,tova,recent --budgets 10%,20%,30%,40%,50%,60%,70%,80%,90%
  --output-error "$oe")
make_trace() {  # layers seqs
  SOURCE_DATE_EPOCH=1735689600 "$kvsim" synth "$tmp/t-$1-$2.h5" --layers "$1" --heads 32 --kv-heads 8 \
    --head-dim 128 --tokens "$n" --seqs "$2" --form qk --dtype float16 >/dev/null
  echo "$tmp/t-$1-$2.h5"
}
echo "machine: $(lscpu | sed -n 's/^Model name: *//p'), $(nproc) CPUs, $(free -g | awk '/Mem:/ { print $2 }') GiB"
echo "trace: $n tokens, 32 heads (8 kv heads), head dim 128, float16, q/k and v; the 6 x 9 grid, output error $oe"
declare -A peak
for layers in 1 2 4; do
  trace=$(make_trace "$layers" 1)
  for threads in 1 2; do
    run "L$layers-t$threads" "$kvsim" sweep "$trace" "${grid[@]}" --threads "$threads"
    peak[$layers,1,$threads]=$rss
  done
  rm -f "$trace"
done
trace=$(make_trace 1 2)
run "L1-s2-t1" "$kvsim" sweep "$trace" "${grid[@]}" --threads 1
peak[1,2,1]=$rss
rm -f "$trace"

echo
printf '%8s %6s %14s %14s\n' layers seqs "1 thread MiB" "2 threads MiB"
for layers in 1 2 4; do printf '%8s %6s %14s %14s\n' "$layers" 1 "${peak[$layers,1,1]}" "${peak[$layers,1,2]}"; done
printf '%8s %6s %14s %14s\n' 1 2 "${peak[1,2,1]}" -
echo
# The tails: per cell 5% of its values for retention and for output error (4 bytes each, with
# the slack a sixteenth more), plus the layers being replayed; the rest is per work item.
awk -v n="$n" -v one="${peak[1,1,1]}" -v four="${peak[4,1,1]}" -v two_t="${peak[4,1,2]}" 'BEGIN {
  tails_4 = 54 * 2 * 0.05 * 1.0625 * 4 * 32 * n * 4 / 1048576
  printf "growth from 1 to 4 layers, one thread: %d MiB (the tails of 4 layers: %.0f MiB)\n", four - one, tails_4
  printf "a second thread adds a work item: %d MiB at %d tokens\n", two_t - four, n
}'
