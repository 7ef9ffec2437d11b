#!/usr/bin/env bash
# Soak: configs/tiny.yaml for STEPS steps at RANKS ranks (the cosine
# schedule stretched over them), a checkpoint every EVERY steps, run twice:
# once without a break, and once preempted every CYCLE steps (SIGTERM to one
# rank as the metrics reach a multiple of CYCLE: the ranks checkpoint at the
# next step boundary and exit 0) and resumed (run.resume: auto) until it
# reaches STEPS. Both keep the last two checkpoints (checkpoint.keep).
# At the end both final checkpoints are exported and compared byte for byte:
# resuming at the same world size continues bit for bit, so the weights
# must be identical. Prints one table: steps, interruptions, wall time,
# checkpoints written, final loss, and whether the weights are identical;
# exits 1 if they are not.
# usage: scripts/bench/soak.sh [STEPS [CYCLE [EVERY]]]   (defaults 2000, 500, 100)
#        RANKS=4 (env); a quick look: scripts/bench/soak.sh 60 20 10
set -euo pipefail
steps=${1:-2000}
cycle=${2:-500}
every=${3:-100}
ranks=${RANKS:-4}
warm=2
source "$(dirname "$0")/common.sh"
cd "$ZT_ROOT"

# run NAME [extra --set arguments...]: one mpirun of the soak's config into
# $tmp/NAME (metrics $tmp/NAME.jsonl, a resumed run trims and extends it),
# its output appended to $tmp/NAME.log; the caller waits for it.
run() {
  local name=$1
  shift
  mpirun --oversubscribe -np "$ranks" "$bin" train configs/tiny.yaml --quiet --no-progress \
    --set run.steps="$steps" --set scheduler.params.total_num_steps="$steps" \
    --set run.eval_interval=0 --set checkpoint.every="$every" --set checkpoint.keep=2 \
    --set checkpoint.dir="$tmp/$name/ck" --set run.output_dir="$tmp/$name" \
    --metrics "$tmp/$name.jsonl" "$@" >>"$tmp/$name.log" 2>&1
}
done_steps() { grep -v val_loss "$1" 2>/dev/null | grep -c '"loss": ' || true; }
final_loss() { grep -v val_loss "$1" | tail -1 | sed -E 's/.*"loss": ([0-9.e+-]+).*/\1/'; }
# The pid of one zerotrain rank whose command line holds $1, or nothing.
rank_pid() {
  local pid
  for pid in $(pgrep -f -- "$1" || true); do
    [ "$(cat "/proc/$pid/comm" 2>/dev/null)" = zerotrain ] && { echo "$pid"; return; }
  done
}

echo "uninterrupted: $steps steps at $ranks ranks, a checkpoint every $every" >&2
t0=$(date +%s.%N)
run whole || { cat "$tmp/whole.log"; exit 1; }
t1=$(date +%s.%N)

echo "interrupted every $cycle steps, resumed" >&2
breaks=0
while [ "$(done_steps "$tmp/cut.jsonl")" -lt "$steps" ]; do
  start=$(done_steps "$tmp/cut.jsonl")
  target=$(((start / cycle + 1) * cycle))
  run cut &
  pid=$!
  while [ "$target" -lt "$steps" ] && kill -0 "$pid" 2>/dev/null; do
    if [ "$(done_steps "$tmp/cut.jsonl")" -ge "$target" ]; then
      r=$(rank_pid "run.output_dir=$tmp/cut")
      if [ -n "$r" ]; then
        kill -TERM "$r"
        breaks=$((breaks + 1))
        break
      fi
    fi
    sleep 0.1
  done
  wait "$pid" || { cat "$tmp/cut.log"; exit 1; }
  [ "$(done_steps "$tmp/cut.jsonl")" -gt "$start" ] || {
    cat "$tmp/cut.log"
    echo "soak.sh: a resumed run made no progress" >&2
    exit 1
  }
done
t2=$(date +%s.%N)
preempted=$(grep -c 'checkpoint saved (preempted)' "$tmp/cut.log" || true)
[ "$preempted" -eq "$breaks" ] || {
  cat "$tmp/cut.log"
  echo "soak.sh: $breaks signals sent, $preempted preemption checkpoints saved" >&2
  exit 1
}

"$bin" export "$tmp/whole/ck" --out "$tmp/whole.safetensors" >/dev/null
"$bin" export "$tmp/cut/ck" --out "$tmp/cut.safetensors" >/dev/null
same=no
cmp -s "$tmp/whole.safetensors" "$tmp/cut.safetensors" && same=yes

printf '%-13s %6s %13s %9s %12s %10s %17s\n' run steps interruptions "wall s" checkpoints \
  "final loss" "weights identical"
printf '%-13s %6s %13s %9.1f %12s %10s %17s\n' uninterrupted "$(done_steps "$tmp/whole.jsonl")" 0 \
  "$(echo "$t1 - $t0" | bc)" "$(grep -c 'checkpoint saved' "$tmp/whole.log")" \
  "$(final_loss "$tmp/whole.jsonl")" -
printf '%-13s %6s %13s %9.1f %12s %10s %17s\n' interrupted "$(done_steps "$tmp/cut.jsonl")" \
  "$breaks" "$(echo "$t2 - $t1" | bc)" "$(grep -c 'checkpoint saved' "$tmp/cut.log")" \
  "$(final_loss "$tmp/cut.jsonl")" "$same"
[ "$same" = yes ]
