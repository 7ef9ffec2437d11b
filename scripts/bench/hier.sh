#!/usr/bin/env bash
# Node-aware ZeRO side by side: flat ZeRO-3, ZeRO++ hpZ (a secondary copy
# of the shards within each node, zero_hpz_partition_size 2) and HSDP
# (sharding within a node, replicas across nodes, shard_group_size 2), at 4
# ranks as 2 simulated nodes x 2 (ZT_SIMULATED_RANKS_PER_NODE=2): ms per
# step (median of the timed steps), the bytes rank 0 sends per step inside
# a node and between nodes (comm.h's ring model; of them the allgathers'
# and the allreduces' inter-node bytes), the peak memory per rank (ledger
# total, largest rank) and what hpZ's secondary copy costs of it.
# usage: scripts/bench/hier.sh [STEPS] [CONFIG]   (default 20, configs/tiny.yaml)
set -euo pipefail
steps=${1:-20}
config=${2:-configs/tiny.yaml}
warm=3
source "$(dirname "$0")/common.sh"
export ZT_SIMULATED_RANKS_PER_NODE=2

# the sum of the byte counts of object "key" in the last step's line, in MiB
step_mib() {
  grep '"step_ms"' "$1" | tail -n 1 | grep -o "\"$2\": {[^}]*}" |
    grep -o ': [0-9]*' | awk '{s += $2} END {printf "%.3f", s / 1048576}'
}
# one kind's bytes of object "key" in the last step's line, in MiB
kind_mib() {
  grep '"step_ms"' "$1" | tail -n 1 | grep -o "\"$2\": {[^}]*}" |
    grep -o "\"$3\": [0-9]*" | awk '{printf "%.3f", $2 / 1048576}'
}

printf '%-6s | %9s | %10s %10s | %12s %12s | %9s %13s\n' variant "ms/step" "intra MiB" \
  "inter MiB" "inter allgat" "inter allred" "peak MiB" "secondary MiB"
for v in "flat:" "hpz:--set zero_optimization.zero_hpz_partition_size=2" \
  "hsdp:--set zero_optimization.shard_group_size=2"; do
  name=${v%%:*}
  read -r -a extra <<<"${v#*:}"
  mpirun --oversubscribe -np 4 "$bin" train "$config" --quiet --no-progress \
    --set run.steps=$((steps + warm)) --set run.eval_interval=0 \
    --set zero_optimization.stage=3 --set data.train="$tmp/lic.tok" \
    --set run.output_dir="$tmp/run" --metrics "$tmp/m.jsonl" \
    --memory-report "$tmp/mem.json" "${extra[@]}" >"$tmp/log" 2>&1 || { cat "$tmp/log"; exit 1; }
  printf '%-6s | %9.1f | %10s %10s | %12s %12s | %9.2f %13.3f\n' "$name" \
    "$(median "$tmp/m.jsonl" step_ms)" "$(step_mib "$tmp/m.jsonl" comm_bytes_intra)" \
    "$(step_mib "$tmp/m.jsonl" comm_bytes_inter)" \
    "$(kind_mib "$tmp/m.jsonl" comm_bytes_inter allgather)" \
    "$(kind_mib "$tmp/m.jsonl" comm_bytes_inter allreduce)" \
    "$(max_field "$tmp/mem.json" total_peak)" "$(max_field "$tmp/mem.json" secondary_params)"
done
