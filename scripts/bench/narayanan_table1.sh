#!/usr/bin/env bash
# zerotrain plan against Narayanan et al. 2021 ("Efficient Large-Scale Language Model Training
# on GPU Clusters Using Megatron-LM", arXiv 2104.04473), Table 1: GPT models of 1.7B to 1T
# parameters on A100 80 GB nodes (machine file a100-80gb), vocabulary 51,200, sequence 2048,
# each row with the paper's heads, width, layers, GPUs and batch, fp16 (bf16 here: the same
# tensor-core rate) and Adam.
#
# "measured" is the paper's step time: its FLOPs per step (its equation 3, which counts the
# recomputed forward: 96 B s l h^2 (1 + s/(6h) + V/(16 l h))) over GPUs x its achieved
# teraFLOP/s per GPU. For each row the plan is read twice from one --json: the best fitting
# layout with the paper's (t, p), full recomputation and ZeRO-0 or 1 ("paper's layout"), and the
# planner's own first choice; each with its predicted step and predicted / measured; and the
# place in the planner's ranking of fitting layouts where the paper's (t, p) first comes, its
# other settings free. Numbers, not a test: a model, not a run.
# usage: scripts/bench/narayanan_table1.sh [ROWS]   ROWS: row indexes 0-9 (default all), e.g. "2 6"
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
bin=${ZT_BIN:-$root/build/zerotrain}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# Table 1, transcribed: params (B) | heads | hidden | layers | t | p | GPUs | batch | TFLOP/s per GPU
rows=(
  "1.7|24|2304|24|1|1|32|512|137"
  "3.6|32|3072|30|2|1|64|512|138"
  "7.5|32|4096|36|4|1|128|512|142"
  "18.4|48|6144|40|8|1|256|1024|135"
  "39.1|64|8192|48|8|2|512|1536|138"
  "76.1|80|10240|60|8|4|1024|1792|140"
  "145.6|96|12288|80|8|8|1536|2304|148"
  "310.1|128|16384|96|8|16|1920|2160|155"
  "529.6|128|20480|105|8|35|2520|2520|163"
  "1008|160|25600|128|8|64|3072|3072|163"
)
pick=${1:-0 1 2 3 4 5 6 7 8 9}

printf '%-7s %5s %5s | %-34s %9s %9s %6s | %-34s %9s %6s | %s\n' params GPUs batch \
  "paper's (t, p), recomputed" "measured" "predicted" ratio "planner's first choice" predicted ratio \
  "(t, p)'s place"
for i in $pick; do
  IFS='|' read -r params heads hidden layers t p gpus batch tflops <<<"${rows[$i]}"
  "$bin" plan "$root/configs/gpt3-175b.yaml" --gpus "$gpus" --machine a100-80gb \
    --global-batch "$batch" --top 1 --json "$tmp/plan.json" \
    --set model.vocab_size=51200 --set model.n_layer="$layers" --set model.n_head="$heads" \
    --set model.n_embd="$hidden" >"$tmp/plan.log"
  python3 - "$tmp/plan.json" "$params" "$heads" "$hidden" "$layers" "$t" "$p" "$gpus" "$batch" \
    "$tflops" <<'EOF'
import json, sys
path, params = sys.argv[1], sys.argv[2]
heads, h, l, t, p, gpus, B = map(int, sys.argv[3:10])
tflops = float(sys.argv[10])
s, V = 2048, 51200
flops = 96.0 * B * s * l * h * h * (1 + s / (6.0 * h) + V / (16.0 * l * h))
measured = flops / (gpus * tflops * 1e12)
layouts = json.load(open(path))["layouts"]
fit = [x for x in layouts if x["fits"]]
def name(x):
    sp = "+SP" if x.get("sequence_parallel") else ""
    v = " v%d" % x["virtual_stages"] if x.get("virtual_stages", 1) > 1 else ""
    return "T%d%s P%d%s D%d Z%d %dx%d ck%d" % (x["tp"], sp, x["pp"], v, x["dp"], x["zero_stage"],
                                             x["micro_batch"], x["accum"], x["ckpt_every"])
# the paper's layout: its (t, p), every block recomputed (its FLOPs count the recomputation)
# and a replicated optimizer (ZeRO-0/1: its data parallelism allreduces gradients)
paper = [x for x in fit if x["tp"] == t and x["pp"] == p and x["ckpt_every"] == 1 and
         x["zero_stage"] <= 1]
paper = min(paper, key=lambda x: x["step_seconds"]) if paper else None
first = min(fit, key=lambda x: x["step_seconds"]) if fit else None
cell = lambda x: ("%-34s %9.3g %6.2f" % (name(x), x["step_seconds"],
                                         x["step_seconds"] / measured)) if x else "%-34s %9s %6s" % (
                                             "does not fit", "-", "-")
pp = ("%-34s %9.3g %9.3g %6.2f" % (name(paper), measured, paper["step_seconds"],
                                   paper["step_seconds"] / measured)) if paper else \
     "%-34s %9.3g %9s %6s" % ("T%d P%d: does not fit" % (t, p), measured, "-", "-")
first_cell = ("%-34s %9.3g %6.2f" % (name(first), first["step_seconds"],
                                      first["step_seconds"] / measured)) if first else "no layout fits"
# where the paper's (t, p), any other setting free, first comes in the planner's ranking
ranked = sorted(fit, key=lambda x: x["step_seconds"])
place = next((i + 1 for i, x in enumerate(ranked) if x["tp"] == t and x["pp"] == p), None)
print("%-7s %5d %5d | %s | %s | %s" % (params + "B", gpus, B, pp, first_cell,
                                       place if place else "-"))
EOF
done
