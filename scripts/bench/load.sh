#!/usr/bin/env bash
# Streamed loading at real size: scripts/bench/make_weights.py writes SHAPE's random Hugging Face
# weights (bf16, 2 GB shards) into a folder under $ZT_WEIGHTS_DIR (default /tmp), then
# `zerotrain train` starts from them (model.init_from) for one step at RANKS ranks under ZeRO
# stage 3 in bf16, sequence 128, micro batch 1, with METHOD: lora (r 16 on every linear layer,
# AdamW), qlora (the same on an NF4 base with double quantisation) or full (AdamW8bit). Prints
# the generator's time, the time rank 0 took to read the weights ("model.init_from read in"), each
# rank's peak resident memory (the memory report's rss_peak, VmHWM) and its loader staging (the
# ledger's load peak), and the largest rank's peak RSS as /usr/bin/time -v gives it. The folder
# is removed at the end, whatever happens.
# usage: scripts/bench/load.sh [SHAPE [METHOD [RANKS]]]   (default: gpt2-xl lora 2)
set -euo pipefail
shape=${1:-gpt2-xl}
method=${2:-lora}
ranks=${3:-2}
warm=0
source "$(dirname "$0")/common.sh"
weights=$(mktemp -d "${ZT_WEIGHTS_DIR:-/tmp}/zt-weights-XXXXXX")
trap 'rm -rf "$tmp" "$weights"' EXIT

echo "== make_weights.py $shape (bf16) into $weights"
/usr/bin/python3 "$ZT_ROOT/scripts/bench/make_weights.py" "$shape" --out "$weights"

extra=()
case $method in
lora) extra=(--set lora.enabled=true --set lora.r=16 --set lora.lora_alpha=32
  --set lora.target_modules=all-linear) ;;
qlora) extra=(--set lora.enabled=true --set lora.r=16 --set lora.lora_alpha=32
  --set lora.target_modules=all-linear --set quantization.load_in_4bit=true
  --set quantization.bnb_4bit_use_double_quant=true
  --set quantization.bnb_4bit_compute_dtype=bf16) ;;
full) extra=(--set optimizer.type=AdamW8bit) ;;
*) echo "load.sh: METHOD is lora, qlora or full, not $method" >&2 && exit 2 ;;
esac

cat >"$tmp/load.yaml" <<EOF
model:
  hf_config: $weights/config.json
  init_from: $weights
data:
  train: $tmp/lic.tok
  val_fraction: 0.0
  seq_len: 128
run:
  steps: 1
  seed: 1
  eval_interval: 0
  output_dir: $tmp/run
train_micro_batch_size_per_gpu: 1
gradient_accumulation_steps: 1
optimizer:
  type: AdamW
  params:
    lr: 1.0e-4
bf16:
  enabled: true
zero_optimization:
  stage: 3
EOF

echo "== zerotrain train: $shape, $method, $ranks ranks, ZeRO-3, bf16"
start=$(date +%s.%N)
/usr/bin/time -v -o "$tmp/time" mpirun --oversubscribe -np "$ranks" "$bin" train "$tmp/load.yaml" \
  --no-progress --memory-report "$tmp/mem.json" "${extra[@]}" >"$tmp/log" 2>&1 || {
  cat "$tmp/log"
  exit 1
}
wall=$(echo "$(date +%s.%N) - $start" | bc)
grep -E "init_from|loss" "$tmp/log" | head -5

read_s=$(sed -n 's/.*model.init_from read in \([0-9.]*\) s.*/\1/p' "$tmp/log" | head -1)
job_rss=$(awk -F': ' '/Maximum resident set size/ {print $2 / 1024}' "$tmp/time")
bytes=$(du -sb "$weights" | cut -f1)
printf '\n%-9s %-6s %5s %10s %9s %9s %14s\n' shape method ranks "GB read" "read s" "run s" \
  "max RSS MiB"
printf '%-9s %-6s %5d %10.2f %9s %9.1f %14.0f\n' "$shape" "$method" "$ranks" \
  "$(echo "$bytes / 1000000000" | bc -l)" "${read_s:--}" "$wall" "$job_rss"
/usr/bin/python3 - "$tmp/mem.json" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
mib = 1 << 20
print("\n%5s %14s %16s %16s" % ("rank", "rss_peak MiB", "load peak MiB", "total_peak MiB"))
for row in r["ranks"]:
    print("%5d %14.1f %16.2f %16.1f" % (row["rank"], row["rss_peak"] / mib,
                                        row["peak"]["load"] / mib, row["total_peak"] / mib))
PY
