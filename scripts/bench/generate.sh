#!/usr/bin/env bash
# Decode tokens/s of zerotrain generate's forward with the key/value cache
# against re-running the whole sequence for each token, at a context
# length (default 512), one thread so the table does not follow the load.
# usage: scripts/bench/generate.sh [CONTEXT [NEW [N_LAYER [N_EMBD]]]]
set -euo pipefail
source "$(dirname "$0")/../env.sh"
zt_build "$ZT_ROOT/build" >/dev/null
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-1} OPENBLAS_NUM_THREADS=1
"$ZT_ROOT/build/worker/generate_bench" "$@"
