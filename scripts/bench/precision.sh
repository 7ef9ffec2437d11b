#!/usr/bin/env bash
# Precision and activation checkpointing: configs/small.yaml at 2 ranks,
# stages 0 and 3, fp32 vs bf16, checkpointing off and on: ms per step,
# tokens/s, the activation peak and the total peak per rank (measured by
# the ledger), and each row's step time over the fp32 / no-checkpointing
# row of the same stage. Medians over the timed steps.
# usage: scripts/bench/precision.sh [STEPS]   (default 12)
set -euo pipefail
steps=${1:-12}
warm=2
source "$(dirname "$0")/common.sh"

printf '%5s %5s %6s | %9s %10s | %12s %11s | %8s\n' stage prec ckpt "ms/step" "tokens/s" \
  "activ MiB" "peak MiB" "vs fp32"
for stage in 0 3; do
  base=""
  for prec in fp32 bf16; do
    for ckpt in false true; do
      bf16=false
      [ $prec = bf16 ] && bf16=true
      mpirun --oversubscribe -np 2 "$bin" train configs/small.yaml --quiet \
        --set run.steps=$((steps + warm)) --set run.eval_interval=0 --set run.eval_batches=1 \
        --set zero_optimization.stage=$stage --set bf16.enabled=$bf16 \
        --set activation_checkpointing.enabled=$ckpt --set data.train="$tmp/lic.tok" \
        --set run.output_dir="$tmp/run" --metrics "$tmp/m.jsonl" \
        --memory-report "$tmp/mem.json" >"$tmp/log" 2>&1 || { cat "$tmp/log"; exit 1; }
      ms=$(median "$tmp/m.jsonl" step_ms)
      tps=$(median "$tmp/m.jsonl" tokens_per_s)
      activ=$(max_field "$tmp/mem.json" activations)
      peak=$(max_field "$tmp/mem.json" total_peak)
      [ -n "$base" ] || base=$ms
      ratio=$(awk -v a="$ms" -v b="$base" 'BEGIN {printf "%.2fx", a / b}')
      printf '%5d %5s %6s | %9.1f %10.0f | %12.1f %11.1f | %8s\n' $stage $prec $ckpt "$ms" \
        "$tps" "$activ" "$peak" "$ratio"
    done
  done
done
