#!/usr/bin/env bash
# Training throughput by GEMM path, 2 ranks x 1 thread, back to back in one
# run: configs/small.yaml and GPT-2 124M (configs/gpt2-124m.yaml, vocab
# 50257, seq 256, micro batch 2) at ZeRO stages 0 and 3, with the products
# on OpenBLAS (ZT_CPU_GEMM=openblas, whatever kernel OpenBLAS picks here or
# OPENBLAS_CORETYPE names) and on oneDNN, fp32 and bf16; PyTorch DDP fp32
# and with bf16 autocast beside them (python3-torch, Debian's; skipped when
# absent). Medians of the timed steps; tokens/s and the ratio to PyTorch's
# best. The CPU's features and each path's kernel are printed above the
# table.
# usage: scripts/bench/gemm_train.sh [STEPS]   (default 6 timed steps, 2 warm-up)
set -euo pipefail
steps=${1:-6}
warm=2
source "$(dirname "$0")/common.sh"

cpu=$(grep -m1 "model name" /proc/cpuinfo | cut -d: -f2- | sed 's/^ *//')
flags=$(grep -m1 "^flags" /proc/cpuinfo | tr ' ' '\n' |
  grep -E '^(avx2|avx512f|avx512_bf16|amx_bf16|amx_tile)$' | tr '\n' ' ')
echo "# CPU: $cpu; features: $flags; OPENBLAS_CORETYPE=${OPENBLAS_CORETYPE:-(detected)}"

torch_py=/usr/bin/python3
have_torch=0
if "$torch_py" -c 'import torch' 2>/dev/null; then have_torch=1; fi

cfg_value() { sed -nE "s/^ *$2: *([0-9]+).*/\1/p" "$ZT_ROOT/configs/$1.yaml" | head -1; }

# zt CFG GEMM PREC STAGE [--set ...]: "tokens/s kernel-line"
zt() {
  local cfg=$1 lib=$2 prec=$3 stage=$4
  shift 4
  ZT_CPU_GEMM=$lib mpirun --oversubscribe -np 2 -x ZT_CPU_GEMM "$bin" train "configs/$cfg.yaml" \
    --no-progress --set run.steps=$((steps + warm)) --set run.eval_interval=0 \
    --set run.eval_batches=1 --set data.train="$tmp/lic.tok" --set run.output_dir="$tmp/run" \
    --set zero_optimization.stage="$stage" --set bf16.enabled=$([ "$prec" = bf16 ] && echo true || echo false) \
    --metrics "$tmp/m.jsonl" "$@" >"$tmp/log" 2>&1 || { cat "$tmp/log" >&2; exit 1; }
  echo "$(median "$tmp/m.jsonl" tokens_per_s) $(grep -m1 -o 'GEMMs on .*' "$tmp/log" | sed 's/GEMMs on //')"
}

# torch CFG-ARGS... : tokens/s or "-"
torch_run() {
  [ $have_torch = 1 ] || { echo -; return; }
  local out
  out=$(mpirun --oversubscribe -np 2 "$torch_py" "$ZT_ROOT/scripts/bench/torch_gpt2.py" \
    --tokens "$tmp/lic.tok" --steps "$steps" --warmup "$warm" --no-checksum "$@" 2>&1 |
    grep '^torch ms_per_step' || true)
  [ -n "$out" ] && sed -E 's/.*tokens_per_s=([0-9.]+).*/\1/' <<<"$out" || echo -
}

row() { # model, run, tokens/s, best torch, kernel
  local ratio=-
  [ "$4" != - ] && ratio=$(awk -v a="$3" -v b="$4" 'BEGIN {printf "%.2fx", a / b}')
  printf '%-10s %-26s %10.0f %8s  %s\n' "$1" "$2" "$3" "$ratio" "$5"
}

printf '%-10s %-26s %10s %8s  %s\n' model run tokens/s "vs torch" kernel
for model in small gpt2-124m; do
  if [ $model = small ]; then
    L=$(cfg_value small n_layer); H=$(cfg_value small n_head); C=$(cfg_value small n_embd)
    T=$(cfg_value small seq_len); B=$(cfg_value small train_micro_batch_size_per_gpu)
    V=256; extra=()
  else
    L=12; H=12; C=768; T=256; B=2; V=50257
    extra=() # the config is this shape already
  fi
  targs=(--n-layer $L --n-head $H --n-embd $C --seq-len $T --block-size $T --vocab $V --micro-batch $B)
  t32=$(torch_run "${targs[@]}")
  t16=$(torch_run "${targs[@]}" --bf16)
  best=$t32
  [ "$t16" != - ] && best=$(awk -v a="$t32" -v b="$t16" 'BEGIN {print (b > a || a == "-") ? b : a}')
  for stage in 0 3; do
    for run in "openblas fp32" "onednn fp32" "onednn bf16"; do
      read -r lib prec <<<"$run"
      read -r tps kernel <<<"$(zt $model "$lib" "$prec" $stage "${extra[@]}")"
      row $model "zerotrain $prec st$stage $lib" "$tps" "$best" "$kernel"
    done
  done
  [ "$t32" != - ] && row $model "torch DDP fp32" "$t32" "$best" ""
  [ "$t16" != - ] && row $model "torch DDP bf16 autocast" "$t16" "$best" ""
done
[ $have_torch = 1 ] || echo "(python3-torch not installed: PyTorch rows skipped)"
