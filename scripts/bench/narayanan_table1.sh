#!/usr/bin/env bash
# zerotrain plan against Narayanan et al. 2021 ("Efficient Large-Scale Language Model Training
# on GPU Clusters Using Megatron-LM", arXiv 2104.04473), Table 1: GPT models of 1.7B to 1T
# parameters on A100 80 GB nodes (machine file a100-80gb), vocabulary 51,200, sequence 2048,
# each row with the paper's heads, width, layers, GPUs and batch, fp16 (bf16 here: the same
# tensor-core rate) and Adam.
#
# "measured" is the paper's step time: its FLOPs per step (its equation 3, which counts the
# recomputed forward: 96 B s l h^2 (1 + s/(6h) + V/(16 l h))) over GPUs x its achieved
# teraFLOP/s per GPU. Each row is planned twice:
#   - on the paper's stack: every block recomputed and a replicated optimizer (data parallelism
#     allreduces the gradients; 2021's Megatron-LM had neither ZeRO nor a distributed
#     optimizer), held with --keep, the rest searched. Its columns: the fastest layout with the
#     paper's (t, p); the planner's first choice; the place of the paper's (t, p) among the
#     (t, p) cuts, each ranked by its fastest layout;
#   - free: the planner's first choice over everything it searches.
# Each step predicted is shown with predicted / measured. Numbers, not a test: a model, not a run.
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
paper_stack=(--set zero_optimization.stage=0 --set activation_checkpointing.enabled=true
  --set activation_checkpointing.every_n_blocks=1
  --keep zero_optimization.stage --keep activation_checkpointing)

printf '%-7s %5s %5s %8s | %-30s %8s %5s | %-30s %8s %5s %5s | %-30s %8s %5s\n' params GPUs \
  batch measured "paper's (t, p), paper's stack" predicted ratio "first choice, paper's stack" \
  predicted ratio place "first choice, free" predicted ratio
for i in $pick; do
  IFS='|' read -r params heads hidden layers t p gpus batch tflops <<<"${rows[$i]}"
  for run in paper free; do
    extra=()
    [ "$run" = paper ] && extra=("${paper_stack[@]}")
    "$bin" plan "$root/configs/gpt3-175b.yaml" --gpus "$gpus" --machine a100-80gb \
      --global-batch "$batch" --top 1 --json "$tmp/$run.json" \
      --set model.vocab_size=51200 --set model.n_layer="$layers" --set model.n_head="$heads" \
      --set model.n_embd="$hidden" "${extra[@]}" >"$tmp/$run.log"
  done
  python3 - "$tmp" "$params" "$heads" "$hidden" "$layers" "$t" "$p" "$gpus" "$batch" \
    "$tflops" <<'EOF'
import json, sys
tmp, params = sys.argv[1], sys.argv[2]
heads, h, l, t, p, gpus, B = map(int, sys.argv[3:10])
tflops = float(sys.argv[10])
s, V = 2048, 51200
flops = 96.0 * B * s * l * h * h * (1 + s / (6.0 * h) + V / (16.0 * l * h))
measured = flops / (gpus * tflops * 1e12)
def ranked(run):
    layouts = json.load(open("%s/%s.json" % (tmp, run)))["layouts"]
    return sorted([x for x in layouts if x["fits"]], key=lambda x: x["step_seconds"])
def name(x):
    sp = "+SP" if x.get("sequence_parallel") else ""
    v = " v%d" % x["virtual_stages"] if x.get("virtual_stages", 1) > 1 else ""
    ck = " ck%d" % x["ckpt_every"] if x["ckpt_every"] else ""
    return "T%d%s P%d%s D%d Z%d %dx%d%s" % (x["tp"], sp, x["pp"], v, x["dp"], x["zero_stage"],
                                            x["micro_batch"], x["accum"], ck)
def cell(x):
    if not x:
        return "%-30s %8s %5s" % ("does not fit", "-", "-")
    return "%-30s %8.3g %5.2f" % (name(x), x["step_seconds"], x["step_seconds"] / measured)
paper, free = ranked("paper"), ranked("free")
own = next((x for x in paper if x["tp"] == t and x["pp"] == p), None)
cuts = []  # (t, p) cuts in the order of their fastest layout
for x in paper:
    if (x["tp"], x["pp"]) not in cuts:
        cuts.append((x["tp"], x["pp"]))
place = cuts.index((t, p)) + 1 if (t, p) in cuts else "-"
print("%-7s %5d %5d %8.3g | %s | %s %5s | %s" % (params + "B", gpus, B, measured, cell(own),
                                                 cell(paper[0] if paper else None), place,
                                                 cell(free[0] if free else None)))
EOF
done
