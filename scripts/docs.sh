#!/usr/bin/env bash
# Regenerates the references in docs/reference/ from the zerotrain binary:
#   config.md  zerotrain help --reference config  (config/config_schema.c's table
#              and config/config_deepspeed.c's)
#   cli.md     zerotrain help --reference cli     (cli/cli.c's help texts)
# The binary is $ZT_BUILD_DIR/zerotrain (default build/), brought up to date
# first. test_docs fails while the checked-in files differ from its output.
# usage: scripts/docs.sh
set -euo pipefail
source "$(dirname "$0")/env.sh"
build_dir=${ZT_BUILD_DIR:-$ZT_ROOT/build}
if [[ ! -f $build_dir/CMakeCache.txt ]]; then
  echo "scripts/docs.sh: no build in $build_dir: configure and build zerotrain first" >&2
  echo "  (see README.md, or set ZT_BUILD_DIR)" >&2
  exit 1
fi
cmake --build "$build_dir" --target zerotrain >/dev/null
out=$ZT_ROOT/docs/reference
mkdir -p "$out"
for what in config cli; do
  "$build_dir/zerotrain" help --reference "$what" >"$out/$what.md.new"
  mv "$out/$what.md.new" "$out/$what.md"
  echo "wrote docs/reference/$what.md"
done
