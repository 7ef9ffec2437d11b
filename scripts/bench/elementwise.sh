#!/usr/bin/env bash
# The engine's elementwise ops on one core, generic C against the
# instruction set ops_cpu_backend() dispatches to (AVX2 where the CPU has
# it), and the old unfused 16-bit update against the fused pass, at a
# rank's shard of GPT-2 124M (42.5M floats) and all of it (85M): GB/s of
# each (medians of REPS runs back to back) and memcpy's as the ceiling.
# About 3.5 GB of memory.
# usage: scripts/bench/elementwise.sh [REPS [N...]]   (default 7)
set -euo pipefail
source "$(dirname "$0")/../env.sh"
zt_build "$ZT_ROOT/build" >/dev/null
"$ZT_ROOT/build/worker/elementwise_bench" "$@"
