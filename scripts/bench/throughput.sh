#!/usr/bin/env bash
# Training throughput of configs/tiny.yaml, configs/small.yaml and the
# Llama family's configs/llama-small.yaml at 1 and 2 ranks: ms per step, tokens/s, achieved GFLOP/s per rank, the machine's
# sgemm ceiling measured in the same run, and PyTorch (DDP over gloo, one
# thread per rank) on the same model, data and optimizer when python3-torch
# is installed. Medians over the timed steps; the first steps are warm-up.
#
# The second table is GPT-2 124M's shape (configs/gpt2-124m.yaml) at seq
# 256, micro batch 2, 2 ranks x 1 thread, fp32: ZeRO stages 0, 1 and 3
# with the byte vocabulary (256) and GPT-2's (50257), tokens/s, model
# GFLOP/s per rank, each stage against stage 0, and peak resident memory
# per rank; PyTorch DDP and ZeroRedundancyOptimizer (ZeRO-1) beside them,
# their peak less what importing torch took. It takes STEPS_124M timed
# steps (default 6) after 2 warm-up steps per run.
# usage: scripts/bench/throughput.sh [STEPS] [small|124m|all]   (default 30 all)
set -euo pipefail
steps=${1:-30}
which=${2:-all}
steps_124m=${STEPS_124M:-6}
warm=5
source "$(dirname "$0")/common.sh"

torch_py=/usr/bin/python3
have_torch=0
if "$torch_py" -c 'import torch' 2>/dev/null; then have_torch=1; fi

cfg_value() { sed -nE "s/^ *$2: *([0-9]+).*/\1/p" "$ZT_ROOT/configs/$1.yaml" | head -1; }

small_table() {
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
}

# One PyTorch run at the 124M shape: "ms tok/s rss_less_import_MiB", or "- - -".
torch_124m() { # vocab, extra flag
  local out
  out=$(mpirun --oversubscribe -np 2 "$torch_py" "$ZT_ROOT/scripts/bench/torch_gpt2.py" \
    --tokens "$tmp/lic.tok" --n-layer 12 --n-head 12 --n-embd 768 --seq-len 256 \
    --block-size 1024 --vocab "$1" --micro-batch 2 --steps "$steps_124m" --warmup 2 \
    --no-checksum $2 2>&1 | grep '^torch ' || true)
  if ! grep -q ms_per_step <<<"$out"; then echo "- - -"; return; fi
  awk '/ms_per_step/ {split($2, a, "="); split($3, b, "=")}
       /rss_peak_mib/ {split($3, c, "="); split($4, d, "=")}
       END {printf "%s %s %.0f\n", a[2], b[2], c[2] - d[2]}' <<<"$out"
}

table_124m() {
  local bwarm=$warm
  warm=2
  printf '%-6s %-11s | %9s %9s %8s %8s %9s | %-6s %9s %9s %7s\n' vocab run "ms/step" \
    "tokens/s" "GFLOP/s" "vs st.0" "rss MiB" torch "tokens/s" "rss MiB" ratio
  for vocab in 256 50257; do
    local ddp="- - -" z1="- - -" base=""
    if [ $have_torch = 1 ]; then
      ddp=$(torch_124m $vocab "")
      z1=$(torch_124m $vocab --zero1)
    fi
    for stage in 0 1 3; do
      mpirun --oversubscribe -np 2 "$bin" train configs/gpt2-124m.yaml --quiet \
        --set model.vocab_size=$vocab --set zero_optimization.stage=$stage \
        --set run.steps=$((steps_124m + warm)) --set data.train="$tmp/lic.tok" \
        --set run.output_dir="$tmp/run" --metrics "$tmp/m.jsonl" \
        --memory-report "$tmp/mem.json" >"$tmp/log" 2>&1 || { cat "$tmp/log"; exit 1; }
      local ms tps gf rss vs against name tt tr ratio
      ms=$(median "$tmp/m.jsonl" step_ms)
      tps=$(median "$tmp/m.jsonl" tokens_per_s)
      gf=$(median "$tmp/m.jsonl" gflops)
      rss=$(max_field "$tmp/mem.json" rss_peak)
      [ -n "$base" ] || base=$tps
      vs=$(awk -v a="$tps" -v b="$base" 'BEGIN {printf "%.2fx", a / b}')
      against=$ddp; name=DDP
      [ $stage = 1 ] && { against=$z1; name=ZeRO-1; }
      read -r _ tt tr <<<"$against"
      ratio=$(awk -v a="$tps" -v b="$tt" 'BEGIN {if (b == "-") print "-"; else printf "%.2fx", a / b}')
      printf '%-6s %-11s | %9.1f %9.0f %8.2f %8s %9.0f | %-6s %9s %9s %7s\n' $vocab \
        "stage $stage" "$ms" "$tps" "$gf" "$vs" "$rss" $name "$tt" "$tr" "$ratio"
    done
  done
  warm=$bwarm
}

[ "$which" = 124m ] || small_table
if [ "$which" != small ]; then
  echo
  table_124m
fi
echo
echo "ceiling (one thread, as each rank runs):"
"$ZT_ROOT/build/worker/sgemm_peak" 1024 1024 1024 1
"$ZT_ROOT/build/worker/sgemm_peak" 1024 1536 384 1
[ "$which" = small ] || "$ZT_ROOT/build/worker/sgemm_peak" 512 2304 768 1
[ $have_torch = 1 ] || echo "(python3-torch not installed: PyTorch columns skipped)"
