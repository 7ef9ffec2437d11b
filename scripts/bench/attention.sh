#!/usr/bin/env bash
# Fused attention (worker/cpu/attention.c) against the unfused kernel it
# replaced, forward and backward, one thread, GPT-2 124M's shapes (B = 2,
# NH = 12, hs = 64) at T = 256 and 1024 unless other T are given: median
# milliseconds of REPS runs, the two kernels alternating back to back in one
# process, with the CPU's model and vector features beside the table.
# usage: scripts/bench/attention.sh [REPS [T...]]   (default 7)
set -euo pipefail
source "$(dirname "$0")/../env.sh"
zt_build "$ZT_ROOT/build" >/dev/null
export OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1
model=$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ *//' || true)
flags=$(grep -m1 '^flags' /proc/cpuinfo | tr ' ' '\n' |
  grep -xE 'avx2|fma|avx512f|avx512_bf16|amx_bf16|amx_tile|amx_int8' | tr '\n' ' ' || true)
echo "CPU: ${model:-unknown}; features: ${flags:-none of avx2/avx512f/avx512_bf16/amx}"
"$ZT_ROOT/build/worker/attention_bench" "$@"
