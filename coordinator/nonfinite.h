/* coordinator/nonfinite.h — a step's first non-finite value: found, agreed
 * among the ranks, reported.
 *
 * A step whose gradient norm is not finite (beyond fp16's overflows, which
 * the dynamic loss scaler skips as before) is skipped by the engine on
 * every rank alike: the norm is allreduced, so every rank learns it at the
 * same point, and the gradients are zeroed. A non-finite loss reaches the
 * norm too, through the cross-entropy's gradient. To say where the first
 * non-finite value came from, the step is run again with checks on, which
 * costs nothing on healthy steps: the sampler is a pure function of (seed,
 * step), the parameters did not change, so the re-run computes what the
 * step computed. Its checks, in the order of their phases:
 *
 *   parameter           each unit as the forward borrows it (its fp32 view)
 *   forward activation  each op's output right after the op (worker's
 *                       struct model_probe), in the order computed
 *   loss                the per-token losses of each micro batch
 *   backward gradient   each unit's gradients when its backward is done
 *                       (accumulated over the step's micro batches so far)
 *   after reduction     the rank's share of the reduced gradients
 *                       (shard/shard.h's struct shard_reduced_probe; the
 *                       re-run's engine step only measures, never updates)
 *
 * The first is the least (phase, micro batch, position in the pass, order
 * of the check) found by any rank, a tie going to the lowest rank: two MIN
 * allreduces over the world. Only the rank that found it knows its name
 * (the Hugging Face name of the tensor, formats/hf_weights.h, or of the
 * block and op for an activation) and statistics; it writes the report,
 * <run.output_dir>/nonfinite/step-<STEP>.json (the sample indices its
 * sampler drew for the micro batch, the tensor's element count, NaN and
 * infinity counts, and the minimum, maximum, mean and largest magnitude of
 * its finite values), and it is the rank that prints. A failure to write
 * the report is a warning: every rank must go on alike.
 */
#ifndef ZT_COORDINATOR_NONFINITE_H
#define ZT_COORDINATOR_NONFINITE_H

#include "../report/report.h"
#include "session.h"

/* Re-runs at most this many steps of a run: a run skipping steps by the
 * hundred gets its first reports, not a second pass of every step. */
#define NONFINITE_MAX_DIAGNOSED 10

enum nonfinite_phase {
    NONFINITE_PARAMETER,
    NONFINITE_FORWARD,
    NONFINITE_LOSS,
    NONFINITE_BACKWARD,
    NONFINITE_REDUCED,
    NONFINITE_PHASES
};

/* The phase as reports and messages name it ("forward activation"). */
const char *nonfinite_phase_name(enum nonfinite_phase p);

/* What the re-run found, the same on every rank but where said. */
struct nonfinite_finding {
    int found; /* 0: no rank met a non-finite value */
    int rank;  /* the world rank that met it first */
    enum nonfinite_phase phase;
    int micro;         /* the micro batch, -1 after the reduction */
    char what[512];    /* "forward activation transformer.h.3 attention output: 3
                        * NaN, ...": the finding rank's only, "" elsewhere */
    char report[4096]; /* the report written: the finding rank's only, "" elsewhere */
};

/* Step `step` (0-based) again with the checks on: `rerun` runs its micro
 * steps and engine step as the step did (with `arg`); the engine's hooks,
 * reduced probe and the models' probes are the checks' during it and
 * restored after it. Then the ranks agree on the first non-finite value and
 * its rank writes the report. Collective. Errors: those of the re-run,
 * ZT_ERR_NOMEM, ZT_ERR_COMM. */
zt_status nonfinite_diagnose(struct run_session *s, long step,
                             zt_status (*rerun)(struct run_session *s, long step, void *arg),
                             void *arg, struct nonfinite_finding *out);

/* Test builds: when s->faults has a forward_output hook, s->fault_probe
 * hands it every op output of the session's training forwards and
 * evaluations (micro -1) (set on the models, the pipeline's included);
 * nothing otherwise. */
void nonfinite_fault_probe_attach(struct run_session *s);

#endif
