#!/usr/bin/env bash
# Which replay measure predicts which closed-loop target: kvsim eval over every policy it can
# run (those `kvsim policies` lists that eval does not refuse) on the bundled trace, and its
# proxy table (docs/semantics.md, section 6) printed as Markdown, as docs/results.md shows it.
#   bash scripts/proxy-table.sh [BUDGETS [TRACE [EVAL OPTIONS...]]] > /tmp/proxy.md
# BUDGETS default 10%,20%,30%,50%; TRACE the bundled one; EVAL OPTIONS go to kvsim eval
# (a trace of questions with spans: --question auto, for the span-gone row).
# 5.5 minutes on 2 idle cores, 18 on 2 busy ones (eval uses every core; the numbers do not depend
# on it); fewer budgets take less.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
kvsim=${KVSIM:-$root/build/kvsim}
budgets=${1:-10%,20%,30%,50%}
trace=${2:-$root/data/traces/stories15M-8x256.h5}
shown_trace=${2:-data/traces/stories15M-8x256.h5}
options=("${@:3}")
probe=(--tokens 64)  # the bundled trace's first 64 tokens tell a refusal; a question needs its whole sequence
[[ $# -ge 2 ]] && probe=()
tmp=$(mktemp -d "${TMPDIR:-/tmp}/kvsim-proxy.XXXXXX")
trap 'rm -rf "$tmp"' EXIT

# Every policy, tried on 64 tokens; eval refuses bounds (and quest) by name, one line each.
runs=() refused=()
while read -r policy; do
  if "$kvsim" eval --trace "$trace" --seqs 0 --policies "$policy" --budgets 50% "${probe[@]}" "${options[@]}" >/dev/null 2>"$tmp/err"
  then
    runs+=("$policy")
  else
    refused+=("$policy: $(sed 's/^kvsim eval: //' "$tmp/err" | head -1)")
  fi
done < <("$kvsim" policies | sed -n 's/^\([a-z0-9][a-z0-9-]*\) .*/\1/p')
list=$(IFS=,; echo "${runs[*]}")

"$kvsim" eval --trace "$trace" --policies "$list" --budgets "$budgets" "${options[@]}" --json "$tmp/eval.json" >/dev/null
echo "\`kvsim eval --trace $shown_trace --budgets $budgets${options:+ ${options[*]}} --policies $list\`"
if ((${#refused[@]})); then
  echo
  echo "Not run (kvsim eval refuses them):"
  for line in "${refused[@]}"; do echo "- $line"; done
fi
/usr/bin/python3 - "$tmp/eval.json" <<'EOF'
import json, sys
doc = json.load(open(sys.argv[1]))
table = doc["proxy_table"]
labels = {"retention_mean": "retention mean", "retention_p5": "retention p5", "output_error_mean": "output error",
          "occupancy_layer_union_mean": "layer-union occupancy", "occupancy_model_union_mean": "model-union occupancy",
          "span_gone": "span gone",
          "perplexity_increase": "perplexity increase", "top1_agreement": "top-1 agreement",
          "recall_top1_agreement": "recall top-1", "recall_perplexity_increase": "recall perplexity increase"}
print(f"\n{doc['sequences']} sequences, {doc['predictions']} predictions, full-cache perplexity "
      f"{doc['full_cache']['perplexity']:.4f}; {doc['recall_tokens']} recall tokens (D = {doc['recall_distance']}), "
      f"full-cache recall perplexity {doc['full_cache']['recall_perplexity']:.4f}.")
for group in table["groups"]:
    print(f"\n**{group['over']}** ({group['points']} points)\n")
    print("| replay measure | " + " | ".join(labels.get(t, t) for t in table["targets"]) + " |")
    print("| --- |" + " ---: |" * len(table["targets"]))
    for measure in table["measures"]:
        cells = [group["spearman"][measure][t] for t in table["targets"]]
        print(f"| {labels.get(measure, measure)} | " + " | ".join("n/a" if c is None else f"{c:+.3f}" for c in cells)
              + " |")
EOF
