/* comm/flight.c — the ring of calls, the groups and the log (flight.h).
 *
 * The ring is an array indexed by id modulo its size, so recording is two
 * stores and no allocation; an id says whether the slot still holds the
 * call a request or the watchdog refers to. Sequence numbers live in the
 * group, not the comm, so a comm destroyed and made again would restart
 * them; groups are registered once per comm and kept to the end, so the log
 * names every group the run had.
 */
#include "flight_impl.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <mpi.h>

#include "../common/atomic_file.h"
#include "../common/clock.h"
#include "../common/json.h"

static const char *const state_names[] = {
    [FLIGHT_ISSUED] = "issued",
    [FLIGHT_WAITING] = "waiting",
    [FLIGHT_DONE] = "done",
    [FLIGHT_FAILED] = "failed",
};

/* "f32", "bf16", ... as the logs write a dtype. */
static const char *flight_dtype_name(enum zt_dtype t)
{
    static const char *const names[] = {
        [ZT_F32] = "f32", [ZT_F64] = "f64", [ZT_BF16] = "bf16", [ZT_F16] = "f16",
        [ZT_I32] = "i32", [ZT_I64] = "i64", [ZT_U8] = "u8"};
    return (unsigned)t < sizeof names / sizeof names[0] ? names[t] : "?";
}

double flight_now(const struct comm_flight *f)
{
    return zt_now_seconds() - f->t0;
}

int flight_group_add(struct comm_flight *f, uint64_t key, const char *name, int size, int rank)
{
    pthread_mutex_lock(&f->mu);
    int g = f->n_groups < FLIGHT_MAX_GROUPS ? f->n_groups++ : FLIGHT_MAX_GROUPS - 1;
    struct flight_group *grp = &f->groups[g];
    if (g == FLIGHT_MAX_GROUPS - 1 && grp->key != 0) {
        /* shared overflow slot: its counts mix groups, so it is named so */
        grp->key = UINT64_MAX;
        snprintf(grp->name, sizeof grp->name, "other");
    } else {
        memset(grp, 0, sizeof *grp);
        grp->key = key;
        snprintf(grp->name, sizeof grp->name, "%s", name);
        grp->size = size;
        grp->rank = rank;
    }
    pthread_mutex_unlock(&f->mu);
    return g;
}

void flight_group_name(struct comm_flight *f, int g, const char *name)
{
    pthread_mutex_lock(&f->mu);
    if (f->groups[g].key != UINT64_MAX)
        snprintf(f->groups[g].name, sizeof f->groups[g].name, "%s", name);
    pthread_mutex_unlock(&f->mu);
}

static struct flight_entry *slot(struct comm_flight *f, uint64_t id)
{
    return &f->ring[(id - 1) % COMM_FLIGHT_ENTRIES];
}

uint64_t flight_begin(struct comm_flight *f, int g, const char *op, enum flight_class cls, int peer,
                      uint64_t bytes, enum zt_dtype t, int blocking)
{
    const double now = flight_now(f);
    pthread_mutex_lock(&f->mu);
    struct flight_group *grp = &f->groups[g];
    uint64_t seq = cls == FLIGHT_COLLECTIVE ? ++grp->entered
                   : cls == FLIGHT_RECV     ? ++grp->recvs
                                            : ++grp->sends;
    uint64_t id = ++f->next_id;
    *slot(f, id) = (struct flight_entry){.id = id,
                                         .seq = seq,
                                         .group = g,
                                         .op = op,
                                         .cls = cls,
                                         .peer = peer,
                                         .blocking = blocking,
                                         .bytes = bytes,
                                         .dtype = t,
                                         .start = now,
                                         .wait_start = blocking ? now : -1.0,
                                         .end = -1.0,
                                         .state = blocking ? FLIGHT_WAITING : FLIGHT_ISSUED};
    if (blocking)
        f->blocked_id = id;
    f->last_move = now;
    pthread_mutex_unlock(&f->mu);
    return id;
}

