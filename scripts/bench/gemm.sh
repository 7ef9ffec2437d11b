#!/usr/bin/env bash
# The GEMM ceiling: GFLOP/s of each CPU path (OpenBLAS with the kernel its
# detection or OPENBLAS_CORETYPE gives, oneDNN fp32, oneDNN bf16) at the
# linear-layer shapes of GPT-2 124M and configs/small.yaml, one thread,
# medians of REPS, each path's kernel and the CPU's features printed above.
# OpenBLAS "as detected": run with OPENBLAS_CORETYPE unset
# (env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE scripts/bench/gemm.sh).
# usage: scripts/bench/gemm.sh [REPS]   (default 7)
set -euo pipefail
source "$(dirname "$0")/../env.sh"
build_dir=${ZT_BUILD_DIR:-$ZT_ROOT/build}
zt_build "$build_dir" >/dev/null
cpu=$(grep -m1 "model name" /proc/cpuinfo | cut -d: -f2- | sed 's/^ *//')
flags=$(grep -m1 "^flags" /proc/cpuinfo | tr ' ' '\n' |
  grep -E '^(avx2|avx512f|avx512_bf16|avx512_vnni|amx_bf16|amx_tile)$' | tr '\n' ' ')
echo "# CPU: $cpu; $(nproc) cores; features: $flags"
echo "# OPENBLAS_CORETYPE=${OPENBLAS_CORETYPE:-(unset: detected)}"
OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 "$build_dir/worker/gemm_bench" "$@"
