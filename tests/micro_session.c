/* tests/micro_session.c — see micro_session.h. */
#include "micro_session.h"

#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "coordinator/run_checkpoint.h"
#include "coordinator/train.h"
#include "testutil.h"

zt_status micro_session_open(struct run_session *s, const char *outdir, const char *const *sets,
                             int n_sets)
{
    struct config_override ov[MICRO_SESSION_MAX_SETS + 3];
    char out[600], ckpt[620];
    snprintf(out, sizeof out, "run.output_dir=%s", outdir);
    snprintf(ckpt, sizeof ckpt, "checkpoint.dir=%s/ckpt", outdir);
    ov[0].assignment = out;
    ov[1].assignment = ckpt;
    ov[2].assignment = "gradient_accumulation_steps=2";
    ck_assert_int_le(n_sets, MICRO_SESSION_MAX_SETS);
    for (int i = 0; i < n_sets; i++)
        ov[3 + i].assignment = sets[i];
    struct run_options o = {.config_path = testutil_source_path("tests/data/micro.yaml"),
                            .overrides = ov,
                            .n_overrides = 3 + n_sets,
                            .quiet = 1};
    return session_open(s, &o, 1);
}

double micro_session_step(struct run_session *s, long k)
{
    struct step_record r = {.step = k + 1, .lr = 3e-3};
    ck_assert_int_eq(train_step(s, k, &r), ZT_OK);
    return r.loss;
}

float *micro_session_params(struct run_session *s)
{
    float *p = malloc(s->table.n_params * sizeof(float));
    ck_assert_ptr_nonnull(p);
    ck_assert_int_eq(shard_engine_full_params(&s->engine, p), ZT_OK);
    return p;
}

void micro_session_check_resume(struct run_session *s, const char *where, const double want[2],
                                const float *want_params, const char *what)
{
    ck_assert_int_eq(run_checkpoint_load(s, where, 0), ZT_OK);
    ck_assert_int_eq(s->start_step, 3);
    for (long k = 3; k < 5; k++) {
        double got = micro_session_step(s, k);
        ck_assert_msg(memcmp(&got, &want[k - 3], sizeof got) == 0,
                      "%s: step %ld loss %.17g after resume, %.17g before", what, k + 1, got,
                      want[k - 3]);
    }
    float *got_params = micro_session_params(s);
    ck_assert_msg(memcmp(want_params, got_params, s->table.n_params * sizeof(float)) == 0,
                  "%s: parameters differ after resume", what);
    free(got_params);
}
