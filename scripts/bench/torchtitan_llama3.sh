#!/usr/bin/env bash
# zerotrain plan against torchtitan's published Llama 3 runs (pytorch/torchtitan,
# docs/performance.md): FSDP2 (ZeRO-3, one dimension) at 8,192 tokens a sequence, bf16 AdamW.
#   - Llama 3 8B and 70B on 64 A100 80 GB, local batch 1: 8B with selective activation
#     checkpointing 2,876-2,973 tokens/s a GPU, 70B with full checkpointing 323;
#   - Llama 3.1 8B on 8 H100 (96 GB HBM2e at 2.4 TB/s, run at a 500 W limit), local batch 2,
#     selective checkpointing, no torch.compile: 5,762 tokens/s a GPU at 82.4 GiB.
# zerotrain's fused attention keeps what selective checkpointing keeps, so "selective" is
# planned as checkpointing off, "full" as every block recomputed. For each run the plan is
# read from one --json: torchtitan's layout (T1 P1 ZeRO-3 over every GPU, its micro batch, no
# accumulation; "no fit" where the machine file's memory refuses it) and the planner's first
# choice, each as tokens/s a GPU and predicted / published. The machine files are the
# datasheet's parts (a100-80gb, h100-sxm: 80 GB SXM at 700 W), not the 500 W 96 GB H100s.
# Numbers, not a test: a model, not a run.
# usage: scripts/bench/torchtitan_llama3.sh
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
bin=${ZT_BIN:-$root/build/zerotrain}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# config | machine | GPUs | local batch | checkpointing (0 off, 1 every block) | published tokens/s a GPU | what
runs=(
  "llama3-8b|a100-80gb|64|1|0|2973|8B, 64 A100, selective op AC"
  "llama3-70b|a100-80gb|64|1|1|323|70B, 64 A100, full AC"
  "llama3-8b|h100-sxm|8|2|0|5762|3.1 8B, 8 H100 500 W, selective AC"
)

printf '%-34s | %-26s %9s %9s %6s | %-28s %9s %6s\n' run "torchtitan's layout" published \
  predicted ratio "planner's first choice" predicted ratio
for r in "${runs[@]}"; do
  IFS='|' read -r cfg machine gpus mb ck published what <<<"$r"
  json=$tmp/$cfg-$machine.json
  "$bin" plan "$root/configs/$cfg.yaml" --gpus "$gpus" --machine "$machine" \
    --global-batch $((gpus * mb)) --all --json "$json" >/dev/null
  python3 - "$json" "$gpus" "$mb" "$ck" "$published" "$what" <<'PY'
import json, sys
path, gpus, mb, ck, published, what = sys.argv[1:]
gpus, mb, ck, published = int(gpus), int(mb), int(ck), float(published)
layouts = json.load(open(path))["layouts"]
def name(l):
    return "T%d P%d D%d Z%d %dx%d ck%d" % (l["tp"], l["pp"], l["dp"], l["zero_stage"],
                                            l["micro_batch"], l["accum"], l["ckpt_every"])
def per_gpu(l):
    return l["tokens_per_s"] / gpus
theirs = [l for l in layouts if l["tp"] == 1 and l["pp"] == 1 and l["dp"] == gpus
          and l.get("cp", 1) == 1 and l["zero_stage"] == 3 and l["micro_batch"] == mb
          and l["accum"] == 1 and (l["ckpt_every"] > 0) == bool(ck)]
first = next((l for l in layouts if l["fits"]), None)
t = theirs[0] if theirs else None
cells = ["%-26s" % (name(t) + ("" if t["fits"] else " (no fit)")) if t else "%-26s" % "-",
         "%9.0f" % published,
         "%9.0f" % per_gpu(t) if t else "%9s" % "-",
         "%6.2f" % (per_gpu(t) / published) if t else "%6s" % "-"]
tail = ["%-28s" % name(first), "%9.0f" % per_gpu(first), "%6.2f" % (per_gpu(first) / published)] \
    if first else ["%-28s" % "nothing fits", "%9s" % "-", "%6s" % "-"]
print("%-34s | %s | %s" % (what, " ".join(cells), " ".join(tail)))
PY
done
