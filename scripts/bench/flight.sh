#!/usr/bin/env bash
# The flight recorder's cost: configs/tiny.yaml at 2 ranks, stages 0 and 3,
# with the recorder and watchdog on (comm.timeout_s 600, the default) and
# off (0), run in turn ROUNDS times so that both see the same machine. Each
# run's median ms per step over its timed steps; then per stage the median
# of the on/off ratios of the rounds. Stage 3 makes the most calls per step
# (a gather per unit and pass, a reduce-scatter per bucket).
# usage: scripts/bench/flight.sh [STEPS] [ROUNDS]   (default 40 steps, 5 rounds)
set -euo pipefail
steps=${1:-40}
rounds=${2:-5}
warm=5
source "$(dirname "$0")/common.sh"

run() { # stage timeout -> median ms per step
  mpirun --oversubscribe -np 2 "$bin" train configs/tiny.yaml --quiet --no-progress \
    --set run.steps=$((steps + warm)) --set run.eval_interval=0 --set run.eval_batches=1 \
    --set zero_optimization.stage="$1" --set comm.timeout_s="$2" \
    --set data.train="$tmp/lic.tok" --set run.output_dir="$tmp/run" \
    --metrics "$tmp/m.jsonl" >"$tmp/log" 2>&1 || { cat "$tmp/log"; exit 1; }
  median "$tmp/m.jsonl" step_ms
}

med() { sort -g | awk '{a[NR]=$1} END {if (NR%2) print a[(NR+1)/2]; else print (a[NR/2]+a[NR/2+1])/2}'; }

printf '%5s | %12s %12s | %10s\n' stage "off ms/step" "on ms/step" "on / off"
for stage in 0 3; do
  offs=() ons=() ratios=()
  for ((r = 0; r < rounds; r++)); do
    off=$(run "$stage" 0)
    on=$(run "$stage" 600)
    offs+=("$off") ons+=("$on")
    ratios+=("$(awk -v a="$on" -v b="$off" 'BEGIN {print a / b}')")
  done
  printf '%5d | %12.2f %12.2f | %9.4fx\n' "$stage" "$(printf '%s\n' "${offs[@]}" | med)" \
    "$(printf '%s\n' "${ons[@]}" | med)" "$(printf '%s\n' "${ratios[@]}" | med)"
done
