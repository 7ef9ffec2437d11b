#!/usr/bin/env bash
# Does 16-bit compute train like fp32? configs/small.yaml at 2 ranks for
# STEPS steps (default 300) in fp32, bf16 and fp16 (with dynamic loss
# scaling), the same data and seed: each 16-bit run's mean |loss - fp32
# loss| over the last 50 steps, and its final validation loss against
# fp32's. Beside it PyTorch's own gap on the same token file: the same
# GPT-2 in fp32 and under bf16 autocast, rank 0's loss step by step (its
# random windows, the same in both runs; python3-torch, skipped when
# absent). The start line of each zerotrain run says what it computed in.
# usage: scripts/bench/precision_gap.sh [STEPS]
set -euo pipefail
steps=${1:-300}
warm=0
source "$(dirname "$0")/common.sh"
last=50

flags=$(grep -m1 "^flags" /proc/cpuinfo | tr ' ' '\n' |
  grep -E '^(avx2|avx512f|avx512_bf16|avx512_fp16|amx_bf16)$' | tr '\n' ' ')
echo "# CPU: $(grep -m1 "model name" /proc/cpuinfo | cut -d: -f2- | sed 's/^ *//'); features: $flags"

# run PREC: per-step losses into $tmp/PREC.loss, the final val loss into $tmp/PREC.val
run() {
  local bf16=false fp16=false
  [ "$1" = bf16 ] && bf16=true
  [ "$1" = fp16 ] && fp16=true
  mpirun --oversubscribe -np 2 "$bin" train configs/small.yaml --no-progress \
    --set run.steps="$steps" --set scheduler.params.total_num_steps="$steps" \
    --set run.eval_interval="$steps" --set data.train="$tmp/lic.tok" \
    --set bf16.enabled=$bf16 --set fp16.enabled=$fp16 --set run.output_dir="$tmp/run" \
    --metrics "$tmp/m.jsonl" >"$tmp/log" 2>&1 || { cat "$tmp/log" >&2; exit 1; }
  echo "# $1: $(grep -m1 -o 'computing in .*' "$tmp/log")"
  grep '"loss"' "$tmp/m.jsonl" | sed -E 's/.*"loss": ([0-9.e+-]+).*/\1/' >"$tmp/$1.loss"
  grep -o '"val_loss": [0-9.e+-]*' "$tmp/m.jsonl" | tail -1 | cut -d' ' -f2 >"$tmp/$1.val"
}

# gap A B: mean |A - B| over the last $last lines of two loss files
gap() {
  paste "$1" "$2" | tail -n "$last" |
    awk '{d = $1 - $2; s += d < 0 ? -d : d} END {printf "%.4f", s / NR}'
}

for p in fp32 bf16 fp16; do run $p; done
printf '%-28s %18s %10s %10s\n' run "mean |loss gap|" "val loss" "val gap"
printf '%-28s %18s %10.4f %10s\n' "zerotrain fp32" - "$(cat "$tmp/fp32.val")" -
for p in bf16 fp16; do
  printf '%-28s %18s %10.4f %10.4f\n' "zerotrain $p" "$(gap "$tmp/$p.loss" "$tmp/fp32.loss")" \
    "$(cat "$tmp/$p.val")" "$(awk -v a="$(cat "$tmp/$p.val")" -v b="$(cat "$tmp/fp32.val")" \
      'BEGIN {d = a - b; print d < 0 ? -d : d}')"
done

if /usr/bin/python3 -c 'import torch' 2>/dev/null; then
  cfg() { sed -nE "s/^ *$1: *([0-9]+).*/\1/p" "$ZT_ROOT/configs/small.yaml" | head -1; }
  for p in fp32 bf16; do
    extra=()
    [ $p = bf16 ] && extra=(--bf16)
    mpirun --oversubscribe -np 2 /usr/bin/python3 "$ZT_ROOT/scripts/bench/torch_gpt2.py" \
      --tokens "$tmp/lic.tok" --steps "$steps" --warmup 0 --no-checksum \
      --n-layer "$(cfg n_layer)" --n-head "$(cfg n_head)" --n-embd "$(cfg n_embd)" \
      --seq-len "$(cfg seq_len)" --micro-batch "$(cfg train_micro_batch_size_per_gpu)" \
      --losses "$tmp/torch_$p.loss" "${extra[@]}" >"$tmp/tlog" 2>&1 || { cat "$tmp/tlog" >&2; exit 1; }
  done
  printf '%-28s %18s %10s %10s\n' "torch bf16 autocast" "$(gap "$tmp/torch_bf16.loss" "$tmp/torch_fp32.loss")" - -
else
  echo "# python3-torch absent: no PyTorch row"
fi
