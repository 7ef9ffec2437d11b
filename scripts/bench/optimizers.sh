#!/usr/bin/env bash
# The optimizers side by side: configs/small.yaml at 2 ranks, stages 0 and
# 3, one row per optimizer: ms per step (median over the timed steps),
# the optimizer state rank 0 holds (measured by the ledger) in MiB and in
# bytes per parameter whose state it holds (all of them under stage 0,
# 1/2 under stage 3; state every rank keeps whole, such as AdamW8bit's
# block scales or Adafactor's factors, counts in full), the peak per rank,
# and the mean training loss of the last 10 steps and the validation loss
# after STEPS steps (cosine schedule over the run, warm-up 5 steps).
# Each optimizer runs with a learning rate of its own kind (given in the
# table); LOMO runs twice, with the config's gradient clipping (which costs
# a measuring backward per step) and without.
# usage: scripts/bench/optimizers.sh [STEPS]   (default 200)
set -euo pipefail
steps=${1:-200}
warm=3
source "$(dirname "$0")/common.sh"

# name | peak lr | further --set arguments. Keys an optimizer does not read
# are nulled; weight decay is the config's 0.1 throughout.
rows=(
  "AdamW|6e-4|optimizer.type=AdamW"
  "Adam|6e-4|optimizer.type=Adam"
  "AdamW8bit|6e-4|optimizer.type=AdamW8bit"
  "Lion|2e-4|optimizer.type=Lion optimizer.params.eps=null"
  "Adafactor|1e-3|optimizer.type=Adafactor optimizer.params.scale_parameter=false optimizer.params.betas=null optimizer.params.eps=null"
  "SGD m=0.9|0.05|optimizer.type=SGD optimizer.params.momentum=0.9 optimizer.params.betas=null optimizer.params.eps=null"
  "LOMO|0.1|optimizer.type=LOMO optimizer.params.betas=null optimizer.params.eps=null"
  "LOMO no clip|0.1|optimizer.type=LOMO optimizer.params.betas=null optimizer.params.eps=null gradient_clipping=0"
)

# the "optimizer_states" of rank 0's peak in a memory report, in bytes
rank0_optim() {
  grep -o '"optimizer_states": [0-9]*' "$1" | sed -n 3p | awk '{print $2}'
}

printf '%-12s %5s %7s | %9s %10s | %9s %9s | %9s | %10s %8s\n' optimizer stage lr "ms/step" \
  "tokens/s" "optim MiB" "B/param" "peak MiB" "train loss" "val loss"
for row in "${rows[@]}"; do
  IFS='|' read -r name lr more <<<"$row"
  sets=(--set optimizer.params.lr="$lr")
  for kv in $more; do sets+=(--set "$kv"); done
  for stage in 0 3; do
    mpirun --oversubscribe -np 2 "$bin" train configs/small.yaml --quiet --no-progress \
      --set run.steps="$steps" --set run.eval_interval=0 --set run.eval_batches=8 \
      --set scheduler.params.total_num_steps="$steps" \
      --set zero_optimization.stage=$stage --set data.train="$tmp/lic.tok" \
      --set run.output_dir="$tmp/run" --metrics "$tmp/m.jsonl" \
      --memory-report "$tmp/mem.json" "${sets[@]}" >"$tmp/log" 2>&1 || {
      cat "$tmp/log"
      exit 1
    }
    ms=$(median "$tmp/m.jsonl" step_ms)
    tps=$(median "$tmp/m.jsonl" tokens_per_s)
    optim=$(rank0_optim "$tmp/mem.json")
    n=$(grep -o '"n_params": [0-9]*' "$tmp/mem.json" | awk '{print $2}')
    held=$([ $stage = 0 ] && echo "$n" || echo $((n / 2)))
    peak=$(max_field "$tmp/mem.json" total_peak)
    train=$(grep '"step_ms"' "$tmp/m.jsonl" | tail -10 |
      sed -E 's/.*"loss": ([0-9.e+-]+).*/\1/' | awk '{s += $1} END {printf "%.4f", s / NR}')
    val=$(grep '"val_loss"' "$tmp/m.jsonl" | tail -1 | sed -E 's/.*"val_loss": ([0-9.e+-]+).*/\1/')
    printf '%-12s %5d %7s | %9.1f %10.0f | %9.2f %9.3f | %9.1f | %10s %8.4f\n' "$name" $stage \
      "$lr" "$ms" "$tps" "$(awk -v b="$optim" 'BEGIN {print b / 1048576}')" \
      "$(awk -v b="$optim" -v h="$held" 'BEGIN {print b / h}')" "$peak" "$train" "$val"
  done
done