void flight_wait(struct comm_flight *f, uint64_t id)
{
    const double now = flight_now(f);
    pthread_mutex_lock(&f->mu);
    struct flight_entry *e = slot(f, id);
    if (e->id == id) {
        e->state = FLIGHT_WAITING;
        e->wait_start = now;
    }
    f->blocked_id = id;
    pthread_mutex_unlock(&f->mu);
}

void flight_end(struct comm_flight *f, uint64_t id, zt_status st)
{
    const double now = flight_now(f);
    pthread_mutex_lock(&f->mu);
    struct flight_entry *e = slot(f, id);
    if (e->id == id) {
        e->state = st == ZT_OK ? FLIGHT_DONE : FLIGHT_FAILED;
        e->end = now;
        if (e->cls == FLIGHT_COLLECTIVE)
            f->groups[e->group].completed++;
    }
    if (f->blocked_id == id)
        f->blocked_id = 0;
    f->last_end = now;
    f->last_id = id;
    f->last_move = now;
    pthread_mutex_unlock(&f->mu);
}

static void phase_moved(void *ctx, const struct ledger_phase *p)
{
    struct comm_flight *f = ctx;
    const double now = flight_now(f);
    pthread_mutex_lock(&f->mu);
    if (!f->have_phase || f->phase.kind != p->kind || f->phase.step != p->step)
        f->phase_start = now;
    f->phase = *p;
    f->have_phase = 1;
    f->last_move = now;
    pthread_mutex_unlock(&f->mu);
}

const struct ledger_phase_watch *comm_flight_phase_watch(struct comm_flight *f)
{
    return &f->watch;
}

void flight_phase_describe(char *buf, size_t n, const struct ledger_phase *p)
{
    static const char *const what[] = {
        [LEDGER_PHASE_SETUP] = "setup",
        [LEDGER_PHASE_FORWARD] = "the forward",
        [LEDGER_PHASE_BACKWARD] = "the backward",
        [LEDGER_PHASE_REDUCTION] = "the gradient reduction",
        [LEDGER_PHASE_OPTIMIZER] = "the optimizer step",
        [LEDGER_PHASE_CHECKPOINT] = "a checkpoint write",
        [LEDGER_PHASE_EVALUATION] = "an evaluation",
    };
    const char *w = (unsigned)p->kind < LEDGER_PHASE_COUNT ? what[p->kind] : "?";
    char unit[32] = "";
    if (p->unit >= 0)
        snprintf(unit, sizeof unit, " of unit %d", p->unit);
    snprintf(buf, n, "%s%s at step %ld (micro step %d)", w, unit, p->step, p->micro_step);
}

int flight_entry_get(const struct comm_flight *f, uint64_t id, struct flight_entry *out)
{
    if (id == 0)
        return 0;
    const struct flight_entry *e = &f->ring[(id - 1) % COMM_FLIGHT_ENTRIES];
    if (e->id != id)
        return 0;
    *out = *e;
    return 1;
}

void flight_describe(char *buf, size_t n, const char *op, enum flight_class cls, uint64_t seq,
                     int peer, const char *group, uint64_t bytes, enum zt_dtype t)
{
    char whom[40] = "";
    if (cls != FLIGHT_COLLECTIVE)
        snprintf(whom, sizeof whom, " %s rank %d", cls == FLIGHT_RECV ? "from" : "to", peer);
    else if (peer >= 0)
        snprintf(whom, sizeof whom, " rooted at rank %d", peer);
    snprintf(buf, n, "%s #%llu%s on group %s (%llu B of %s)", op, (unsigned long long)seq, whom,
             group, (unsigned long long)bytes, flight_dtype_name(t));
}

/* ---- the log ---- */

