#!/usr/bin/env bash
# Packs what a GPU machine lent for a device check lacks: the Debian
# packages of zerotrain's build and run dependencies (Open MPI, libyaml,
# Check, OpenBLAS's OpenMP build, pkg-config), downloaded here into
# .device/debs, the folder a device run carries. The GPU machines reach no
# package registry, so everything the build needs travels with the tree
# (about 20 MiB). Run once per checkout, on the build machine:
#   scripts/device/pack.sh
# then run scripts/device/gpu_check.sh there with .device carried.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
out=$root/.device/debs
mkdir -p "$out"
packages=(
  openmpi-bin openmpi-common libopenmpi3 libopenmpi-dev libhwloc15 libevent-core-2.1-7
  libevent-pthreads-2.1-7 libpmix2 libfabric1 libucx0 libibverbs1 librdmacm1 libnl-3-200
  libnl-route-3-200 libnuma1 libpsm2-2 libpsm-infinipath1 libmunge2 libltdl7 libpciaccess0
  libyaml-0-2 libyaml-dev check libsubunit0 libsubunit-dev libopenblas0-openmp libopenblas-dev
  libopenblas-openmp-dev libopenblas0 libgfortran5 libquadmath0 pkgconf pkgconf-bin libpkgconf3
  libdnnl2 libdnnl-dev ocl-icd-libopencl1
)
(cd "$out" && apt-get download "${packages[@]}" >/dev/null 2>&1) || {
  echo "pack.sh: apt-get download failed (needs Debian's package lists: apt-get update)" >&2
  exit 1
}
du -sh "$out"
