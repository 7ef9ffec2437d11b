#!/usr/bin/env bash
# ZeRO stages side by side: configs/small.yaml at 2 and 4 ranks, stages 0-3:
# ms per step, tokens/s, time waiting on communication, and the measured
# peak memory per rank (ledger total and resident), as one table, with each
# stage's step time over stage 0's at the same world size. Medians over the
# timed steps; the first steps are warm-up.
# usage: scripts/bench/zero_stages.sh [STEPS]   (default 20)
set -euo pipefail
steps=${1:-20}
warm=3
source "$(dirname "$0")/common.sh"

printf '%5s %5s | %9s %10s %12s | %11s %11s | %8s\n' ranks stage "ms/step" "tokens/s" \
  "comm wait ms" "peak MiB" "rss MiB" "vs st. 0"
for np in 2 4; do
  base=""
  for stage in 0 1 2 3; do
    mpirun --oversubscribe -np $np "$bin" train configs/small.yaml --quiet \
      --set run.steps=$((steps + warm)) --set run.eval_interval=0 --set run.eval_batches=1 \
      --set zero_optimization.stage=$stage --set data.train="$tmp/lic.tok" \
      --set run.output_dir="$tmp/run" --metrics "$tmp/m.jsonl" \
      --memory-report "$tmp/mem.json" >"$tmp/log" 2>&1 || { cat "$tmp/log"; exit 1; }
    ms=$(median "$tmp/m.jsonl" step_ms)
    tps=$(median "$tmp/m.jsonl" tokens_per_s)
    wait=$(median "$tmp/m.jsonl" comm_wait_ms)
    peak=$(max_field "$tmp/mem.json" total_peak)
    rss=$(max_field "$tmp/mem.json" rss_peak)
    [ -n "$base" ] || base=$ms
    ratio=$(awk -v a="$ms" -v b="$base" 'BEGIN {printf "%.2fx", a / b}')
    printf '%5d %5d | %9.1f %10.0f %12.1f | %11.1f %11.1f | %8s\n' $np $stage "$ms" "$tps" \
      "$wait" "$peak" "$rss" "$ratio"
  done
done