static void put_entry(struct json_text *t, const struct comm_flight *f,
                      const struct flight_entry *e)
{
    json_text_printf(t, "{\"id\": %llu, \"seq\": %llu, \"group\": ", (unsigned long long)e->id,
                     (unsigned long long)e->seq);
    json_text_string(t, f->groups[e->group].name, JSON_ESCAPE_U);
    json_text_printf(t, ", \"op\": \"%s\", \"peer\": ", e->op);
    if (e->peer >= 0)
        json_text_printf(t, "%d", e->peer);
    else
        json_text_puts(t, "null");
    json_text_printf(t, ", \"bytes\": %llu, \"dtype\": \"%s\", \"blocking\": %s, \"start\": ",
                     (unsigned long long)e->bytes, flight_dtype_name(e->dtype),
                     e->blocking ? "true" : "false");
    json_text_real(t, e->start);
    json_text_puts(t, ", \"wait_start\": ");
    json_text_real(t, e->wait_start >= 0 ? e->wait_start : (double)NAN);
    json_text_puts(t, ", \"end\": ");
    json_text_real(t, e->end >= 0 ? e->end : (double)NAN);
    json_text_printf(t, ", \"state\": \"%s\"}", state_names[e->state]);
}

static void put_groups(struct json_text *t, const struct comm_flight *f)
{
    json_text_puts(t, "  \"groups\": [");
    for (int g = 0; g < f->n_groups; g++) {
        const struct flight_group *grp = &f->groups[g];
        json_text_puts(t, g ? ",\n    {\"name\": " : "\n    {\"name\": ");
        json_text_string(t, grp->name, JSON_ESCAPE_U);
        json_text_printf(t,
                         ", \"size\": %d, \"rank\": %d, \"entered\": %llu, \"completed\": %llu, "
                         "\"sends\": %llu, \"recvs\": %llu}",
                         grp->size, grp->rank, (unsigned long long)grp->entered,
                         (unsigned long long)grp->completed, (unsigned long long)grp->sends,
                         (unsigned long long)grp->recvs);
    }
    json_text_puts(t, "\n  ],\n");
}

char *flight_log_json(struct comm_flight *f, const char *reason)
{
    struct json_text t = {0};
    pthread_mutex_lock(&f->mu);
    const double now = flight_now(f);
    json_text_printf(&t, "{\n  \"rank\": %d,\n  \"world\": %d,\n  \"host\": ", f->rank, f->world);
    json_text_string(&t, f->hosts[f->rank], JSON_ESCAPE_U);
    json_text_printf(&t, ",\n  \"pid\": %ld,\n  \"reason\": ", (long)getpid());
    json_text_string(&t, reason ? reason : "", JSON_ESCAPE_U);
    json_text_puts(&t, ",\n  \"started_unix\": ");
    json_text_real(&t, f->wall0);
    json_text_puts(&t, ",\n  \"now\": ");
    json_text_real(&t, now);
    json_text_puts(&t, ",\n  \"timeout_s\": ");
    json_text_real(&t, f->timeout_s);
    json_text_printf(&t, ",\n  \"blocked_in\": ");
    if (f->blocked_id)
        json_text_printf(&t, "%llu", (unsigned long long)f->blocked_id);
    else
        json_text_puts(&t, "null");
    json_text_puts(&t, ",\n  \"phase\": ");
    if (f->have_phase) {
        char phase[160];
        flight_phase_describe(phase, sizeof phase, &f->phase);
        json_text_string(&t, phase, JSON_ESCAPE_U);
    } else {
        json_text_puts(&t, "null");
    }
    json_text_puts(&t, ",\n");
    put_groups(&t, f);
    json_text_puts(&t, "  \"calls\": [");
    uint64_t first = f->next_id > COMM_FLIGHT_ENTRIES ? f->next_id - COMM_FLIGHT_ENTRIES + 1 : 1;
    for (uint64_t id = first; id <= f->next_id; id++) {
        json_text_puts(&t, id == first ? "\n    " : ",\n    ");
        put_entry(&t, f, slot(f, id));
    }
    json_text_puts(&t, "\n  ]\n}\n");
    pthread_mutex_unlock(&f->mu);
    if (t.oom) {
        free(t.p);
        return NULL;
    }
    return t.p;
}

