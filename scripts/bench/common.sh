# shellcheck shell=bash
# Sourced by the benchmark scripts once they have set `warm` (the warm-up
# steps median() skips): the environment, a Release build in build/ or
# $ZT_BUILD_DIR ($bin),
# a temporary folder $tmp removed on exit holding lic.tok (the texts in
# /usr/share/common-licenses as a token file), and one BLAS thread per
# rank. The scripts differ only in what they run and tabulate, so the setup
# they share lives here once.
source "$(dirname "${BASH_SOURCE[0]}")/../env.sh"
build_dir=${ZT_BUILD_DIR:-$ZT_ROOT/build} # the GPU check builds into its own
zt_build "$build_dir" >/dev/null
bin=$build_dir/zerotrain
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
"$bin" prepare --out "$tmp/lic.tok" /usr/share/common-licenses >/dev/null
export OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1

# median of column "key" in a metrics file, skipping the $warm warm-up steps
# shellcheck disable=SC2154 # warm is set by the sourcing script
median() {
  grep '"step_ms"' "$1" | tail -n +$((warm + 1)) |
    sed -E "s/.*\"$2\": ([0-9.e+-]+).*/\1/" | sort -g |
    awk '{a[NR]=$1} END {if (NR%2) print a[(NR+1)/2]; else print (a[NR/2]+a[NR/2+1])/2}'
}

# largest value, in MiB, of a per-rank byte count ("total_peak", "rss_peak",
# "activations", ...) in a memory report JSON
max_field() {
  grep -o "\"$2\": [0-9]*" "$1" | awk '{if ($2 > m) m = $2} END {print m / 1048576}'
}
