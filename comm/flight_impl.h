/* comm/flight_impl.h — the flight recorder's insides; for comm/ only.
 *
 * flight.c owns the ring of entries, the groups and the log file;
 * watchdog.c owns the thread, the side channel and the recorder's public
 * life (comm_flight_create, _destroy, _leave), on top of flight.c. comm.c
 * records through flight_group_add, flight_begin, flight_wait and
 * flight_end, naming each call itself, so that nothing here depends on
 * comm.c. Everything the watchdog reads is guarded by `mu`; the main thread
 * holds it only to copy a few words in or out, never across a call into
 * MPI.
 */
#ifndef ZT_COMM_FLIGHT_IMPL_H
#define ZT_COMM_FLIGHT_IMPL_H

#include <pthread.h>
#include <stdint.h>

#include "../common/dtype.h"
#include "flight.h"

#define FLIGHT_MAX_GROUPS 64
#define FLIGHT_NAME_LEN   24
#define FLIGHT_HOST_LEN   64

/* A collective counts on its group's sequence; a message on the group's
 * sends or receives. */
enum flight_class { FLIGHT_COLLECTIVE, FLIGHT_SEND, FLIGHT_RECV };

enum flight_state { FLIGHT_ISSUED, FLIGHT_WAITING, FLIGHT_DONE, FLIGHT_FAILED };

/* A group as the recorder knows it: `key` is the same on every member
 * (world: 1; a split: mixed from the parent's key and the color). */
struct flight_group {
    uint64_t key;
    char name[FLIGHT_NAME_LEN];
    int size, rank;              /* of the group, this rank's place in it */
    uint64_t entered, completed; /* collectives on it, this rank */
    uint64_t sends, recvs;       /* point-to-point messages posted */
};

/* One call. `id` is its place in the recorder's history (from 1); the slot
 * ring[(id - 1) % COMM_FLIGHT_ENTRIES] holds it until overwritten. */
struct flight_entry {
    uint64_t id;
    uint64_t seq;   /* collective: #seq on the group; message: #seq per direction */
    int group;      /* index into groups[] */
    const char *op; /* "allreduce", "send", "agree", ...: static storage */
    enum flight_class cls;
    int peer;     /* group rank of the peer or root; -1: none */
    int blocking; /* a blocking call (else non-blocking, waited later) */
    uint64_t bytes;
    enum zt_dtype dtype;
    double start, wait_start, end; /* seconds since the recorder began; end < 0: open */
    enum flight_state state;
};

struct flight_side; /* watchdog.c: the side channel and its thread */

struct comm_flight {
    pthread_mutex_t mu;
    double t0;    /* zt_now_seconds() at creation */
    double wall0; /* seconds since the epoch at creation */
    double timeout_s;
    char dir[4096]; /* the run's output folder */
    int rank, world;
    char (*hosts)[FLIGHT_HOST_LEN]; /* world ranks' host names */
    struct flight_entry ring[COMM_FLIGHT_ENTRIES];
    uint64_t next_id; /* id of the next entry */
    struct flight_group groups[FLIGHT_MAX_GROUPS];
    int n_groups;
    uint64_t blocked_id;       /* the entry this rank is blocked in; 0: none */
    double last_end;           /* when the latest call ended (since t0); < 0: none yet */
    uint64_t last_id;          /* that call */
    struct ledger_phase phase; /* what the rank computes (comm_flight_phase_watch) */
    int have_phase;
    double phase_start; /* when it entered that phase (since t0) */
    double last_move;   /* when it last moved: a call began or ended, or its phase changed */
    struct ledger_phase_watch watch;
    struct flight_side *side; /* NULL without a watchdog */
};

/* Registers a group (under the lock) and returns its index; past
 * FLIGHT_MAX_GROUPS the last slot is shared, named "other". */
int flight_group_add(struct comm_flight *f, uint64_t key, const char *name, int size, int rank);
/* Renames group g (comm_set_name). */
void flight_group_name(struct comm_flight *f, int g, const char *name);
/* Opens an entry for a call on group g and returns its id. A blocking call
 * starts WAITING (the rank is blocked from now on), a non-blocking one
 * ISSUED. Collectives take the group's next sequence number. */
uint64_t flight_begin(struct comm_flight *f, int g, const char *op, enum flight_class cls, int peer,
                      uint64_t bytes, enum zt_dtype t, int blocking);
/* A non-blocking call's comm_wait begins: the rank is blocked in it. */
void flight_wait(struct comm_flight *f, uint64_t id);
/* Closes the entry: DONE on ZT_OK, else FAILED; the rank is no longer
 * blocked. A collective counts as completed on its group. */
void flight_end(struct comm_flight *f, uint64_t id, zt_status st);

/* Copies the entry with this id, if still in the ring (under the lock:
 * callers hold it). Returns 0 when it was overwritten. */
int flight_entry_get(const struct comm_flight *f, uint64_t id, struct flight_entry *out);
/* Writes a call as the messages name it: "allreduce #57 on group world
 * (16 B of f64)", "send #3 to rank 1 on group pipeline (...)". */
void flight_describe(char *buf, size_t n, const char *op, enum flight_class cls, uint64_t seq,
                     int peer, const char *group, uint64_t bytes, enum zt_dtype t);
/* Writes a ledger phase as the messages name it: "the forward of unit 3
 * at step 40 (micro step 0)", "a checkpoint write at step 8 ...". */
void flight_phase_describe(char *buf, size_t n, const struct ledger_phase *p);
/* The log of this rank as JSON text (caller frees); NULL when out of
 * memory. Takes the lock. */
char *flight_log_json(struct comm_flight *f, const char *reason);
/* Seconds since the recorder began. */
double flight_now(const struct comm_flight *f);

/* The recorder without a watchdog: allocated, its clock started, every
 * rank's host name learnt (collective over the world). *out is freed with
 * flight_free. Errors: ZT_ERR_NOMEM, ZT_ERR_COMM. */
zt_status flight_init(const struct comm_flight_config *cfg, struct comm_flight **out);
/* Frees what flight_init made (the side channel must be stopped). */
void flight_free(struct comm_flight *f);

#endif
