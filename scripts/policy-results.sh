#!/usr/bin/env bash
# Every policy `kvsim policies` lists, at 10%..90% (or token budgets where the prompt is short),
# in stream, prefill and question mode, on the bundled trace and a synthetic GQA trace; then
# the closed loop over every policy it can run. Prints the markdown of docs/results.md's
# "Every policy" section (mean retention; a policy a trace cannot serve says why).
#   bash scripts/policy-results.sh [BUILD_DIR] > /tmp/policies.md
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build=$(cd "${1:-$root/build}" && pwd)
kvsim=$build/kvsim
cd "$root"  # the eval block below names the trace as the README does
bundled=data/traces/stories15M-8x256.h5
tmp=$(mktemp -d "${TMPDIR:-/tmp}/kvsim-policies.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
SOURCE_DATE_EPOCH=1735689600 "$kvsim" synth "$tmp/gqa.h5" --layers 2 --heads 8 --kv-heads 2 --head-dim 32 \
  --tokens 512 --seqs 1 --seed 7 >/dev/null
mapfile -t policies < <("$kvsim" policies | sed -n '/^wrappers /q; s/^\([a-z0-9][a-z0-9-]*\) .*/\1/p')
# Each wrapper once, over snapkv (dms has no default threshold: kvpress's None).
rows=("${policies[@]}" "snapkv+block" "snapkv+chunk" "snapkv+dms --param dms_threshold=0.1")
percent=10%,20%,30%,40%,50%,60%,70%,80%,90%

# table TITLE TRACE BUDGETS [sweep options...]: one row per policy, one column per budget.
table() {
  local title=$1 trace=$2 budgets=$3
  shift 3
  echo
  echo "**$title** (\`kvsim sweep $(basename "$trace") --budgets $budgets $*\`)"
  echo
  echo "| policy | ${budgets//,/ | } |"
  echo "| --- |$(tr ',' '\n' <<<"$budgets" | sed 's/.*/ ---: |/' | paste -sd '' -)"
  local row policy extra label
  for row in "${rows[@]}"; do
    read -r policy extra <<<"$row"
    label=$policy${extra:+ (${extra#--param })}
    # shellcheck disable=SC2086 # extra is words: --param key=value
    if "$kvsim" sweep "$trace" --policies "$policy" $extra --budgets "$budgets" "$@" --csv "$tmp/p.csv" \
      >/dev/null 2>"$tmp/err"; then
      /usr/bin/python3 - "$tmp/p.csv" "$label" <<'EOF'
import csv, sys
rows = list(csv.DictReader(open(sys.argv[1])))
print(f"| {sys.argv[2]} | " + " | ".join(f"{float(r['retention_mean']):.4f}" for r in rows) + " |")
EOF
    else
      echo "| $label | refused: $(sed "s/^kvsim sweep: //; s#$tmp/##g; s/|/\\\\|/g" "$tmp/err" | head -1) |"
    fi
  done
}

echo "Mean attention-mass retention (docs/semantics.md, section 3), one row per policy with its"
echo "defaults. Made by \`bash scripts/policy-results.sh\`."
table "Bundled trace, stream" "$bundled" "$percent"
table "Bundled trace, prefill" "$bundled" "$percent" --mode prefill
table "Bundled trace, prefill at token budgets (the prompts are 17-33 tokens)" "$bundled" 4,8,12,16,24 --mode prefill
table "Bundled trace, question (the prompt's last 8 tokens)" "$bundled" "$percent" --mode prefill --question 8
table "Bundled trace, question at token budgets" "$bundled" 4,8,12,16 --mode prefill --question 8
table "Synthetic GQA trace (8 heads, 2 kv heads), stream" "$tmp/gqa.h5" "$percent"
table "Synthetic GQA trace, prefill" "$tmp/gqa.h5" "$percent" --mode prefill
table "Synthetic GQA trace, question (the prompt's last 32 tokens)" "$tmp/gqa.h5" "$percent" --mode prefill \
  --question 32

# The closed loop runs every policy it can; the others are listed with the line that refuses
# them (B = 16 in the probe: above every policy's kept sinks).
closed=()
refused=()
for policy in "${policies[@]}"; do
  if "$kvsim" eval --trace "$bundled" --seqs 0 --tokens 32 --policies "$policy" --budgets 50% >/dev/null \
    2>"$tmp/err"; then
    closed+=("$policy")
  else
    refused+=("- $policy: $(sed 's/^kvsim eval: //' "$tmp/err" | head -1)")
  fi
done
list=$(IFS=,; echo "${closed[*]}")
echo
echo "**Closed loop** (\`kvsim eval --trace stories15M-8x256.h5 --seqs 0,1 --tokens 128 --budgets 20%,50%\`"
echo "over the ${#closed[@]} policies it runs: $list). It refuses:"
echo
printf '%s\n' "${refused[@]}"
echo
echo '```'
"$kvsim" eval --trace "$bundled" --seqs 0,1 --tokens 128 --policies "$list" --budgets 20%,50%
echo '```'