/* mkdir -p of the folder `path` names. */
static zt_status make_dirs(const char *path)
{
    char p[4200];
    snprintf(p, sizeof p, "%s", path);
    for (char *c = p + 1;; c++) {
        if (*c != '/' && *c != '\0')
            continue;
        char saved = *c;
        *c = '\0';
        if (mkdir(p, 0755) != 0 && errno != EEXIST)
            return zt_error_set(ZT_ERR_IO, "cannot create directory %s: %s", p, strerror(errno));
        *c = saved;
        if (!saved)
            return ZT_OK;
    }
}

zt_status comm_flight_write(struct comm_flight *f, const char *reason)
{
    char path[4200];
    if (snprintf(path, sizeof path, "%s/flight", f->dir) >= (int)sizeof path - 32)
        return zt_error_set(ZT_ERR_IO, "%s/flight: path too long", f->dir);
    ZT_TRY(make_dirs(path));
    snprintf(path + strlen(path), 32, "/rank-%d.json", f->rank);
    char *text = flight_log_json(f, reason);
    if (!text)
        return zt_error_set(ZT_ERR_NOMEM, "flight log: out of memory");
    zt_status st = atomic_file_write(path, text, strlen(text));
    free(text);
    return st;
}

/* ---- creation ---- */

/* Every rank's host name, from MPI (gethostname where launched). */
static zt_status exchange_hosts(struct comm_flight *f)
{
    char mine[FLIGHT_HOST_LEN] = "";
    char name[MPI_MAX_PROCESSOR_NAME + 1] = "";
    int len = 0;
    if (MPI_Get_processor_name(name, &len) != MPI_SUCCESS || len <= 0)
        snprintf(name, sizeof name, "?");
    snprintf(mine, sizeof mine, "%s", name);
    f->hosts = calloc((size_t)f->world, sizeof *f->hosts);
    if (!f->hosts)
        return zt_error_set(ZT_ERR_NOMEM, "flight recorder: out of memory for %d host names",
                            f->world);
    if (MPI_Allgather(mine, FLIGHT_HOST_LEN, MPI_CHAR, f->hosts, FLIGHT_HOST_LEN, MPI_CHAR,
                      MPI_COMM_WORLD) != MPI_SUCCESS)
        return zt_error_set(ZT_ERR_COMM, "flight recorder: MPI_Allgather of the host names failed");
    return ZT_OK;
}

zt_status flight_init(const struct comm_flight_config *cfg, struct comm_flight **out)
{
    *out = NULL;
    struct comm_flight *f = calloc(1, sizeof *f);
    if (!f)
        return zt_error_set(ZT_ERR_NOMEM, "flight recorder: out of memory");
    pthread_mutex_init(&f->mu, NULL);
    f->t0 = zt_now_seconds();
    f->wall0 = (double)time(NULL);
    f->timeout_s = cfg->timeout_s;
    f->last_end = -1.0;
    f->watch = (struct ledger_phase_watch){.moved = phase_moved, .ctx = f};
    snprintf(f->dir, sizeof f->dir, "%s", cfg->dir ? cfg->dir : ".");
    MPI_Comm_rank(MPI_COMM_WORLD, &f->rank);
    MPI_Comm_size(MPI_COMM_WORLD, &f->world);
    zt_status st = exchange_hosts(f);
    if (st != ZT_OK) {
        flight_free(f);
        return st;
    }
    *out = f;
    return ZT_OK;
}

void flight_free(struct comm_flight *f)
{
    if (!f)
        return;
    free(f->hosts);
    pthread_mutex_destroy(&f->mu);
    free(f);
}
