#!/usr/bin/env bash
# Builds the libFuzzer targets of tests/fuzz (clang, ZT_FUZZ=ON, in
# build-fuzz/) and runs each for SECONDS of wall time, one after the other
# under nice, then prints a table: executions, CPU seconds, new findings,
# corpus size.
#
#   scripts/fuzz.sh [SECONDS] [TARGET...]   (default 60 s, every target)
#   scripts/fuzz.sh --keep [TARGET...]      keep what the runs found in tests/fuzz/grown/T
#   scripts/fuzz.sh --check                 exit 0 when clang's libFuzzer is here
#
# Each target starts from its seeds, what earlier runs kept and its
# findings (tests/fuzz/corpus/T, tests/fuzz/grown/T, tests/fuzz/regressions/T)
# and from what earlier runs found (build-fuzz/work/T/corpus), and adds new
# inputs only to that work folder. --keep merges the work folder into
# tests/fuzz/grown/T with -merge=1: only the inputs that reach code the
# folder's others do not, so it stays small; every build replays it. A
# crash, leak, timeout (10 s an input) or out-of-memory (2 GiB) is written
# to build-fuzz/work/T/findings/ and makes the script exit 1: fix it, then
# keep the input in tests/fuzz/regressions/T so that every build's ctest
# replays it.
set -euo pipefail
source "$(dirname "$0")/env.sh"
cc=${ZT_FUZZ_CC:-clang}

have_libfuzzer() {
  command -v "$cc" >/dev/null 2>&1 &&
    printf 'int LLVMFuzzerTestOneInput(const char *d, unsigned long n) { return d && n; }\n' |
      "$cc" -x c -fsanitize=fuzzer -o /dev/null - >/dev/null 2>&1
}
if [ "${1:-}" = --check ]; then
  have_libfuzzer
  exit
fi
have_libfuzzer || {
  echo "scripts/fuzz.sh: $cc with libFuzzer not found (scripts/deps.sh installs clang)" >&2
  exit 2
}
keep=0
if [ "${1:-}" = --keep ]; then
  keep=1
  shift
else
  seconds=${1:-60}
  shift || true
fi
build=$ZT_ROOT/build-fuzz
CC=$cc cmake -S "$ZT_ROOT" -B "$build" -DZT_FUZZ=ON -DCMAKE_BUILD_TYPE=Release >/dev/null
nice -n 10 cmake --build "$build" -j "$ZT_JOBS" >/dev/null
targets=("$@")
[ ${#targets[@]} -gt 0 ] || targets=($(cd "$ZT_ROOT/tests/fuzz/corpus" && ls))
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1}
if [ $keep = 1 ]; then
  printf '%-16s %7s %9s\n' target kept bytes
  for t in "${targets[@]}"; do
    grown=$ZT_ROOT/tests/fuzz/grown/$t
    mkdir -p "$grown" "$build/work/$t/corpus"
    nice -n 15 "$build/tests/fuzz/fuzz_$t" -merge=1 -timeout=10 -rss_limit_mb=2048 \
      "$grown" "$build/work/$t/corpus" >"$build/work/$t/merge.log" 2>&1
    printf '%-16s %7s %9s\n' "$t" "$(ls "$grown" | wc -l)" "$(cat "$grown"/* 2>/dev/null | wc -c)"
  done
  exit 0
fi

# Inputs are written to files: in memory where there is /dev/shm.
[ -d /dev/shm ] && [ -w /dev/shm ] && export TMPDIR=/dev/shm
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
status=0
rows=()
for t in "${targets[@]}"; do
  work=$build/work/$t
  mkdir -p "$work/corpus" "$work/findings" "$ZT_ROOT/tests/fuzz/grown/$t"
  before=$(ls "$work/findings" | grep -cv '^slow-unit-' || true)
  TIMEFORMAT=%U+%S
  { time nice -n 15 "$build/tests/fuzz/fuzz_$t" -max_total_time="$seconds" -timeout=10 \
      -rss_limit_mb=2048 -print_final_stats=1 -artifact_prefix="$work/findings/" \
      "$work/corpus" "$ZT_ROOT/tests/fuzz/corpus/$t" "$ZT_ROOT/tests/fuzz/grown/$t" \
      "$ZT_ROOT/tests/fuzz/regressions/$t" \
      >"$work/log" 2>&1 || true; } 2>"$work/cpu"
  after=$(ls "$work/findings" | grep -cv '^slow-unit-' || true)
  execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$work/log" | tail -n 1)
  cpu=$(awk -F+ '{ printf "%.1f", $1 + $2 }' "$work/cpu")
  corpus=$(ls "$work/corpus" | wc -l)
  rows+=("$(printf '%-16s %12s %8s %9s %7s' "$t" "${execs:-?}" "$cpu" $((after - before)) "$corpus")")
  if [ "$after" != "$before" ] || ! grep -q '^Done ' "$work/log"; then
    status=1
    echo "scripts/fuzz.sh: $t: a finding; see $work/log and $work/findings/" >&2
  fi
done
printf '%-16s %12s %8s %9s %7s\n' target executions cpu_s findings corpus
printf '%s\n' "${rows[@]}"
exit $status
