#!/usr/bin/env bash
# The device check of the CUDA path, run on a lent GPU machine in the
# repository root with .device carried (scripts/device/pack.sh fills it):
# installs the carried packages without overwriting any file the machine
# has, builds zerotrain with CUDA for that GPU, runs the GPU suites
# (test_gpu: device memory and NCCL; test_gpu_ops: every kernel, fp32 and
# 16-bit, against the CPU backend; test_gpu_train: whole runs against the
# CPU's losses) and the GPU benchmark, and leaves the logs in $OUT (or
# ./.device/out). `ops` builds and runs the op harness alone, the shortest
# check of a kernel change.
# usage: scripts/device/gpu_check.sh [ops|tests|bench|all]   (default all)
set -uo pipefail
what=${1:-all}
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
out=${OUT:-$root/.device/out}
mkdir -p "$out"
cd "$root"
# ops: the harness and test_output_json, which its ctest fixture runs last
targets=() built=zerotrain
if [ "$what" = ops ]; then
  targets=(--target test_gpu_ops test_output_json) built=tests/test_gpu_ops
fi

install_carried() {
  local stage=/tmp/ztdeps
  rm -rf "$stage" && mkdir -p "$stage"
  for f in .device/debs/*.deb; do dpkg -x "$f" "$stage"; done
  cp -an "$stage"/. / # never overwrite what the machine has
  local a=x86_64-linux-gnu
  # the links Debian's alternatives would have made
  for t in mpirun mpiexec mpicc; do
    [ -e /usr/bin/$t ] || ln -s /usr/bin/$t.openmpi /usr/bin/$t
  done
  [ -e /usr/include/$a/cblas.h ] || ln -s openblas-openmp/cblas.h /usr/include/$a/cblas.h
  [ -e /usr/bin/pkg-config ] || ln -s pkgconf /usr/bin/pkg-config
  ldconfig
}

{
  echo "== machine"
  nvidia-smi -L
  nvcc --version | tail -2
  install_carried
  mpirun --version | head -1
  echo "== build"
  arch=$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader | head -1 | tr -d .)
  cmake -S . -B build-gpu -DCMAKE_BUILD_TYPE=Release -DZT_CUDA=ON \
    -DCMAKE_CUDA_ARCHITECTURES="${arch:-90}" >/dev/null &&
    cmake --build build-gpu -j "$(nproc)" "${targets[@]}" 2>&1 |
    grep -E "error|warning|Error" || true
} 2>&1 | tee "$out/setup.log"
[ -x "build-gpu/$built" ] || { echo "build failed: see setup.log"; exit 1; }

export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
rc=0
if [ "$what" = ops ]; then
  (cd build-gpu && ctest -R "^test_gpu_ops" --output-on-failure --timeout 600) \
    >"$out/gpu_ops.log" 2>&1 || rc=1
  tail -15 "$out/gpu_ops.log"
  exit $rc
fi
if [ "$what" != bench ]; then
  (cd build-gpu && ctest -R "test_gpu|test_backend" --output-on-failure --timeout 600) \
    >"$out/gpu_tests.log" 2>&1 || rc=1
  tail -15 "$out/gpu_tests.log"
fi
if [ "$what" != tests ]; then
  ZT_BUILD_DIR=build-gpu scripts/bench/gpu.sh "${STEPS:-20}" >"$out/gpu_bench.txt" 2>&1 || rc=1
  cat "$out/gpu_bench.txt"
fi
exit $rc
