#!/usr/bin/env bash
# mpirun that ends when the job has ended, even when a host dropped off.
#
# When zerotrain's watchdog ends a job (comm.timeout_s; docs/guide/
# troubleshooting.md), every rank that can still act exits 1 and mpirun
# starts its abort. If a host's link is down, Open MPI 4's mpirun then waits
# for that host's daemon, which cannot answer: it stays in "abort is already
# in progress" until TCP gives up (many minutes), holding the allocation.
# Open MPI has no setting that bounds that wait (its out-of-band keepalive
# does not run while the kill it sent is unacknowledged), so this wrapper
# does: once a line of the job's stderr says the job is over (zerotrain's
# "zerotrain: error: ..." or mpirun's own "... has been aborted"), it gives
# mpirun ZT_LAUNCH_GRACE_S seconds (default 2) to finish by itself, then
# kills it (interrupting it instead only makes Open MPI 4.1's mpirun crash
# in PMIx_Finalize). Reachable daemons exit when they lose mpirun; the
# unreachable host's are the batch system's to clean up, as with any lost
# node.
#
# usage: scripts/launch.sh [mpirun arguments...]
#   runs ${ZT_MPIRUN:-mpirun} with the arguments; stdout passes through,
#   stderr is copied line by line. Exits with mpirun's status, or 1 when it
#   had to end mpirun (never 0 then).
set -uo pipefail

grace=${ZT_LAUNCH_GRACE_S:-2}
dir=$(mktemp -d "${TMPDIR:-/tmp}/zt-launch.XXXXXX") || exit 1
trap 'rm -rf "$dir"' EXIT
mkfifo "$dir/stderr"

# Copies stderr and notes when the job is over (the file "over" appears).
copy_stderr() {
  local line
  while IFS= read -r line; do
    printf '%s\n' "$line" >&2
    case $line in
      "zerotrain: error: "* | *"has been aborted"*) : >"$dir/over" ;;
    esac
  done <"$dir/stderr"
}
copy_stderr &
copier=$!

"${ZT_MPIRUN:-mpirun}" "$@" 2>"$dir/stderr" &
pid=$!
# Ctrl-C and scheduler signals reach mpirun as they would without the wrapper.
trap 'kill -INT $pid 2>/dev/null' INT
trap 'kill -TERM $pid 2>/dev/null' TERM

ended=0 waited=0 # tenths of a second since the job was over
while kill -0 "$pid" 2>/dev/null; do
  if [ -e "$dir/over" ]; then
    if [ "$waited" -ge $((grace * 10)) ] && [ "$ended" -eq 0 ]; then
      echo "scripts/launch.sh: the job ended $grace s ago but mpirun did not (a host's daemon" \
        "does not answer): mpirun killed" >&2
      kill -KILL "$pid" 2>/dev/null
      ended=1
    fi
    waited=$((waited + 1))
  fi
  sleep 0.1
done
wait "$pid" 2>/dev/null # (bash would report a kill it made itself)
status=$?
# the copier ends once every writer of the pipe is gone; an unreachable
# host's daemon may hold it open: 2 s at most
for _ in $(seq 20); do
  kill -0 "$copier" 2>/dev/null || break
  sleep 0.1
done
kill "$copier" 2>/dev/null
wait "$copier" 2>/dev/null
if [ "$ended" -eq 1 ]; then
  exit 1
fi
exit "$status"
