#!/usr/bin/env bash
# fp8 against bf16: configs/tiny.yaml on one rank for STEPS steps (the
# cosine schedule stretched over them), once in bf16 and once in bf16 with
# fp8 GEMMs (fp8.format hybrid, delayed scaling with TE's defaults). Prints
# every EVERY-th step's training loss of both and their difference, then
# the largest |difference|, its mean over the last 50 steps, the final
# difference, the validation losses at the end and the median step times.
# usage: scripts/bench/fp8.sh [STEPS [EVERY]]   (defaults 300, 10)
set -euo pipefail
steps=${1:-300}
every=${2:-10}
warm=2
source "$(dirname "$0")/common.sh"

run() { # name, extra --set arguments...
  local name=$1
  shift
  "$bin" train configs/tiny.yaml --quiet --no-progress --set run.steps="$steps" \
    --set scheduler.params.total_num_steps="$steps" --set run.eval_interval=0 \
    --set run.output_dir="$tmp/$name" --metrics "$tmp/$name.jsonl" --set bf16.enabled=true \
    "$@" >"$tmp/$name.log" 2>&1 || { cat "$tmp/$name.log"; exit 1; }
}
run bf16
run fp8 --set fp8.enabled=true

losses() { grep -v val_loss "$1" | sed -E 's/.*"loss": ([0-9.e+-]+).*/\1/'; }
val() { grep -o '"val_loss": [0-9.e+-]*' "$1" | tail -1 | sed 's/.*: //'; }
paste <(losses "$tmp/bf16.jsonl") <(losses "$tmp/fp8.jsonl") | awk -v every="$every" \
  -v n="$steps" '
  BEGIN { printf "%6s %10s %10s %10s\n", "step", "bf16", "fp8", "diff" }
  { d = $2 - $1; a = d < 0 ? -d : d; if (a > max) { max = a; at = NR }
    if (NR > n - 50) { tail += a; tn++ }
    if (NR == 1 || NR % every == 0) printf "%6d %10.4f %10.4f %+10.4f\n", NR, $1, $2, d
    last = d }
  END { printf "max |diff| %.4f (step %d), mean |diff| over the last %d steps %.4f, final diff %+.4f\n",
        max, at, tn, tail / tn, last }'
printf 'validation loss at the end: bf16 %s, fp8 %s\n' "$(val "$tmp/bf16.jsonl")" \
  "$(val "$tmp/fp8.jsonl")"
printf 'median ms/step: bf16 %s, fp8 %s\n' "$(median "$tmp/bf16.jsonl" step_ms)" \
  "$(median "$tmp/fp8.jsonl" step_ms)"
