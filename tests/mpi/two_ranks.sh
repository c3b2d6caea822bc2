#!/usr/bin/env bash
# Two MPI ranks must write exactly what one process writes: stdout, CSV and JSON.
# usage: two_ranks.sh MPIEXEC KVSIM TRACE
set -euo pipefail
mpiexec=$1 kvsim=$2 trace=$3
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
grid=(--policies scissorhands,h2o,tova,snapkv,oracle,scissorhands-xlayer --budgets 10%,30%,64 --seqs 0,2,5,7)
"$kvsim" sweep "$trace" "${grid[@]}" --csv "$dir/one.csv" --json "$dir/one.json" > "$dir/one.out"
"$mpiexec" --allow-run-as-root --oversubscribe --bind-to none -np 2 \
  "$kvsim" sweep "$trace" "${grid[@]}" --csv "$dir/two.csv" --json "$dir/two.json" > "$dir/two.out"
for f in csv json out; do
  cmp "$dir/one.$f" "$dir/two.$f" || { echo "FAILED: 2 ranks differ from 1 process in .$f"; exit 1; }
done
test "$(wc -l < "$dir/two.csv")" -eq 19 || { echo "FAILED: expected 18 rows"; exit 1; }
echo "2 ranks: stdout, CSV and JSON byte-identical to one process"
