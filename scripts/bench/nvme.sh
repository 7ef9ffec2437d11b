#!/usr/bin/env bash
# ZeRO-Infinity's optimizer states on disk against memory: configs/gpt2-124m.yaml
# (fp32, AdamW) at 2 ranks, ZeRO-3, without offload and with
# offload_optimizer {device: nvme} into a folder under $NVME_DIR (default
# /tmp), buffer_size elements a window buffer (default 1e6, 4 buffers).
# Prints the median step time (after one warm-up step), each rank's peak
# resident memory, the ledger's master + optimizer-state peak (the window
# under nvme) and the state file per rank.
# usage: scripts/bench/nvme.sh [STEPS] [BUFFER_SIZE]   (default 3, 1e6)
set -euo pipefail
steps=${1:-3}
buffer=${2:-1e6}
warm=1
source "$(dirname "$0")/common.sh"
nvme=$(mktemp -d "${NVME_DIR:-/tmp}/zt-nvme.XXXXXX")
trap 'rm -rf "$tmp" "$nvme"' EXIT

# per-rank values of a byte count in a memory report, in MiB, "a / b"
per_rank() {
  grep -o "\"$2\": [0-9]*" "$1" | awk '{printf "%s%.0f", NR > 1 ? " / " : "", $2 / 1048576}'
}
# the ledger's master_params + optimizer_states peaks of rank 0, in MiB
states_peak() {
  sed -E 's/.*"ranks": \[//' "$1" |
    grep -o '"master_params": [0-9]*, "optimizer_states": [0-9]*' | head -1 |
    awk '{print ($2 + $4) / 1048576}' | tr -d ,
}

printf '%-22s | %9s | %17s | %14s | %12s\n' offload "ms/step" "peak RSS MiB r0/r1" \
  "states MiB r0" "file MiB r0"
for mode in none nvme; do
  extra=()
  [ $mode = nvme ] && extra=(--set zero_optimization.offload_optimizer.device=nvme
    --set zero_optimization.offload_optimizer.nvme_path="$nvme"
    --set zero_optimization.offload_optimizer.buffer_size="$buffer")
  mpirun --oversubscribe -np 2 "$bin" train configs/gpt2-124m.yaml --quiet --no-progress \
    --set run.steps=$((steps)) --set scheduler.params.total_num_steps=$((steps + 2)) \
    --set run.eval_interval=0 --set run.eval_batches=1 \
    --set zero_optimization.stage=3 --set data.train="$tmp/lic.tok" \
    --set run.output_dir="$tmp/run-$mode" --metrics "$tmp/m-$mode.jsonl" \
    --memory-report "$tmp/mem-$mode.json" "${extra[@]}" >"$tmp/log-$mode" 2>&1 ||
    { cat "$tmp/log-$mode"; exit 1; }
  ms=$(median "$tmp/m-$mode.jsonl" step_ms)
  rss=$(per_rank "$tmp/mem-$mode.json" rss_peak)
  st=$(states_peak "$tmp/mem-$mode.json")
  file=$(grep -o '"nvme_file_bytes": [0-9]*' "$tmp/mem-$mode.json" | head -1 |
    awk '{print $2 / 1048576}')
  label=$mode
  [ $mode = nvme ] && label="nvme, buffer $buffer"
  printf '%-22s | %9.0f | %17s | %14.1f | %12.1f\n' "$label" "$ms" "$rss" "$st" "${file:-0}"
done
