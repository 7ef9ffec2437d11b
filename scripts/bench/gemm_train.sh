#!/usr/bin/env bash
# Training throughput by GEMM path, 2 ranks x 1 thread, back to back in one
# run: configs/small.yaml and GPT-2 124M (configs/gpt2-124m.yaml, vocab
# 50257, seq 256 at micro batch 2 and seq 1024 at micro batch 1) at ZeRO
# stages 0 and 3, with the products
# on OpenBLAS (ZT_CPU_GEMM=openblas, whatever kernel OpenBLAS picks here or
# OPENBLAS_CORETYPE names) and on oneDNN, fp32 and bf16; PyTorch DDP fp32
# and with bf16 autocast beside them (python3-torch, Debian's; skipped when
# absent). Medians of the timed steps; tokens/s and the ratio to PyTorch's
# best. The CPU's features and each path's kernel are printed above the
# table. A second table sets the matmul phase of each bf16 run (stage 0,
# `--profile`, rank 0) against the one-thread oneDNN bf16 ceiling that
# gemm_bench measures at the same shapes in the same run: the products'
# FLOPs are 6 x tokens x (12 L C^2 + V C) per rank and step.
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

# shape MODEL: sets cfg L H C T B V extra for a row of the tables
shape() {
  case $1 in
  small)
    cfg=small; L=$(cfg_value small n_layer); H=$(cfg_value small n_head)
    C=$(cfg_value small n_embd); T=$(cfg_value small seq_len)
    B=$(cfg_value small train_micro_batch_size_per_gpu); V=256; extra=() ;;
  gpt2-124m) # the config is this shape already
    cfg=gpt2-124m; L=12; H=12; C=768; T=256; B=2; V=50257; extra=() ;;
  gpt2-1024)
    cfg=gpt2-124m; L=12; H=12; C=768; T=1024; B=1; V=50257
    extra=(--set data.seq_len=1024 --set train_micro_batch_size_per_gpu=1) ;;
  esac
}

models=(small gpt2-124m gpt2-1024)
printf '%-10s %-26s %10s %8s  %s\n' model run tokens/s "vs torch" kernel
for model in "${models[@]}"; do
  shape $model
  targs=(--n-layer $L --n-head $H --n-embd $C --seq-len $T --block-size $T --vocab $V --micro-batch $B)
  t32=$(torch_run "${targs[@]}")
  t16=$(torch_run "${targs[@]}" --bf16)
  best=$t32
  [ "$t16" != - ] && best=$(awk -v a="$t32" -v b="$t16" 'BEGIN {print (b > a || a == "-") ? b : a}')
  for stage in 0 3; do
    for run in "openblas fp32" "onednn fp32" "onednn bf16"; do
      read -r lib prec <<<"$run"
      read -r tps kernel <<<"$(zt $cfg "$lib" "$prec" $stage "${extra[@]}")"
      row $model "zerotrain $prec st$stage $lib" "$tps" "$best" "$kernel"
    done
  done
  [ "$t32" != - ] && row $model "torch DDP fp32" "$t32" "$best" ""
  [ "$t16" != - ] && row $model "torch DDP bf16 autocast" "$t16" "$best" ""
done
[ $have_torch = 1 ] || echo "(python3-torch not installed: PyTorch rows skipped)"

# The ceiling: gemm_bench's one-thread oneDNN bf16 GFLOP/s, the median over
# a model's rows (forward, input and weight gradients).
ceil=$("$build_dir/worker/gemm_bench" 5)
ceiling() { # gemm_bench row prefix
  awk -v p="$1" '$1 == p && NF >= 14 {print $(NF - 6); print $(NF - 3); print $NF}' <<<"$ceil" | sort -g |
    awk '{a[NR]=$1} END {if (NR%2) print a[(NR+1)/2]; else print (a[NR/2]+a[NR/2+1])/2}'
}
echo
echo "# matmul phase of zerotrain bf16 st0 onednn (--profile, rank 0, $((steps + warm)) steps)"
printf '%-10s %12s %10s %10s %12s %8s\n' model "GFLOP/step" "matmul s" GFLOP/s "ceiling" share
for model in "${models[@]}"; do
  shape $model
  zt $cfg onednn bf16 0 "${extra[@]}" --profile >/dev/null
  mm=$(sed -nE 's/^ +matmul +([0-9.]+) s.*/\1/p' "$tmp/log" | head -1)
  prefix=small; [ $cfg = gpt2-124m ] && prefix=gpt2
  awk -v L=$L -v C=$C -v V=$V -v T=$T -v B=$B -v n=$((steps + warm)) -v mm="$mm" \
    -v cl="$(ceiling $prefix)" -v m=$model 'BEGIN {
      f = 6 * B * T * (12 * L * C * C + V * C) / 1e9; r = f * n / mm
      printf "%-10s %12.1f %10.3f %10.1f %12.1f %7.0f%%\n", m, f, mm, r, cl, 100 * r / cl }'
done
