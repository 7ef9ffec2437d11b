#!/usr/bin/env bash
# Training throughput of configs/tiny.yaml, configs/small.yaml and the
# Llama family's configs/llama-small.yaml at 1 and 2 ranks: ms per step, tokens/s, achieved GFLOP/s per rank, the machine's
# sgemm ceiling measured in the same run, and PyTorch (DDP over gloo, one
# thread per rank) on the same model, data and optimizer when python3-torch
# is installed. Medians over the timed steps; the first steps are warm-up.
# usage: scripts/bench/throughput.sh [STEPS]   (default 30)
set -euo pipefail
steps=${1:-30}
warm=5
source "$(dirname "$0")/common.sh"

torch_py=/usr/bin/python3
have_torch=0
if "$torch_py" -c 'import torch' 2>/dev/null; then have_torch=1; fi

cfg_value() { sed -nE "s/^ *$2: *([0-9]+).*/\1/p" "$ZT_ROOT/configs/$1.yaml" | head -1; }

printf '%-11s %5s | %10s %11s %9s | %10s %11s | %7s\n' config ranks "ms/step" "tokens/s" \
  "GFLOP/s" "torch ms" "torch tok/s" "ratio"
for cfg in tiny small llama-small; do
  L=$(cfg_value $cfg n_layer); H=$(cfg_value $cfg n_head); C=$(cfg_value $cfg n_embd)
  T=$(cfg_value $cfg seq_len); B=$(cfg_value $cfg train_micro_batch_size_per_gpu)
  family=gpt2; llama_args=""
  if grep -q '^ *family: llama' "$ZT_ROOT/configs/$cfg.yaml"; then
    family=llama
    llama_args="--n-kv-head $(cfg_value $cfg n_kv_head) --intermediate $(cfg_value $cfg intermediate_size)"
  fi
  for np in 1 2; do
    mpirun --oversubscribe -np $np "$bin" train "configs/$cfg.yaml" --quiet \
      --set run.steps=$((steps + warm)) --set run.eval_interval=0 --set run.eval_batches=1 \
      --set data.train="$tmp/lic.tok" --set run.output_dir="$tmp/run" \
      --metrics "$tmp/m.jsonl" >"$tmp/log" 2>&1 || { cat "$tmp/log"; exit 1; }
    ms=$(median "$tmp/m.jsonl" step_ms)
    tps=$(median "$tmp/m.jsonl" tokens_per_s)
    gf=$(median "$tmp/m.jsonl" gflops)
    tms="-"; ttps="-"; ratio="-"
    if [ $have_torch = 1 ]; then
      out=$(mpirun --oversubscribe -np $np "$torch_py" "$ZT_ROOT/scripts/bench/torch_gpt2.py" \
        --tokens "$tmp/lic.tok" --n-layer $L --n-head $H --n-embd $C --seq-len $T \
        --block-size $T --vocab 256 --micro-batch $B --steps $steps --warmup $warm \
        --family $family $llama_args 2>&1 |
        grep '^torch ms_per_step' || true)
      if [ -n "$out" ]; then
        tms=$(sed -E 's/.*ms_per_step=([0-9.]+).*/\1/' <<<"$out")
        ttps=$(sed -E 's/.*tokens_per_s=([0-9.]+).*/\1/' <<<"$out")
        ratio=$(awk -v a="$tps" -v b="$ttps" 'BEGIN {printf "%.2fx", a / b}')
      fi
    fi
    printf '%-11s %5d | %10.1f %11.0f %9.2f | %10s %11s | %7s\n' $cfg $np "$ms" "$tps" "$gf" \
      "$tms" "$ttps" "$ratio"
  done
done
echo
echo "ceiling (one thread, as each rank runs):"
"$ZT_ROOT/build/worker/sgemm_peak" 1024 1024 1024 1
"$ZT_ROOT/build/worker/sgemm_peak" 1024 1536 384 1
[ $have_torch = 1 ] || echo "(python3-torch not installed: PyTorch columns skipped)"
