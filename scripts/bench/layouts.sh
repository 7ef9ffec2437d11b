#!/usr/bin/env bash
# Data, tensor and pipeline layouts side by side at 4 ranks: configs/small.yaml (GPT-2) and
# configs/llama-small.yaml, the same global batch of 8 micro batches of 2 sequences a step (each
# of the D data-parallel ranks accumulates 8 / D), fp32 AdamW. One row per layout: the median
# step time and tokens/s over the timed steps, the peak total bytes per rank (min-max over the
# ranks, from the memory report), the bytes rank 0 sent per step on each axis (pipeline, data;
# median), and rank 0's measured bubble (idle / busy, pipeline.h) beside (P - 1) / m. Four ranks
# share the machine's cores: compare layouts as ratios within one run. "sp" rows add sequence
# parallelism. Both configs have 6 query heads (llama-small 2 key-value heads), which 4 slices
# cannot cut: the T=4 rows run them with 8 heads (llama-small 4 key-value heads), which leaves
# GPT-2's parameters and FLOPs as they are and adds 3 % to llama-small's (its k and v).
# usage: scripts/bench/layouts.sh [STEPS]   (default 8)
set -euo pipefail
steps=${1:-8}
warm=2
source "$(dirname "$0")/common.sh"

# "min-max" over the ranks of a per-rank byte count in a memory report, in MiB
range() {
  sed 's/.*"ranks"//' "$1" | grep -o "\"$2\": [0-9]*" |
    awk '{v = $2 / 1048576; if (NR == 1 || v < lo) lo = v; if (v > hi) hi = v}
         END {printf "%.1f-%.1f", lo, hi}'
}
# median of a key inside "comm_bytes_by_axis", in MiB
axis() {
  grep '"step_ms"' "$1" | tail -n +$((warm + 1)) |
    sed -E "s/.*\"comm_bytes_by_axis\": \{[^}]*\"$2\": ([0-9]+).*/\1/" | sort -g |
    awk '{a[NR]=$1} END {m = NR%2 ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2; printf "%.2f", m/1048576}'
}

# The --set options of a row's variant for a config.
variant() {
  case "$1:$2" in
    sp:*) echo "--set tensor_parallel.sequence_parallel=true" ;;
    heads8:small) echo "--set model.n_head=8" ;;
    heads8:llama-small) echo "--set model.n_head=8 --set model.n_kv_head=4" ;;
  esac
}

# name|T|P|ZeRO stage|schedule|variant
layouts=(
  "D=4 z0|1|1|0|1f1b"
  "D=4 z1|1|1|1|1f1b"
  "D=4 z2|1|1|2|1f1b"
  "D=4 z3|1|1|3|1f1b"
  "P=2xD=2 1f1b z1|1|2|1|1f1b"
  "P=2xD=2 gpipe z1|1|2|1|gpipe"
  "P=2xD=2 1f1b z3|1|2|3|1f1b"
  "P=4 1f1b z0|1|4|0|1f1b"
  "P=4 gpipe z0|1|4|0|gpipe"
  "T=2xD=2 z1|2|1|1|1f1b"
  "T=2xD=2 z3|2|1|3|1f1b"
  "T=2xD=2 z1 sp|2|1|1|1f1b|sp"
  "T=2xP=2 1f1b z0|2|2|0|1f1b"
  "T=2xP=2 1f1b z0 sp|2|2|0|1f1b|sp"
  "T=4 z0 8 heads|4|1|0|1f1b|heads8"
  "T=4 z0 8 heads sp|4|1|0|1f1b|heads8 sp"
)

printf '%-11s %-20s | %8s %9s | %13s | %8s %8s %8s | %7s %7s\n' model layout "step ms" \
  tokens/s "peak MiB" "tp MiB" "pp MiB" "dp MiB" bubble "(P-1)/m"
for cfg in small llama-small; do
  for entry in "${layouts[@]}"; do
    IFS='|' read -r name T P stage schedule variants <<<"$entry"
    extra=()
    for v in $variants; do
      read -ra opts <<<"$(variant "$v" "$cfg")"
      extra+=("${opts[@]}")
    done
    D=$((4 / (T * P)))
    accum=$((8 / D))
    mpirun --oversubscribe -np 4 "$bin" train "configs/$cfg.yaml" --no-progress \
      --set run.steps=$((steps + warm)) --set run.eval_interval=0 --set run.eval_batches=1 \
      --set train_micro_batch_size_per_gpu=2 --set gradient_accumulation_steps=$accum \
      --set tensor_parallel.size="$T" \
      --set pipeline.stages="$P" --set pipeline.schedule="$schedule" \
      --set zero_optimization.stage="$stage" --set data.train="$tmp/lic.tok" \
      --set run.output_dir="$tmp/run" --metrics "$tmp/m.jsonl" \
      --memory-report "$tmp/mem.json" ${extra[@]+"${extra[@]}"} >"$tmp/log" 2>&1 || {
      cat "$tmp/log"
      exit 1
    }
    bubble=-
    expected=-
    if [ "$P" -gt 1 ]; then
      bubble=$(median "$tmp/m.jsonl" bubble)
      expected=$(awk -v p="$P" -v m="$accum" 'BEGIN {printf "%.3f", (p - 1) / m}')
    fi
    printf '%-11s %-20s | %8.1f %9.0f | %13s | %8s %8s %8s | %7s %7s\n' "$cfg" "$name" \
      "$(median "$tmp/m.jsonl" step_ms)" "$(median "$tmp/m.jsonl" tokens_per_s)" \
      "$(range "$tmp/mem.json" total_peak)" "$(axis "$tmp/m.jsonl" tp)" "$(axis "$tmp/m.jsonl" pp)" \
      "$(axis "$tmp/m.jsonl" dp)" "$bubble" "$expected"
  done
done
