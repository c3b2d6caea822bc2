#!/usr/bin/env bash
# The regression set: outputs of every verb on the bundled trace and a synthetic GQA trace,
# in several modes, written to OUT_DIR. Refactors must leave them byte-identical:
#   bash tests/regression/run.sh OLD_BUILD/kvsim /tmp/before
#   bash tests/regression/run.sh build/kvsim /tmp/after && diff -r /tmp/before /tmp/after
# EXCLUDE (a policy name) leaves one policy out of the grids, for a change meant to alter it.
set -euo pipefail
kvsim=$(realpath "$1")
out=$2
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
trace=$root/data/traces/stories15M-8x256.h5
mkdir -p "$out"
cd "$out"
exclude=${EXCLUDE:-}
pick() { tr ',' '\n' <<<"$1" | grep -vxF "${exclude:-@none@}" | paste -sd, -; }
all=$(pick full,scissorhands,scissorhands-official,scissorhands-xlayer,h2o,streaming,tova,snapkv,recent,random,oracle,lookahead)
SOURCE_DATE_EPOCH=1735689600 "$kvsim" synth gqa.h5 --layers 2 --heads 8 --kv-heads 2 --head-dim 32 --tokens 160 --seqs 2 --seed 7 >/dev/null
"$kvsim" sweep "$trace" --policies "$all" --budgets 10%,30%,50%,90% --seqs 0,3 --csv sweep-stream.csv --json sweep-stream.json >sweep-stream.txt
"$kvsim" sweep "$trace" --policies "$all" --budgets 20%,60% --seqs 1 --mode prefill --csv sweep-prefill.csv >sweep-prefill.txt
"$kvsim" sweep gqa.h5 --policies "$all" --budgets 16,48 --csv sweep-gqa.csv --survival survival-gqa.csv >sweep-gqa.txt
"$kvsim" sweep gqa.h5 --policies "$(pick h2o,snapkv,tova,scissorhands)" --budgets 32 --aggregate max --csv sweep-gqa-max.csv >/dev/null
"$kvsim" sweep "$trace" --policies "$(pick h2o,tova,streaming)" --budgets 25% --seqs 2 --quant kivi2 --csv sweep-quant.csv >/dev/null
"$kvsim" replay "$trace" --policy scissorhands --budget 20% --seqs 0 --survival survival.csv --json replay.json >replay.txt
"$kvsim" analyze "$trace" --seqs 0,1 --csv analyze.csv >analyze.txt
"$kvsim" plan --model llama-3.1-8b --gpu h100-80gb --sweep sweep-stream.csv --json plan.json >plan.txt
"$kvsim" eval --trace "$trace" --seqs 0 --tokens 96 --policies "$(pick scissorhands,h2o,tova,recent,scissorhands-official)" \
  --budgets 30% --csv eval.csv >eval.txt
# Wall times differ from run to run.
sed -i -E '/"(seconds|elapsed|wall|created)[a-z_]*":/d' ./*.json
