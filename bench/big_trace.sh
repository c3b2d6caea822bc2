#!/usr/bin/env bash
# The big target: a synthetic Llama-3.1-8B-shaped trace (32 layers, 32 heads, 8 kv heads,
# head dim 128, 4,096 tokens, 1 sequence, q/k form, float16, no v: ~1.3 GB, written to a
# temporary directory and deleted afterwards). Measures, each with /usr/bin/time -v (wall
# time and peak RSS):
#   floor      bench/kvsim_floor: stream every row once (read q/k, recompute softmax, sum)
#   full       kvsim sweep --policies full --budgets 100% (the engine's own floor: rows + retention)
#   sweep      kvsim sweep: the issue's grid, 6 policies x 9 budgets: the policies of the NumPy
#              reference (full,scissorhands,h2o,streaming,tova,recent) x 10%..90%
#   snapkv     the same grid with snapkv in place of full (the costliest policy: a ring of its last
#              32 observed rows per simulation)
#   oracle     kvsim sweep --policies oracle (a bound, not a policy), 9 budgets
# and prints sweep / floor (and snapkv / floor).
#
#   bash bench/big_trace.sh                  # all 32 layers
#   LAYERS=0,1,2,3 bash bench/big_trace.sh   # the first 4 layers only (synthesised and replayed)
# Environment: KVSIM_BUILD (default build), THREADS (default 0: all cores), LAYERS,
# REPEAT (default 1: runs of each measurement; the median is quoted), SKIP (e.g. "full snapkv oracle").
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${KVSIM_BUILD:-$root/build}
threads=${THREADS:-0}
repeat=${REPEAT:-1}
skip=" ${SKIP:-} "
kvsim=$build/kvsim
floor=$build/bench/kvsim_floor
for exe in "$kvsim" "$floor"; do
  [[ -x $exe ]] || { echo "$exe not found: build first (cmake -S . -B build -G Ninja && cmake --build build)" >&2; exit 2; }
done
[[ -x /usr/bin/time ]] || { echo "/usr/bin/time not found (apt install time)" >&2; exit 2; }

n_layers=32
layer_args=()
if [[ -n ${LAYERS:-} ]]; then
  # Only the chosen layers are replayed; the trace holds layers 0..max of them.
  n_layers=$(( $(tr ',' '\n' <<<"$LAYERS" | sort -n | tail -1) + 1 ))
  layer_args=(--layers "$LAYERS")
fi

tmp=$(mktemp -d "${TMPDIR:-/tmp}/kvsim-big.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
trace=$tmp/llama-3.1-8b-synth.h5

echo "machine: $(lscpu | sed -n 's/^Model name: *//p'), $(nproc) CPUs; threads ${threads} (0: all)"
echo "trace: synthetic Llama-3.1-8B shape, $n_layers layers x 32 heads (8 kv heads), head dim 128, 4096 tokens, float16, qk, no v${LAYERS:+; replaying layers $LAYERS}"

# run LABEL CMD... (bench/timing.sh): sets $wall, $cpu and $rss.
source "$root/bench/timing.sh"

start=$(date +%s)
"$kvsim" synth "$trace" --layers "$n_layers" --heads 32 --kv-heads 8 --head-dim 128 --tokens 4096 --seqs 1 \
  --dtype float16 --no-v --model llama-3.1-8b-synth >/dev/null
echo "synth: $(( $(date +%s) - start )) s, $(du -m "$trace" | cut -f1) MB"
cat "$trace" >/dev/null  # into the page cache, so every measurement reads it from memory
echo

policies=full,scissorhands,h2o,streaming,tova,recent
budgets=10%,20%,30%,40%,50%,60%,70%,80%,90%
run floor "$floor" "$trace" --threads "$threads" "${layer_args[@]}"
floor_wall=$wall floor_cpu=$cpu
if [[ $skip != *" full "* ]]; then
  run full "$kvsim" sweep "$trace" --policies full --budgets 100% --threads "$threads" "${layer_args[@]}"
  full_wall=$wall full_cpu=$cpu
fi
run sweep "$kvsim" sweep "$trace" --policies "$policies" --budgets "$budgets" --threads "$threads" \
  "${layer_args[@]}" --csv "$tmp/sweep.csv"
sweep_wall=$wall sweep_cpu=$cpu sweep_rss=$rss
cp "$tmp/out.txt" "$tmp/sweep-table.txt"
if [[ $skip != *" snapkv "* ]]; then
  run snapkv "$kvsim" sweep "$trace" --policies "${policies/full/snapkv}" --budgets "$budgets" --threads "$threads" "${layer_args[@]}"
  snapkv_wall=$wall snapkv_cpu=$cpu snapkv_rss=$rss
fi
if [[ $skip != *" oracle "* ]]; then
  run oracle "$kvsim" sweep "$trace" --policies oracle --budgets "$budgets" --threads "$threads" "${layer_args[@]}"
fi

echo
awk -v s="$sweep_wall" -v f="$floor_wall" -v sc="$sweep_cpu" -v fc="$floor_cpu" \
  'BEGIN { printf "sweep / floor = %.2fx wall, %.2fx CPU   (target <= 2x)\n", s / f, sc / fc }'
if [[ -n ${full_wall:-} ]]; then
  awk -v s="$sweep_wall" -v f="$full_wall" -v sc="$sweep_cpu" -v fc="$full_cpu" \
    'BEGIN { printf "sweep / full  = %.2fx wall, %.2fx CPU\n", s / f, sc / fc }'
fi
if [[ -n ${snapkv_wall:-} ]]; then
  awk -v s="$snapkv_wall" -v f="$floor_wall" -v sc="$snapkv_cpu" -v fc="$floor_cpu" \
    'BEGIN { printf "snapkv / floor = %.2fx wall, %.2fx CPU   (snapkv in place of full)\n", s / f, sc / fc }'
fi
awk -v r="$sweep_rss" 'BEGIN { printf "sweep peak RSS = %d MiB   (target < 2 GB: 1907 MiB)\n", r }'
[[ -n ${snapkv_rss:-} ]] && awk -v r="$snapkv_rss" 'BEGIN { printf "snapkv peak RSS = %d MiB\n", r }'
echo
sed -n '1,20p' "$tmp/sweep-table.txt"
