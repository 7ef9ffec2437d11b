#!/usr/bin/env bash
# Installs what is missing, builds, and trains configs/demo.yaml on 2 ranks
# on the license texts under /usr/share/common-licenses, then draws the run
# (loss, learning rate, gradient norm, throughput, memory per rank and the
# memory timeline of one step) as PNGs in runs/demo/plots.
set -euo pipefail
source "$(dirname "$0")/env.sh"
"$ZT_ROOT/scripts/deps.sh"
echo "building zerotrain..."
zt_build "$ZT_ROOT/build" >/dev/null
cd "$ZT_ROOT"
# mpirun gives every rank a pseudo-terminal, so ask for the progress line
# only when this script's own output is a terminal.
progress=--no-progress
[ -t 1 ] && progress=--progress
run=runs/demo # configs/demo.yaml's run.output_dir
mpirun --oversubscribe -np 2 build/zerotrain train configs/demo.yaml --quiet $progress \
  --memory-timeline "$run/memory_timeline.jsonl" --memory-timeline-steps 0-2 "$@"
build/zerotrain plot "$run"
