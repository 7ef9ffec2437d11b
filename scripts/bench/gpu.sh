#!/usr/bin/env bash
# Training on the GPU: tokens/s, model FLOP utilisation and per-rank memory
# for configs/small.yaml, configs/llama-small.yaml and GPT-2 124M's shape
# (configs/gpt2-124m.yaml) in bf16 on one rank, and the share of ZeRO-3's
# communication the overlap hides at 2 ranks (the exposed wait with
# zero_optimization.overlap_comm on, against off, back to back).
#
# MFU = model GFLOP/s (the metrics' "gflops", forward + backward, 6N per
# token plus attention) over PEAK_TFLOPS, the card's dense bf16 peak
# (default 989: an H100 SXM; 989 for the H200 too). Medians over the timed
# steps after `warm` warm-up steps. Needs a CUDA device; on a machine
# without one it says so and exits 77.
# usage: scripts/bench/gpu.sh [STEPS]   (default 30)
set -euo pipefail
steps=${1:-30}
warm=5
peak=${PEAK_TFLOPS:-989}
source "$(dirname "$0")/common.sh"

if ! command -v nvidia-smi >/dev/null || ! nvidia-smi -L >/dev/null 2>&1; then
  echo "SKIP: no CUDA device"
  exit 77
fi

run() { # np config out extra...
  local np=$1 cfg=$2 out=$3
  shift 3
  mpirun --oversubscribe -np "$np" "$bin" train "configs/$cfg.yaml" --quiet --no-progress \
    --set device=cuda --set run.steps=$((steps + warm)) --set run.eval_interval=0 \
    --set run.eval_batches=1 --set data.train="$tmp/lic.tok" --set run.output_dir="$tmp/$out" \
    --memory-report "$tmp/$out.mem.json" --metrics "$tmp/$out.jsonl" "$@" \
    >"$tmp/$out.log" 2>&1 || { cat "$tmp/$out.log"; exit 1; }
}

printf '%-12s %5s | %9s %11s %9s %6s | %12s %12s\n' config ranks "ms/step" "tokens/s" \
  "TFLOP/s" "MFU" "peak MiB/rk" "reserved MiB"
for cfg in small llama-small gpt2-124m; do
  run 1 "$cfg" "$cfg" --set bf16.enabled=true
  ms=$(median "$tmp/$cfg.jsonl" step_ms)
  tps=$(median "$tmp/$cfg.jsonl" tokens_per_s)
  gf=$(median "$tmp/$cfg.jsonl" gflops)
  peak_mib=$(max_field "$tmp/$cfg.mem.json" total_peak)
  reserved=$(max_field "$tmp/$cfg.mem.json" reserved)
  awk -v c="$cfg" -v ms="$ms" -v t="$tps" -v g="$gf" -v p="$peak" -v m="$peak_mib" \
    -v r="$reserved" 'BEGIN {printf "%-12s %5d | %9.2f %11.0f %9.2f %5.1f%% | %12.1f %12.1f\n",
      c, 1, ms, t, g / 1000, 100 * g / 1000 / p, m, r}'
done

echo
echo "ZeRO-3 at 2 ranks (GPT-2 124M shape, bf16): exposed communication wait per step"
printf '%-12s | %12s %12s | %8s\n' overlap_comm "ms/step" "wait ms" "hidden"
for ov in false true; do
  run 2 gpt2-124m "ov-$ov" --set bf16.enabled=true --set zero_optimization.stage=3 \
    --set zero_optimization.overlap_comm=$ov
done
w_off=$(median "$tmp/ov-false.jsonl" comm_wait_ms)
w_on=$(median "$tmp/ov-true.jsonl" comm_wait_ms)
for ov in false true; do
  awk -v o=$ov -v ms="$(median "$tmp/ov-$ov.jsonl" step_ms)" \
    -v w="$(median "$tmp/ov-$ov.jsonl" comm_wait_ms)" -v off="$w_off" \
    'BEGIN {printf "%-12s | %12.2f %12.2f | %7.1f%%\n", o, ms, w,
      off > 0 ? 100 * (1 - w / off) : 0}'
done
echo "(hidden = 1 - exposed wait with overlap / exposed wait without; w_on=$w_on ms)"
