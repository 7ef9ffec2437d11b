/* tests/micro_session.h — in-process sessions of tests/data/micro.yaml for
 * the suites that drive the engine directly (test_offload, test_nvme):
 * open one with overrides, take steps, read the whole model back. */
#ifndef ZT_TESTS_MICRO_SESSION_H
#define ZT_TESTS_MICRO_SESSION_H

#include "coordinator/session.h"

#define MICRO_SESSION_MAX_SETS 12

/* Opens micro.yaml with run.output_dir outdir, checkpoint.dir outdir/ckpt,
 * two micro steps per step and then sets[n_sets] (n_sets at most
 * MICRO_SESSION_MAX_SETS); session_open's status. */
zt_status micro_session_open(struct run_session *s, const char *outdir, const char *const *sets,
                             int n_sets);
/* Optimizer step k (0-based) at lr 3e-3; its loss. Fails the test on an
 * error. */
double micro_session_step(struct run_session *s, long k);
/* The whole model's parameters (malloc'd, n_params floats; the caller
 * frees). Collective under stage 3. */
float *micro_session_params(struct run_session *s);

/* Loads checkpoint `where` (saved after 3 steps) into the open session s,
 * takes steps 4 and 5, and fails the test, naming `what`, unless their
 * losses are want[2] and the parameters then want_params, bit for bit. */
void micro_session_check_resume(struct run_session *s, const char *where, const double want[2],
                                const float *want_params, const char *what);

#endif
