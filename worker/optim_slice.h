/* worker/optim_slice.h — where a tensor-parallel rank's slice of a tensor
 * lies in the whole tensor, for the optimizers whose statistics are the
 * whole tensor's (Adafactor's factors, AdamW8bit's blocks): a contract of
 * its own, so that those optimizers need nothing of optimizer.c's.
 */
#ifndef ZT_WORKER_OPTIM_SLICE_H
#define ZT_WORKER_OPTIM_SLICE_H

#include <stddef.h>

/* Under tensor parallelism a rank holds a slice of a tensor, and the
 * statistics are the whole tensor's (the engine reduces them over the
 * tensor-parallel ranks too): the slice's elements lie in the whole
 * tensor's index space in runs of `run` elements, `stride` apart, from
 * `first` (rows cut: one run per part; columns cut: one per row). run 0:
 * the piece is of the whole tensor itself. */
struct optimizer_slice {
    size_t first, run, stride;
};

/* The whole tensor's index of slice element s. */
static inline size_t optimizer_slice_index(const struct optimizer_slice *sl, size_t s)
{
    return sl->run ? sl->first + s / sl->run * sl->stride + s % sl->run : s;
}

#endif
