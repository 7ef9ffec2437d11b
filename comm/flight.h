/* comm/flight.h — the collective flight recorder and its watchdog.
 *
 * A job that hangs in a collective says nothing: every rank but one waits
 * inside MPI, and the one that is missing (stopped, stuck on a file system,
 * dead with its host) cannot say why. The flight recorder makes every rank
 * keep its last calls and a watchdog turn a stall into one line and an
 * exit.
 *
 * Recording. Every call through comm.h on a comm created with a recorder
 * (comm_config.flight) is an entry in a ring of the last
 * COMM_FLIGHT_ENTRIES calls of this process: its group (by name: "world",
 * "data", "tensor", ...), its sequence number on that group (the n-th
 * collective of the group, counted from 1, the same call on every member;
 * point-to-point messages are numbered per group and direction), the kind,
 * the peer, the bytes and dtype, when it began and ended, and its state:
 *
 *     ISSUED --comm_wait--> WAITING --> DONE | FAILED     (non-blocking)
 *              blocking call: WAITING --> DONE | FAILED
 *
 * Each group also counts the collectives every rank has entered and
 * completed on it, so comparing the counts of two ranks says which of them
 * never entered collective #S. A call costs two clock reads and a mutex
 * taken twice, uncontended (the watchdog takes it once per tick).
 *
 * Watching. With a timeout, a thread per rank checks once per tick (a
 * quarter of the timeout, at most a second) how long the rank has been
 * blocked in one call, and keeps a side channel to world rank 0: one TCP
 * connection per rank, made when the recorder is created, independent of
 * MPI so that it still works while MPI is stuck. Rank 0's thread leads:
 *
 *   - a rank blocked longer than the timeout reports its call to rank 0;
 *     rank 0 asks every rank for its state and waits a few seconds for the
 *     answers. If the call has completed anywhere since, a rank was only
 *     late (a straggler): a warning. Else it names the ranks the call waits
 *     for (the members that never entered a collective, the peer of a
 *     message) with what each is doing: blocked in another call, or busy
 *     in its ledger phase (comm_flight_phase_watch) and for how long, or
 *     not answering (stopped, hung, its host unreachable). If all that
 *     answered are moving (a call or a phase change within the timeout),
 *     the rank is slow, not hung: a warning, and the call is reported
 *     again a timeout later. If nobody is missing, rank 0 looks once more
 *     a second later before blaming the network. Otherwise it prints one
 *     line, and every rank that can still act writes
 *     <dir>/flight/rank-R.json and exits 1;
 *   - a connection that closes without a goodbye is a rank that died
 *     (killed by a signal, crashed): rank 0 names it and its host at once
 *     and every rank exits 1 the same way; when rank 0 itself dies, the
 *     lowest rank of every other host says so;
 *   - a rank whose report rank 0 never answers (rank 0 stopped, or the
 *     link between them down) names rank 0 as not answering, one line per
 *     host, and exits 1.
 *
 * The exit is _exit(1) from the watchdog thread: the main thread is inside
 * MPI and cannot be reached. The launcher (mpirun, srun) then ends what is
 * left of the job. A rank that ends the job itself (comm_world_abort) says
 * goodbye first with comm_flight_leave, so its peers do not report it as
 * dead.
 *
 * Rank 0 holds one socket per rank (the recorder raises the open-file
 * limit to its hard limit when it needs to): a star, fine for thousands of
 * ranks; where the side channel cannot connect a rank, every rank still
 * watches its own calls and, on a stall, reports what it knows alone.
 */
#ifndef ZT_COMM_FLIGHT_H
#define ZT_COMM_FLIGHT_H

#include "../common/ledger.h"
#include "../common/status.h"

/* Entries each rank keeps; older ones are overwritten. */
#define COMM_FLIGHT_ENTRIES 1024

struct comm_flight; /* opaque */

struct comm_flight_config {
    /* Seconds a call may stay blocked before the watchdog ends the job;
     * 0: record only, no watchdog and no side channel. */
    double timeout_s;
    /* The run's output folder: the logs go to <dir>/flight/rank-R.json. */
    const char *dir;
};

/* Starts recording on this rank and, with a timeout, the watchdog and its
 * side channel. Collective over the world (after comm_runtime_init): the
 * ranks exchange their host names and rank 0's address. A side channel
 * that cannot connect is not an error: rank 0 is told which ranks it
 * lacks (*degraded_ranks, may be NULL: their count, 0 on the others).
 * *out is owned by the caller and freed with comm_flight_destroy, after
 * every comm that records into it. Nothing is written until a log is (the
 * flight folder is made then).
 * Errors: ZT_ERR_NOMEM, ZT_ERR_COMM. */
zt_status comm_flight_create(const struct comm_flight_config *cfg, struct comm_flight **out,
                             int *degraded_ranks);
/* Stops the watchdog, says goodbye on the side channel and frees the
 * recorder. Not collective. NULL is a no-op. */
void comm_flight_destroy(struct comm_flight *f);
/* Says goodbye on the side channel and stops the watchdog without freeing
 * anything: for a rank about to end the job itself (comm_world_abort), so
 * that no peer reports it as dead. NULL is a no-op. */
void comm_flight_leave(struct comm_flight *f);

/* A phase watcher for this rank's ledger (common/ledger.h): with it the
 * watchdog can say what a rank that is in no call is computing ("busy for
 * 12.0 s in the forward of unit 3 at step 40"), and tell a rank that moves
 * (its phase changes) from one that is stuck. Owned by f: set it as the
 * ledger's `watch` after comm_flight_create and clear it before
 * comm_flight_destroy. Never NULL. */
const struct ledger_phase_watch *comm_flight_phase_watch(struct comm_flight *f);

/* Writes this rank's log to <dir>/flight/rank-R.json now, with `reason`
 * in it; what the watchdog writes on a stall. Not collective.
 * Errors: ZT_ERR_IO, ZT_ERR_NOMEM. */
zt_status comm_flight_write(struct comm_flight *f, const char *reason);

#endif
