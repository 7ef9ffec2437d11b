# Sourced by the scripts: the environment zerotrain runs in under mpirun.
# Open MPI refuses to run as root unless told; containers and CI run as root.
if [ "$(id -u)" -eq 0 ]; then
  export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
fi
# Ranks that wait in a collective yield the core: with more ranks than cores
# busy polling would starve the rank everyone waits for.
export OMPI_MCA_mpi_yield_when_idle=${OMPI_MCA_mpi_yield_when_idle:-1}
ZT_ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
ZT_JOBS=$(nproc 2>/dev/null || echo 2)

# zt_build DIR [cmake args...]: configure (once) and build.
zt_build() {
  local dir=$1; shift
  cmake -S "$ZT_ROOT" -B "$dir" -DCMAKE_BUILD_TYPE=Release "$@" >/dev/null
  cmake --build "$dir" -j "$ZT_JOBS"
}
