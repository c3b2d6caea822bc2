#!/usr/bin/env bash
# How a sweep's cost grows with the context, on the path users take: one layer of the
# Llama-3.1-8B shape (32 heads, 8 kv heads, head dim 128, float16, q/k AND v, as every dumped
# trace has v), the 6 x 9 grid of big_trace.sh, one thread. For each length (default 1024
# 2048 4096 8192 16384 tokens) it measures under /usr/bin/time -v the floor (kvsim_floor), the
# sweep with --output-error off, and the sweep with output error (the default when v is
# there) up to OE_MAX tokens (default 4096; it costs ~10x the sweep without it); then the
# exponent of each between successive lengths (rows are O(n^2 d): 2 means quadratic).
#
#   bash bench/scaling.sh
#   TOKENS="1024 2048 4096" OE_MAX=2048 bash bench/scaling.sh
# Environment: KVSIM_BUILD (default build), TOKENS, OE_MAX, REPEAT (default 1).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${KVSIM_BUILD:-$root/build}
repeat=${REPEAT:-1}
tokens=${TOKENS:-"1024 2048 4096 8192 16384"}
oe_max=${OE_MAX:-4096}
kvsim=$build/kvsim
floor=$build/bench/kvsim_floor
for exe in "$kvsim" "$floor"; do
  [[ -x $exe ]] || { echo "$exe not found: build first" >&2; exit 2; }
done
[[ -x /usr/bin/time ]] || { echo "/usr/bin/time not found (apt install time)" >&2; exit 2; }
tmp=$(mktemp -d "${TMPDIR:-/tmp}/kvsim-scaling.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
source "$root/bench/timing.sh"

grid=(--policies full,scissorhands,h2o,streaming,tova,recent --budgets 10%,20%,30%,40%,50%,60%,70%,80%,90% --threads 1)
echo "machine: $(lscpu | sed -n 's/^Model name: *//p'), $(nproc) CPUs; one thread"
echo "trace: one layer, 32 heads (8 kv heads), head dim 128, float16, q/k and v; the 6 x 9 grid"
results=()
for n in $tokens; do
  trace=$tmp/scaling-$n.h5
  SOURCE_DATE_EPOCH=1735689600 "$kvsim" synth "$trace" --layers 1 --heads 32 --kv-heads 8 --head-dim 128 \
    --tokens "$n" --seqs 1 --form qk --dtype float16 >/dev/null
  echo; echo "== $n tokens ($(du -m "$trace" | cut -f1) MB)"
  run floor "$floor" "$trace" --threads 1
  f=$cpu
  run sweep "$kvsim" sweep "$trace" "${grid[@]}" --output-error off
  s=$cpu s_rss=$rss
  e=- e_rss=-
  if (( n <= oe_max )); then
    run with-oe "$kvsim" sweep "$trace" "${grid[@]}"
    e=$cpu e_rss=$rss
  fi
  results+=("$n $f $s $s_rss $e $e_rss")
  rm -f "$trace"
done

echo
printf '%8s %10s %10s %10s %12s %10s %8s\n' tokens "floor s" "sweep s" "RSS MiB" "with-oe s" "RSS MiB" "oe/sweep"
for r in "${results[@]}"; do
  read -r n f s sr e er <<<"$r"
  ratio=-
  [[ $e != - ]] && ratio=$(awk -v e="$e" -v s="$s" 'BEGIN { printf "%.1fx", e / s }')
  printf '%8s %10s %10s %10s %12s %10s %8s\n' "$n" "$f" "$s" "$sr" "$e" "$er" "$ratio"
done
echo
echo "exponents (log(cost ratio) / log(length ratio)) between successive lengths:"
prev=
for r in "${results[@]}"; do
  read -r n f s sr e er <<<"$r"
  if [[ -n $prev ]]; then
    read -r pn pf ps psr pe per <<<"$prev"
    awk -v n="$n" -v pn="$pn" -v f="$f" -v pf="$pf" -v s="$s" -v ps="$ps" -v e="$e" -v pe="$pe" \
        -v r="$sr" -v pr="$psr" 'BEGIN {
      l = log(n / pn)
      printf "  %6d -> %6d: floor %.2f, sweep %.2f, sweep RSS %.2f", pn, n, log(f / pf) / l, log(s / ps) / l, log(r / pr) / l
      if (e != "-" && pe != "-") printf ", with output error %.2f", log(e / pe) / l
      printf "\n" }'
  fi
  prev=$r
done
