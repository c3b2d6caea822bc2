#!/usr/bin/env bash
# Two builds of kvsim side by side on the path users take: one layer of the Llama-3.1-8B shape
# (32 heads, 8 kv heads, head dim 128, float16, q/k and v) at TOKENS tokens (default 4096),
# the 6 x 9 grid of big_trace.sh, one thread. ROUNDS rounds (default 3), each running OLD then
# NEW: the floor (kvsim_floor), the sweep with --output-error off, the sweep with output error;
# then peak RSS of the sweep with output error on 1, 2 and 4 layers, one thread. Prints the
# median CPU seconds of each, the ratios the targets name (sweep / floor, output error /
# sweep) and the peak RSS by layers.
#
#   bash bench/side_by_side.sh OLD_BUILD NEW_BUILD
# Environment: TOKENS, ROUNDS.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
(( $# == 2 )) || { echo "usage: bench/side_by_side.sh OLD_BUILD NEW_BUILD" >&2; exit 2; }
builds=("$1" "$2")
names=(old new)
n=${TOKENS:-4096}
rounds=${ROUNDS:-3}
for b in "${builds[@]}"; do
  for exe in "$b/kvsim" "$b/bench/kvsim_floor"; do
    [[ -x $exe ]] || { echo "$exe not found: build first" >&2; exit 2; }
  done
done
[[ -x /usr/bin/time ]] || { echo "/usr/bin/time not found (apt install time)" >&2; exit 2; }
tmp=$(mktemp -d "${TMPDIR:-/tmp}/kvsim-side.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
repeat=1
source "$root/bench/timing.sh"

grid=(--policies full,scissorhands,h2o,streaming,tova,recent --budgets 10%,20%,30%,40%,50%,60%,70%,80%,90% --threads 1)
make_trace() {  # layers: written by the old build, so both read the same file
  SOURCE_DATE_EPOCH=1735689600 "${builds[0]}/kvsim" synth "$tmp/t-$1.h5" --layers "$1" --heads 32 --kv-heads 8 \
    --head-dim 128 --tokens "$n" --seqs 1 --form qk --dtype float16 >/dev/null
  echo "$tmp/t-$1.h5"
}
echo "machine: $(lscpu | sed -n 's/^Model name: *//p'), $(nproc) CPUs; load average $(cut -d' ' -f1-3 /proc/loadavg)"
echo "trace: one layer, $n tokens, 32 heads (8 kv heads), head dim 128, float16, q/k and v; the 6 x 9 grid, one thread"
declare -A cpu_of
trace=$(make_trace 1)
for ((round = 1; round <= rounds; ++round)); do
  for k in 0 1; do  # run() uses i
    b=${builds[$k]} name=${names[$k]}
    run "$name-floor" "$b/bench/kvsim_floor" "$trace" --threads 1
    cpu_of[$name,floor]+="$cpu "
    run "$name-no-oe" "$b/kvsim" sweep "$trace" "${grid[@]}" --output-error off
    cpu_of[$name,sweep]+="$cpu "
    run "$name-oe" "$b/kvsim" sweep "$trace" "${grid[@]}"
    cpu_of[$name,oe]+="$cpu "
  done
done
declare -A rss_of
for layers in 1 2 4; do
  trace=$(make_trace "$layers")
  for k in 0 1; do
    name=${names[$k]}
    run "$name-L$layers" "${builds[$k]}/kvsim" sweep "$trace" "${grid[@]}"
    rss_of[$name,$layers]=$rss
  done
  rm -f "$trace"
done

echo
printf '%6s %10s %12s %14s %12s %10s %22s\n' build "floor s" "sweep s" "with-oe s" "sweep/floor" "oe/sweep" "RSS MiB 1/2/4 layers"
for name in "${names[@]}"; do
  f=$(tr ' ' '\n' <<<"${cpu_of[$name,floor]}" | grep . | median)
  s=$(tr ' ' '\n' <<<"${cpu_of[$name,sweep]}" | grep . | median)
  e=$(tr ' ' '\n' <<<"${cpu_of[$name,oe]}" | grep . | median)
  awk -v name="$name" -v f="$f" -v s="$s" -v e="$e" \
      -v rss="${rss_of[$name,1]}/${rss_of[$name,2]}/${rss_of[$name,4]}" 'BEGIN {
    printf "%6s %10.2f %12.2f %14.2f %11.2fx %9.2fx %22s\n", name, f, s, e, s / f, e / s, rss }'
done
