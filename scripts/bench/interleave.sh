#!/usr/bin/env bash
# Interleaved 1F1B against the plain schedule: configs/small.yaml (GPT-2) with 8 blocks on a
# pipeline of P=2 ranks (D=1), fp32 AdamW, m micro batches of 2 sequences a step, v = 1, 2 and 4
# model chunks per stage. One row per (m, v): the median step time and tokens/s over the timed
# steps, the bytes rank 0 sent per step on the pipeline axis (median; v times the plain
# schedule's), and rank 0's measured bubble (idle / busy, coordinator/pipeline.h) beside Megatron's
# (P - 1) / (v m). Each rank wants a core of its own: run it on an otherwise idle machine, or
# compare the rows as ratios within one run.
# usage: scripts/bench/interleave.sh [STEPS] [MICRO_BATCHES...]   (defaults 8; 4 8)
set -euo pipefail
steps=${1:-8}
shift || true
micro=("$@")
[ ${#micro[@]} -gt 0 ] || micro=(4 8)
warm=2
P=2
source "$(dirname "$0")/common.sh"

# median of the pipeline axis's bytes per step, in MiB
pp_bytes() {
  grep '"step_ms"' "$1" | tail -n +$((warm + 1)) |
    sed -E 's/.*"comm_bytes_by_axis": \{[^}]*"pp": ([0-9]+).*/\1/' | sort -g |
    awk '{a[NR]=$1} END {m = NR%2 ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2; printf "%.2f", m/1048576}'
}

printf '%3s %3s | %8s %9s | %8s | %7s %11s\n' m v "step ms" tokens/s "pp MiB" bubble "(P-1)/(vm)"
for m in "${micro[@]}"; do
  for v in 1 2 4; do
    mpirun --oversubscribe -np $P "$bin" train configs/small.yaml --no-progress \
      --set model.n_layer=8 --set run.steps=$((steps + warm)) --set run.eval_interval=0 \
      --set run.eval_batches=1 --set train_micro_batch_size_per_gpu=2 \
      --set gradient_accumulation_steps="$m" --set pipeline.stages=$P \
      --set pipeline.virtual_stages="$v" --set data.train="$tmp/lic.tok" \
      --set run.output_dir="$tmp/run" --metrics "$tmp/m.jsonl" >"$tmp/log" 2>&1 || {
      cat "$tmp/log"
      exit 1
    }
    printf '%3d %3d | %8.1f %9.0f | %8s | %7.3f %11.3f\n' "$m" "$v" \
      "$(median "$tmp/m.jsonl" step_ms)" "$(median "$tmp/m.jsonl" tokens_per_s)" \
      "$(pp_bytes "$tmp/m.jsonl")" "$(median "$tmp/m.jsonl" bubble)" \
      "$(awk -v p=$P -v v="$v" -v m="$m" 'BEGIN {print (p - 1) / (v * m)}')"
  done
done
