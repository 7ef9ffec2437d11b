/* common/module.h — parts of zerotrain built as shared objects and loaded
 * on first use, as Open MPI loads its components.
 *
 * Why: the CUDA backends link the CUDA runtime, cuBLAS, cuBLASLt and NCCL,
 * hundreds of MB that the dynamic loader maps and relocates at every
 * process start, GPU or not (0.5 s of each rank's start-up on a CPU run).
 * Built as modules and opened only when a run asks for a GPU, they cost a
 * CPU run nothing.
 *
 * A module exports constant tables (data symbols) and resolves what it
 * calls of the rest of zerotrain against the executable that loads it:
 * executables are linked with their symbols exported (CMake's
 * ENABLE_EXPORTS). An executable holds only the code it calls, so each
 * loader names what its module calls that nothing else may (its "imports"
 * table), and a module calls only its own folder and those below it. A
 * module is looked for, in order, in $ZT_MODULE_DIR, beside the
 * executable, and in the build tree it was built in.
 *
 * Nothing here is cached: the dynamic loader keeps a loaded object and
 * hands it back at the next open, so asking again is cheap. A module is
 * never unloaded (its tables are used until exit).
 */
#ifndef ZT_COMMON_MODULE_H
#define ZT_COMMON_MODULE_H

#include <stddef.h>

/* The modules there are, each loaded by the folder it belongs to. */
#define ZT_MODULE_CUDA      "zt_cuda.so"      /* worker/cuda/: memory and ops */
#define ZT_MODULE_CUDA_COMM "zt_cuda_comm.so" /* comm/: the CUDA stager and NCCL */

/* The table `symbol` of module `name` (a file name such as "zt_cuda.so"),
 * loading the module if it is not loaded yet. Every table a module exports
 * starts with a size_t holding its own sizeof, which must equal `size`: a
 * module built from other sources is refused, not called. Returns >= 0 and
 * sets *out, or -1 with the reason (not found where it looked, the dynamic
 * loader's message, the size) written to why. Local; thread-safe as
 * dlopen is. */
int zt_module_table(const char *name, const char *symbol, size_t size, const void **out, char *why,
                    size_t n);

#endif
