/* comm/watchdog.c — the watchdog thread and its side channel (flight.h).
 *
 * The side channel is a star of TCP connections to world rank 0, made when
 * the recorder starts: rank 0 listens on an ephemeral port of every
 * address, broadcasts the addresses, the port and a token over MPI, and
 * each other rank tries the addresses in turn (non-loopback first) until a
 * HELLO carrying the token is answered by an ACK. From then on nothing of
 * it goes through MPI, which may be the thing that is stuck.
 *
 * Every message is one fixed-size `struct wire_msg` (the ranks run the same
 * binary). The protocol, rank 0 leading:
 *
 *   other rank                           rank 0
 *   HELLO(token) ------------------->    ACK
 *   STALL(call) -------------------->    QUERY to all (LOOKING back to the
 *                                        reporter while an inquiry runs)
 *   STATE(groups, blocked, last, <---    QUERY
 *         phase)                         after the answers or GRACE s:
 *                                        a slow rank: a warning, CLEAR to all;
 *                                        nobody missing: LOOKING, and QUERY
 *                                        again REREAD s later;
 *                                        else the line, ABORT(line) to all
 *   DONE (log written), _exit(1) <---    ABORT; waits for DONEs, _exit(1)
 *   BYE ----------------------------->   (left cleanly: not dead)
 *
 * A connection that ends without BYE is a dead rank: rank 0 names it and
 * sends ABORT; the others, losing rank 0 that way, name rank 0 (a line a
 * host: its lowest rank's, the others waiting for its log). A STALL
 * that rank 0 answers with neither ABORT, LOOKING nor CLEAR within
 * GRACE + 2 s means rank 0 is stopped or unreachable; the reporting rank
 * names it. After a CLEAR, a rank still blocked in the same call reports it
 * again once another timeout has passed.
 *
 * The thread never touches MPI. It reads the recorder under its lock and
 * leaves through _exit(1) after writing this rank's log; the launcher ends
 * whatever is left of the job.
 */
#define _GNU_SOURCE /* pipe2, getifaddrs and the IFF_ flags */
#include "flight_impl.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <mpi.h>

#define MAX_ADDRS   16
#define WIRE_GROUPS 16
#define WIRE_TEXT   1024
#define GRACE_S     3.0 /* rank 0 waits this long for the states */
#define REREAD_S    1.0 /* before blaming the fabric, rank 0 looks again after this */
#define DONE_WAIT_S 3.0 /* rank 0 waits this long for the others' logs */
#define WARNINGS    5   /* slow-rank warnings printed; the rest are counted */
#define CONNECT_S   2.0 /* per address tried */
#define SPEAKER_S   5.0 /* a host's other ranks wait this long for its speaker's log */

enum wire_type {
    W_HELLO = 1,
    W_ACK,
    W_BYE,  /* leaving cleanly */
    W_GONE, /* leaving after a failure this rank reported: the job ends */
    W_STALL,
    W_QUERY,
    W_STATE,
    W_ABORT,
    W_DONE,
    W_LOOKING, /* rank 0 to a reporter: the inquiry goes on (a second look) */
    W_CLEAR    /* rank 0 to all: the stall was a slow rank; keep going */
};

struct wire_call {
    int32_t valid, group_index;
    char group[FLIGHT_NAME_LEN];
    uint64_t group_key, seq, bytes;
    char op[16];
    int32_t cls, peer, dtype;
    double seconds; /* blocked in it so far, or since it ended */
};

struct wire_group {
    uint64_t key, entered, completed;
    int32_t rank, pad; /* this rank's place in the group */
    char name[FLIGHT_NAME_LEN];
};

/* What a rank in no call is doing, from its ledger's phase. */
struct wire_busy {
    int32_t in_phase; /* the ledger reported a phase */
    int32_t kind, unit, micro_step;
    int64_t step;
    double busy_s;  /* in no call for this long (since its latest call ended) */
    double quiet_s; /* since it last moved: a call began or ended, or its phase changed */
};

struct wire_msg {
    uint64_t token;
    int32_t type, rank;
    struct wire_call blocked; /* STALL, STATE: the call this rank is blocked in */
    struct wire_call last;    /* STATE: the latest call that ended */
    struct wire_busy busy;    /* STATE, STALL */
    int32_t n_groups, pad;
    struct wire_group groups[WIRE_GROUPS];
    char text[WIRE_TEXT]; /* ABORT: the line rank 0 printed */
};

struct conn {
    int fd;
    int rank; /* -1 until its HELLO */
    int left; /* said BYE */
    size_t got;
    struct wire_msg in;
};

struct flight_side {
    pthread_t thread;
    int running;
    int wake[2];
    int listen_fd; /* rank 0 */
    uint64_t token;
    struct conn *conns; /* rank 0: accepted ones (n_conns); others: conns[0] is rank 0 */
    int n_conns, cap_conns;
    double tick;
    /* a stall: this rank's own report, or rank 0's inquiry */
    int fired;
    double report_deadline; /* other ranks: when rank 0 counts as not answering */
    int inquiring;          /* rank 0 */
    double inquiry_deadline;
    int stall_rank;
    int round;         /* rank 0: 1, then 2 for the second look */
    double requery_at; /* rank 0: when the second look begins; 0: none */
    int warnings;      /* rank 0: slow-rank warnings so far */
    uint64_t fired_id; /* the call this rank last reported, and when */
    double fired_at;
    struct wire_call stall;
    struct wire_msg *states; /* rank 0: per world rank */
    unsigned char *answered; /* rank 0: per world rank */
};

/* ---- messages ---- */

static void send_msg(int fd, struct wire_msg *m)
{
    if (fd < 0)
        return;
    const char *p = (const char *)m;
    size_t left = sizeof *m;
    while (left > 0) {
        ssize_t k = send(fd, p, left, MSG_NOSIGNAL);
        if (k < 0 && errno == EINTR)
            continue;
        if (k <= 0)
            return; /* the peer is gone or stuck: what it misses it cannot use */
        p += k;
        left -= (size_t)k;
    }
}

static void send_type(struct comm_flight *f, int fd, int type)
{
    struct wire_msg m;
    memset(&m, 0, sizeof m);
    m.token = f->side->token;
    m.type = type;
    m.rank = f->rank;
    send_msg(fd, &m);
}

/* Reads what has arrived; returns 1 when a whole message is in c->in, 0
 * when more is needed, -1 on end of stream or error. */
static int read_some(struct conn *c)
{
    for (;;) {
        ssize_t k = recv(c->fd, (char *)&c->in + c->got, sizeof c->in - c->got, MSG_DONTWAIT);
        if (k < 0 && errno == EINTR)
            continue;
        if (k < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
            return 0;
        if (k <= 0)
            return -1;
        c->got += (size_t)k;
        if (c->got == sizeof c->in) {
            c->got = 0;
            return 1;
        }
    }
}

/* ---- this rank's state ---- */

static void fill_call(const struct comm_flight *f, const struct flight_entry *e, double now,
                      struct wire_call *w)
{
    const struct flight_group *g = &f->groups[e->group];
    memset(w, 0, sizeof *w);
    w->valid = 1;
    w->group_index = e->group;
    memcpy(w->group, g->name, sizeof w->group);
    w->group_key = g->key;
    w->seq = e->seq;
    w->bytes = e->bytes;
    snprintf(w->op, sizeof w->op, "%s", e->op);
    w->cls = (int32_t)e->cls;
    w->peer = e->peer;
    w->dtype = (int32_t)e->dtype;
    w->seconds = e->end >= 0 ? now - e->end : now - e->wait_start;
}

/* This rank's groups, the call it is blocked in and its latest call. */
static void fill_state(struct comm_flight *f, struct wire_msg *m)
{
    struct flight_entry e;
    pthread_mutex_lock(&f->mu);
    const double now = flight_now(f);
    if (flight_entry_get(f, f->blocked_id, &e))
        fill_call(f, &e, now, &m->blocked);
    if (flight_entry_get(f, f->last_id, &e))
        fill_call(f, &e, now, &m->last);
    m->busy.in_phase = f->have_phase;
    m->busy.kind = (int32_t)f->phase.kind;
    m->busy.unit = f->phase.unit;
    m->busy.micro_step = f->phase.micro_step;
    m->busy.step = f->phase.step;
    m->busy.busy_s = f->last_end >= 0 ? now - f->last_end : now;
    m->busy.quiet_s = now - (f->last_move > 0 ? f->last_move : 0);
    m->n_groups = f->n_groups < WIRE_GROUPS ? f->n_groups : WIRE_GROUPS;
    for (int g = 0; g < m->n_groups; g++) {
        m->groups[g].key = f->groups[g].key;
        m->groups[g].entered = f->groups[g].entered;
        m->groups[g].completed = f->groups[g].completed;
        m->groups[g].rank = f->groups[g].rank;
        memcpy(m->groups[g].name, f->groups[g].name, sizeof m->groups[g].name);
    }
    pthread_mutex_unlock(&f->mu);
}

static void describe_call(const struct wire_call *w, char *buf, size_t n)
{
    flight_describe(buf, n, w->op, (enum flight_class)w->cls, w->seq, w->peer, w->group, w->bytes,
                    (enum zt_dtype)w->dtype);
}

/* ---- leaving ---- */

/* Writes this rank's log, tells whoever it is connected to that it is
 * gone (so that nobody reports it as dead) and ends the process with exit
 * status 1. */
_Noreturn static void write_log_and_exit(struct comm_flight *f, const char *reason)
{
    if (comm_flight_write(f, reason) != ZT_OK)
        fprintf(stderr, "zerotrain: rank %d: could not write its flight log: %s\n", f->rank,
                zt_error_message());
    for (int i = 0; i < f->side->n_conns; i++)
        if (f->side->conns[i].fd >= 0)
            send_type(f, f->side->conns[i].fd, W_GONE);
    fflush(stderr);
    fflush(stdout);
    _exit(1);
}

/* Rank 0: the line is printed; every rank that can still act writes its
 * log and exits. Waits up to DONE_WAIT_S for the DONE of those that can
 * (the ranks that answered the inquiry), so that the launcher does not
 * kill them before. */
_Noreturn static void abort_all(struct comm_flight *f, const char *line)
{
    struct flight_side *s = f->side;
    fprintf(stderr, "%s\n", line);
    fflush(stderr);
    /* first: once another rank exits, the launcher may end this one */
    if (comm_flight_write(f, line) != ZT_OK)
        fprintf(stderr, "zerotrain: rank 0: could not write its flight log: %s\n",
                zt_error_message());
    struct wire_msg m;
    memset(&m, 0, sizeof m);
    m.token = s->token;
    m.type = W_ABORT;
    m.rank = f->rank;
    snprintf(m.text, sizeof m.text, "%s", line);
    int waiting = 0;
    for (int i = 0; i < s->n_conns; i++) {
        const int r = s->conns[i].rank;
        if (s->inquiring && r > 0 && !s->answered[r]) {
            send_msg(s->conns[i].fd, &m); /* it did not answer: no DONE to wait for */
            continue;
        }
        if (s->conns[i].fd >= 0 && r >= 0 && !s->conns[i].left) {
            send_msg(s->conns[i].fd, &m);
            waiting++;
        }
    }
    const double until = flight_now(f) + DONE_WAIT_S;
    while (waiting > 0 && flight_now(f) < until) {
        for (int i = 0; i < s->n_conns; i++) {
            struct conn *c = &s->conns[i];
            if (c->fd < 0 || c->rank < 0)
                continue;
            int r = read_some(c);
            if (r < 0 || (r == 1 && c->in.type == W_DONE)) {
                waiting -= !(s->inquiring && c->rank > 0 && !s->answered[c->rank]);
                close(c->fd);
                c->fd = -1;
            }
        }
        struct timespec ts = {0, 10 * 1000 * 1000};
        nanosleep(&ts, NULL);
    }
    fflush(stderr);
    _exit(1);
}

/* ---- rank 0: the inquiry ---- */

static int side_connected(const struct flight_side *s, int r)
{
    for (int i = 0; i < s->n_conns; i++)
        if (s->conns[i].rank == r)
            return s->conns[i].fd >= 0 && !s->conns[i].left;
    return 0;
}

/* Sends a bare message to every rank still connected. */
static void send_all(struct comm_flight *f, int type)
{
    struct flight_side *s = f->side;
    for (int i = 0; i < s->n_conns; i++)
        if (s->conns[i].rank > 0 && s->conns[i].fd >= 0 && !s->conns[i].left)
            send_type(f, s->conns[i].fd, type);
}

/* Asks every rank for its state (rank 0 reads its own). */
static void query_all(struct comm_flight *f)
{
    struct flight_side *s = f->side;
    s->inquiry_deadline = flight_now(f) + GRACE_S;
    memset(s->answered, 0, (size_t)f->world);
    memset(&s->states[0], 0, sizeof s->states[0]);
    fill_state(f, &s->states[0]);
    s->answered[0] = 1;
    send_all(f, W_QUERY);
}

static void start_inquiry(struct comm_flight *f, int from_rank, const struct wire_call *call)
{
    struct flight_side *s = f->side;
    if (s->inquiring)
        return;
    s->inquiring = 1;
    s->round = 1;
    s->requery_at = 0;
    s->stall_rank = from_rank;
    s->stall = *call;
    query_all(f);
}

static int all_answered(const struct comm_flight *f)
{
    for (int r = 0; r < f->world; r++)
        if (!f->side->answered[r] && side_connected(f->side, r))
            return 0;
    return 1;
}

/* Appends to line: a list of ranks by host ("ranks 2, 3 (host h1)"). */
static void append(char *line, size_t n, const char *fmt, const char *a)
{
    size_t len = strlen(line);
    if (len < n)
        snprintf(line + len, n - len, fmt, a);
}

static const struct wire_group *find_group(const struct wire_msg *m, uint64_t key)
{
    for (int g = 0; g < m->n_groups; g++)
        if (m->groups[g].key == key)
            return &m->groups[g];
    return NULL;
}

/* The world rank holding place `grank` of group `key`, among the ranks that
 * answered; -1 when none did. */
static int world_rank_of(const struct comm_flight *f, uint64_t key, int grank)
{
    for (int r = 0; r < f->world; r++) {
        const struct wire_group *g =
            f->side->answered[r] ? find_group(&f->side->states[r], key) : NULL;
        if (g && g->rank == grank)
            return r;
    }
    return -1;
}

static int same_call(const struct wire_call *a, const struct wire_call *b)
{
    return a->valid && b->valid && a->group_key == b->group_key && a->cls == b->cls &&
           a->seq == b->seq;
}

/* Whether the stalled call has completed: on the rank that reported it,
 * or (a collective) on a member of its group while every rank answers.
 * Then the rank that was waiting waited for a straggler, not for a hang.
 * With a rank silent, a member's completion proves nothing: a collective
 * completes on some members before others, and the silent rank may have
 * stopped after its own part, leaving the rest waiting for it. */
static int stall_completed(const struct comm_flight *f)
{
    const struct flight_side *s = f->side;
    int silent = 0, elsewhere = 0;
    for (int r = 0; r < f->world; r++) {
        if (!s->answered[r]) {
            silent = 1;
            continue;
        }
        const struct wire_msg *m = &s->states[r];
        if (r == s->stall_rank && !same_call(&m->blocked, &s->stall))
            return 1;
        const struct wire_group *g = find_group(m, s->stall.group_key);
        if (s->stall.cls == FLIGHT_COLLECTIVE && g && g->completed >= s->stall.seq)
            elsewhere = 1;
    }
    return elsewhere && !silent;
}

/* A call as a rank's state names it: point-to-point waits by their peer's
 * world rank ("waiting for rank 2's message (recv #3 on group pipeline,
 * ...)"), collectives by the call. */
static void describe_wait(const struct comm_flight *f, const struct wire_call *w, char *buf,
                          size_t n)
{
    char call[200];
    describe_call(w, call, sizeof call);
    const int peer = w->cls == FLIGHT_COLLECTIVE ? -1 : world_rank_of(f, w->group_key, w->peer);
    char who[48];
    if (peer >= 0)
        snprintf(who, sizeof who, "rank %d", peer);
    else
        snprintf(who, sizeof who, "rank %d of group %s", w->peer, w->group);
    if (w->cls == FLIGHT_RECV)
        snprintf(buf, n, "waiting for %s's message (%s)", who, call);
    else if (w->cls == FLIGHT_SEND)
        snprintf(buf, n, "waiting for %s to take its message (%s)", who, call);
    else
        snprintf(buf, n, "blocked in %s", call);
}

/* Where a rank is in the run, from its ledger ("in the forward of unit 3
 * at step 40 (micro step 0)"), or "". */
static void describe_phase(const struct wire_busy *b, char *buf, size_t n)
{
    buf[0] = '\0';
    if (!b->in_phase)
        return;
    const struct ledger_phase p = {.kind = (enum ledger_phase_kind)b->kind,
                                   .unit = b->unit,
                                   .step = (long)b->step,
                                   .micro_step = b->micro_step};
    char what[160];
    flight_phase_describe(what, sizeof what, &p);
    snprintf(buf, n, " in %s", what);
}

enum member { MEMBER_CLEAR, MEMBER_MOVING, MEMBER_STUCK };

/* What rank r (which answered) is doing, and whether it moves: a rank
 * blocked in another call is stuck once it has waited longer than the
 * timeout itself (else its own wait is being watched); a rank in no call
 * is busy computing, and stuck once it has not moved (no call, no phase
 * change) for longer than the timeout. */
static enum member describe_member(const struct comm_flight *f, int r, char *why, size_t n)
{
    const struct wire_msg *m = &f->side->states[r];
    char phase[200];
    describe_phase(&m->busy, phase, sizeof phase);
    if (m->blocked.valid) {
        char wait[300];
        describe_wait(f, &m->blocked, wait, sizeof wait);
        snprintf(why, n, "%s for %.1f s%s", wait, m->blocked.seconds, phase);
        return m->blocked.seconds > f->timeout_s ? MEMBER_STUCK : MEMBER_MOVING;
    }
    const int stuck = m->busy.quiet_s > f->timeout_s;
    if (stuck)
        snprintf(why, n, "busy for %.1f s (in no call)%s, not moving for %.1f s", m->busy.busy_s,
                 phase, m->busy.quiet_s);
    else
        snprintf(why, n, "busy for %.1f s (in no call)%s, and moving", m->busy.busy_s, phase);
    return stuck ? MEMBER_STUCK : MEMBER_MOVING;
}

/* The ranks that did not answer, grouped by host. */
static void list_silent(const struct comm_flight *f, char *line, size_t n, int *count)
{
    int r = 0;
    while (r < f->world) {
        if (f->side->answered[r]) {
            r++;
            continue;
        }
        const char *host = f->hosts[r];
        char ranks[256] = "";
        int k = 0;
        for (; r < f->world && !f->side->answered[r] && !strcmp(f->hosts[r], host); r++, k++) {
            size_t len = strlen(ranks);
            snprintf(ranks + len, sizeof ranks - len, "%s%d", k ? ", " : "", r);
        }
        char part[512];
        snprintf(part, sizeof part, "%s%s %s (host %s) %s", *count ? "; " : "",
                 k > 1 ? "ranks" : "rank", ranks, host,
                 k > 1 ? "do not answer" : "does not answer");
        append(line, n, "%s", part);
        *count += k;
    }
    if (*count)
        append(line, n, "%s", " (stopped, hung, or unreachable)");
}

/* The members the stalled call waits for, appended to line: for a
 * collective every member that never entered it, for a message its peer.
 * Counts them and those stuck; *fabric: the peer of a message is blocked
 * in the matching call, so the message itself does not get through. */
static void list_awaited(const struct comm_flight *f, char *line, size_t n, int *count, int *stuck,
                         int *fabric)
{
    const struct flight_side *s = f->side;
    const int p2p = s->stall.cls != FLIGHT_COLLECTIVE;
    const int peer = p2p ? world_rank_of(f, s->stall.group_key, s->stall.peer) : -1;
    for (int r = 0; r < f->world; r++) {
        if (!s->answered[r] || r == s->stall_rank || (p2p && r != peer))
            continue;
        const struct wire_msg *m = &s->states[r];
        const struct wire_group *g = find_group(m, s->stall.group_key);
        if (!g || (!p2p && g->entered >= s->stall.seq))
            continue; /* not a member, or entered it */
        if (p2p && m->blocked.valid && m->blocked.group_key == s->stall.group_key &&
            m->blocked.cls != FLIGHT_COLLECTIVE && m->blocked.cls != s->stall.cls &&
            world_rank_of(f, m->blocked.group_key, m->blocked.peer) == s->stall_rank) {
            *fabric = 1; /* both ends are in the exchange */
            continue;
        }
        char why[600], part[800];
        const enum member v = describe_member(f, r, why, sizeof why);
        snprintf(part, sizeof part, "%srank %d (host %s) %s%s", *count ? "; " : "", r, f->hosts[r],
                 p2p ? "is " : "never entered it: ", why);
        append(line, n, "%s", part);
        *count += 1;
        *stuck += v == MEMBER_STUCK;
    }
}

/* The first words of the line: which rank waits, how long, for what. */
static void describe_stall(const struct comm_flight *f, char *line, size_t n)
{
    const struct flight_side *s = f->side;
    char wait[300], phase[200] = "";
    if (s->answered[s->stall_rank])
        describe_phase(&s->states[s->stall_rank].busy, phase, sizeof phase);
    if (s->stall.cls == FLIGHT_COLLECTIVE) {
        describe_call(&s->stall, wait, sizeof wait);
        snprintf(line, n, "comm.timeout_s = %g: %s has not completed on rank %d after %.1f s%s%s: ",
                 f->timeout_s, wait, s->stall_rank, s->stall.seconds, *phase ? "," : "", phase);
    } else {
        describe_wait(f, &s->stall, wait, sizeof wait);
        snprintf(line, n, "comm.timeout_s = %g: rank %d has been %s for %.1f s%s%s: ", f->timeout_s,
                 s->stall_rank, wait, s->stall.seconds, *phase ? "," : "", phase);
    }
}

/* A slow rank, not a hang: says so (the first WARNINGS times) and tells
 * every rank to keep going. */
static void end_inquiry_slow(struct comm_flight *f, const char *line)
{
    struct flight_side *s = f->side;
    if (s->warnings < WARNINGS)
        fprintf(stderr, "zerotrain: warning: rank 0: %s%s\n", line,
                s->warnings == WARNINGS - 1 ? " (further such warnings are not printed)" : "");
    fflush(stderr);
    s->warnings++;
    s->inquiring = 0;
    s->requery_at = 0;
    send_all(f, W_CLEAR);
}

static void conclude_inquiry(struct comm_flight *f)
{
    struct flight_side *s = f->side;
    char line[WIRE_TEXT - 32], part[400]; /* the prefix goes in front */
    int count = 0, stuck = 0, fabric = 0;
    memset(&s->states[0], 0, sizeof s->states[0]);
    fill_state(f, &s->states[0]); /* rank 0 may have moved since the query */
    describe_stall(f, line, sizeof line);
    if (stall_completed(f)) {
        append(line, sizeof line, "%s",
               "it has completed since, so a rank was late (a straggler), not hung; the run goes "
               "on");
        end_inquiry_slow(f, line);
        return;
    }
    list_silent(f, line, sizeof line, &count);
    stuck += count;
    list_awaited(f, line, sizeof line, &count, &stuck, &fabric);
    if ((!count || fabric) && s->round == 1) {
        /* nobody to blame but the fabric: look once more before saying so */
        s->round = 2;
        s->requery_at = flight_now(f) + REREAD_S;
        s->inquiry_deadline = 0;
        send_all(f, W_LOOKING);
        return;
    }
    if (count && !stuck && !fabric) {
        append(line, sizeof line, "%s",
               ": a slow rank, not a hang; the run goes on (comm.timeout_s bounds how long a "
               "rank waits for one that does not move)");
        end_inquiry_slow(f, line);
        return;
    }
    if (fabric)
        append(line, sizeof line, "%s",
               "both ends are in the exchange, and a second look found it still there, so the "
               "message does not get through (a network or MPI problem)");
    else if (!count)
        append(line, sizeof line, "%s",
               "every rank of the group entered it, and a second look found it completed "
               "nowhere, so the collective itself does not complete (a network or MPI problem)");
    snprintf(part, sizeof part, "; flight logs in %.300s/flight/", f->dir);
    append(line, sizeof line, "%s", part);
    char full[WIRE_TEXT];
    snprintf(full, sizeof full, "zerotrain: error: rank 0: %s", line);
    abort_all(f, full);
}

/* ---- events ---- */

/* Rank 0 lost rank r's connection without a goodbye. */
_Noreturn static void peer_died(struct comm_flight *f, int r)
{
    char line[WIRE_TEXT - 1];
    snprintf(line, sizeof line,
             "zerotrain: error: rank 0: rank %d (host %s) ended without leaving the job (killed "
             "by a signal, or crashed): every rank stops; flight logs in %.300s/flight/",
             r, f->hosts[r], f->dir);
    abort_all(f, line);
}

/* The one rank of each host (its lowest, rank 0's host aside) that speaks
 * when rank 0 is lost, so that a large job prints a line per host. */
static int speaks_for_host(const struct comm_flight *f)
{
    for (int r = 1; r < f->rank; r++)
        if (!strcmp(f->hosts[r], f->hosts[f->rank]))
            return 0;
    return 1;
}

/* A rank that does not speak waits, at most SPEAKER_S, for its host's
 * speaker to have written this run's log: the launcher ends the job at the
 * first rank's exit, and would kill the speaker before its line (seen
 * under load: no line at all). */
static void await_speaker(const struct comm_flight *f)
{
    int speaker = f->rank;
    for (int r = f->rank - 1; r >= 1; r--)
        if (!strcmp(f->hosts[r], f->hosts[f->rank]))
            speaker = r;
    char path[4200];
    snprintf(path, sizeof path, "%.4096s/flight/rank-%d.json", f->dir, speaker);
    const double until = flight_now(f) + SPEAKER_S;
    struct stat st;
    while (flight_now(f) < until) {
        if (stat(path, &st) == 0 && st.st_mtime >= (time_t)f->wall0)
            return;
        nanosleep(&(struct timespec){.tv_nsec = 20000000}, NULL);
    }
}

_Noreturn static void lost_rank0(struct comm_flight *f, const char *how)
{
    char line[WIRE_TEXT];
    snprintf(line, sizeof line,
             "zerotrain: error: rank %d: rank 0 (host %s) %s: every rank stops; flight logs in "
             "%.300s/flight/",
             f->rank, f->hosts[0], how, f->dir);
    if (speaks_for_host(f)) {
        fprintf(stderr, "%s\n", line);
        fflush(stderr);
    } else {
        await_speaker(f);
    }
    write_log_and_exit(f, line);
}

static void on_message(struct comm_flight *f, struct conn *c)
{
    struct flight_side *s = f->side;
    struct wire_msg *m = &c->in;
    if (m->token != s->token) {
        close(c->fd); /* not one of ours */
        c->fd = -1;
        return;
    }
    switch (m->type) {
    case W_HELLO:
        if (f->rank == 0 && m->rank > 0 && m->rank < f->world) {
            c->rank = m->rank;
            send_type(f, c->fd, W_ACK);
        }
        return;
    case W_BYE:
        c->left = 1;
        return;
    case W_STALL:
        if (f->rank == 0 && s->inquiring)
            send_type(f, c->fd, W_LOOKING); /* one inquiry at a time: it covers this one */
        else if (f->rank == 0)
            start_inquiry(f, m->rank, &m->blocked);
        return;
    case W_LOOKING:
        if (s->report_deadline > 0)
            s->report_deadline = flight_now(f) + GRACE_S + 2.0;
        return;
    case W_CLEAR:
        s->report_deadline = 0;
        return;
    case W_STATE:
        if (f->rank == 0 && s->inquiring && m->rank > 0 && m->rank < f->world) {
            s->states[m->rank] = *m;
            s->answered[m->rank] = 1;
        }
        return;
    case W_QUERY: {
        struct wire_msg st;
        memset(&st, 0, sizeof st);
        st.token = s->token;
        st.type = W_STATE;
        st.rank = f->rank;
        fill_state(f, &st);
        send_msg(c->fd, &st);
        return;
    }
    case W_ABORT:
        m->text[WIRE_TEXT - 1] = '\0';
        comm_flight_write(f, m->text);
        send_type(f, c->fd, W_DONE);
        fflush(stderr);
        _exit(1);
    case W_GONE: {
        /* its line is printed: this rank only logs and leaves */
        char why[128];
        c->left = 1;
        snprintf(why, sizeof why, "rank %d ended the job after a failure it reported", m->rank);
        write_log_and_exit(f, why);
    }
    default:
        return;
    }
}

static void on_closed(struct comm_flight *f, struct conn *c)
{
    const int r = c->rank, left = c->left;
    close(c->fd);
    c->fd = -1;
    if (left)
        return;
    if (f->rank == 0 && r > 0)
        peer_died(f, r);
    if (f->rank != 0)
        lost_rank0(f, "ended without leaving the job (killed by a signal, or crashed)");
}

/* Once per tick: has this rank been blocked longer than the timeout? A
 * call found slow but moving is reported again after another timeout. */
static void check_own_stall(struct comm_flight *f)
{
    struct flight_side *s = f->side;
    struct flight_entry e;
    struct wire_msg m;
    if (s->report_deadline > 0)
        return; /* rank 0 has not answered the last report yet */
    pthread_mutex_lock(&f->mu);
    const double now = flight_now(f);
    int stalled = flight_entry_get(f, f->blocked_id, &e) && now - e.wait_start > f->timeout_s &&
                  (e.id != s->fired_id || now - s->fired_at > f->timeout_s);
    pthread_mutex_unlock(&f->mu);
    if (!stalled)
        return;
    s->fired_id = e.id;
    s->fired_at = now;
    memset(&m, 0, sizeof m);
    m.token = s->token;
    m.type = W_STALL;
    m.rank = f->rank;
    fill_state(f, &m);
    if (!m.blocked.valid)
        return;
    if (f->rank == 0) {
        start_inquiry(f, 0, &m.blocked);
        return;
    }
    if (s->n_conns == 1 && s->conns[0].fd >= 0) {
        send_msg(s->conns[0].fd, &m);
        s->report_deadline = now + GRACE_S + 2.0;
        return;
    }
    char call[200], line[WIRE_TEXT];
    describe_call(&m.blocked, call, sizeof call);
    snprintf(line, sizeof line,
             "zerotrain: error: rank %d: comm.timeout_s = %g: %s has not completed after %.1f s "
             "(no side channel to rank 0: the other ranks' states are unknown); flight logs in "
             "%.300s/flight/",
             f->rank, f->timeout_s, call, m.blocked.seconds, f->dir);
    fprintf(stderr, "%s\n", line);
    write_log_and_exit(f, line);
}

static void accept_new(struct comm_flight *f)
{
    struct flight_side *s = f->side;
    int fd = accept(s->listen_fd, NULL, NULL);
    if (fd < 0)
        return;
    if (s->n_conns == s->cap_conns) {
        close(fd); /* more connections than ranks: not ours */
        return;
    }
    struct timeval tv = {1, 0};
    setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
    s->conns[s->n_conns++] = (struct conn){.fd = fd, .rank = -1};
}

static void *watch(void *arg)
{
    struct comm_flight *f = arg;
    struct flight_side *s = f->side;
    struct pollfd *p = calloc((size_t)s->cap_conns + 2, sizeof *p);
    if (!p)
        return NULL;
    for (;;) {
        int n = 0;
        p[n++] = (struct pollfd){.fd = s->wake[0], .events = POLLIN};
        if (s->listen_fd >= 0)
            p[n++] = (struct pollfd){.fd = s->listen_fd, .events = POLLIN};
        const int first_conn = n;
        for (int i = 0; i < s->n_conns; i++)
            p[n++] = (struct pollfd){.fd = s->conns[i].fd, .events = POLLIN};
        poll(p, (nfds_t)n, (int)(s->tick * 1000));
        if (p[0].revents)
            break;
        if (s->listen_fd >= 0 && p[1].revents)
            accept_new(f);
        for (int i = 0; i < n - first_conn; i++) {
            struct conn *c = &s->conns[i];
            if (c->fd < 0 || !p[first_conn + i].revents)
                continue;
            int r;
            while (c->fd >= 0 && (r = read_some(c)) == 1)
                on_message(f, c);
            if (c->fd >= 0 && r < 0)
                on_closed(f, c);
        }
        check_own_stall(f);
        if (s->inquiring && s->requery_at > 0 && flight_now(f) >= s->requery_at) {
            s->requery_at = 0; /* the second look */
            query_all(f);
        } else if (s->inquiring && s->requery_at == 0 &&
                   (all_answered(f) || flight_now(f) > s->inquiry_deadline)) {
            conclude_inquiry(f);
        }
        if (f->rank != 0 && s->report_deadline > 0 && flight_now(f) > s->report_deadline)
            lost_rank0(f, "does not answer (stopped, hung, or its host is unreachable)");
    }
    free(p);
    return NULL;
}

/* ---- setting up ---- */

struct rank0_address {
    uint32_t addrs[MAX_ADDRS]; /* IPv4, network order; non-loopback first */
    int32_t n_addrs;
    int32_t port;
    uint64_t token;
};

static void list_addresses(struct rank0_address *a)
{
    struct ifaddrs *ifs = NULL;
    a->n_addrs = 0;
    if (getifaddrs(&ifs) == 0) {
        for (int loop = 0; loop < 2; loop++) {
            for (struct ifaddrs *i = ifs; i && a->n_addrs < MAX_ADDRS; i = i->ifa_next) {
                if (!i->ifa_addr || i->ifa_addr->sa_family != AF_INET || !(i->ifa_flags & IFF_UP))
                    continue;
                if (!!(i->ifa_flags & IFF_LOOPBACK) != loop)
                    continue;
                a->addrs[a->n_addrs++] = ((struct sockaddr_in *)i->ifa_addr)->sin_addr.s_addr;
            }
        }
        freeifaddrs(ifs);
    }
    if (a->n_addrs == 0)
        a->addrs[a->n_addrs++] = htonl(INADDR_LOOPBACK);
}

static int listen_any(int *port)
{
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return -1;
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_ANY)};
    socklen_t len = sizeof sa;
    if (bind(fd, (struct sockaddr *)&sa, sizeof sa) != 0 || listen(fd, 1024) != 0 ||
        getsockname(fd, (struct sockaddr *)&sa, &len) != 0) {
        close(fd);
        return -1;
    }
    *port = ntohs(sa.sin_port);
    return fd;
}

/* Waits up to `seconds` for fd to be ready for `events`. */
static int wait_fd(int fd, short events, double seconds)
{
    struct pollfd p = {.fd = fd, .events = events};
    int k;
    do
        k = poll(&p, 1, (int)(seconds * 1000));
    while (k < 0 && errno == EINTR);
    return k > 0 && (p.revents & events);
}

/* Connects to one address of rank 0 and completes the HELLO/ACK exchange;
 * the socket, or -1. */
static int try_connect(struct comm_flight *f, uint32_t addr, int port)
{
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (fd < 0)
        return -1;
    struct sockaddr_in sa = {
        .sin_family = AF_INET, .sin_port = htons((uint16_t)port), .sin_addr.s_addr = addr};
    int err = 0;
    socklen_t len = sizeof err;
    if (connect(fd, (struct sockaddr *)&sa, sizeof sa) != 0 &&
        (errno != EINPROGRESS || !wait_fd(fd, POLLOUT, CONNECT_S) ||
         getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len) != 0 || err != 0)) {
        close(fd);
        return -1;
    }
    fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) & ~O_NONBLOCK);
    struct timeval tv = {1, 0};
    setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    send_type(f, fd, W_HELLO);
    struct conn c = {.fd = fd, .rank = 0};
    const double until = flight_now(f) + CONNECT_S;
    while (flight_now(f) < until && wait_fd(fd, POLLIN, until - flight_now(f))) {
        int r = read_some(&c);
        if (r < 0)
            break;
        if (r == 1 && c.in.token == f->side->token && c.in.type == W_ACK)
            return fd;
    }
    close(fd);
    return -1;
}

static void raise_file_limit(int need)
{
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < (rlim_t)need + 64) {
        rl.rlim_cur = rl.rlim_max;
        setrlimit(RLIMIT_NOFILE, &rl);
    }
}

static uint64_t new_token(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return ((uint64_t)ts.tv_nsec << 20) ^ (uint64_t)ts.tv_sec ^ ((uint64_t)getpid() << 40) ^
           0x9e3779b97f4a7c15ull;
}

static void side_free(struct flight_side *s)
{
    if (!s)
        return;
    if (s->listen_fd >= 0)
        close(s->listen_fd);
    for (int i = 0; i < s->n_conns; i++)
        if (s->conns[i].fd >= 0)
            close(s->conns[i].fd);
    if (s->wake[0] >= 0)
        close(s->wake[0]);
    if (s->wake[1] >= 0)
        close(s->wake[1]);
    free(s->conns);
    free(s->states);
    free(s->answered);
    free(s);
}

static zt_status side_alloc(struct comm_flight *f, struct flight_side **out)
{
    struct flight_side *s = calloc(1, sizeof *s);
    if (!s)
        return zt_error_set(ZT_ERR_NOMEM, "flight watchdog: out of memory");
    s->listen_fd = s->wake[0] = s->wake[1] = -1;
    s->cap_conns = f->rank == 0 ? f->world : 1;
    s->conns = calloc((size_t)s->cap_conns, sizeof *s->conns);
    if (f->rank == 0) {
        s->states = calloc((size_t)f->world, sizeof *s->states);
        s->answered = calloc((size_t)f->world, 1);
    }
    if (!s->conns || (f->rank == 0 && (!s->states || !s->answered)) ||
        pipe2(s->wake, O_CLOEXEC) != 0) {
        side_free(s);
        return zt_error_set(ZT_ERR_NOMEM, "flight watchdog: out of memory");
    }
    s->tick = f->timeout_s / 4 < 1.0 ? f->timeout_s / 4 : 1.0;
    if (s->tick < 0.05)
        s->tick = 0.05;
    *out = s;
    return ZT_OK;
}

/* Starts the side channel and the thread (collective over the world);
 * *missing: on rank 0 the number of ranks that could not connect, 0
 * elsewhere. */
static zt_status flight_side_start(struct comm_flight *f, int *missing)
{
    struct rank0_address a;
    memset(&a, 0, sizeof a);
    ZT_TRY(side_alloc(f, &f->side));
    struct flight_side *s = f->side;
    if (f->rank == 0) {
        raise_file_limit(f->world);
        s->listen_fd = listen_any(&a.port);
        list_addresses(&a);
        a.token = new_token();
    }
    if (MPI_Bcast(&a, (int)sizeof a, MPI_BYTE, 0, MPI_COMM_WORLD) != MPI_SUCCESS)
        return zt_error_set(ZT_ERR_COMM, "flight watchdog: MPI_Bcast of rank 0's address failed");
    s->token = a.token;
    if (f->rank == 0 && s->listen_fd >= 0) {
        if (pthread_create(&s->thread, NULL, watch, f) == 0)
            s->running = 1;
    }
    int connected = f->rank == 0 ? (s->running ? 1 : 0) : 0;
    if (f->rank != 0 && a.port > 0) {
        for (int i = 0; i < a.n_addrs && !connected; i++) {
            int fd = try_connect(f, a.addrs[i], a.port);
            if (fd >= 0) {
                s->conns[s->n_conns++] = (struct conn){.fd = fd, .rank = 0};
                connected = 1;
            }
        }
        if (pthread_create(&s->thread, NULL, watch, f) == 0)
            s->running = 1;
    }
    int lacking = !connected, total = 0;
    if (MPI_Reduce(&lacking, &total, 1, MPI_INT, MPI_SUM, 0, MPI_COMM_WORLD) != MPI_SUCCESS)
        return zt_error_set(ZT_ERR_COMM, "flight watchdog: MPI_Reduce of the connections failed");
    *missing = f->rank == 0 ? total : 0;
    return ZT_OK;
}

/* Stops the thread and, with `goodbye`, says BYE on every connection. */
static void flight_side_stop(struct comm_flight *f, int goodbye)
{
    struct flight_side *s = f->side;
    if (!s)
        return;
    if (s->running) {
        char one = 1;
        ssize_t k = write(s->wake[1], &one, 1);
        (void)k;
        pthread_join(s->thread, NULL);
    }
    if (goodbye)
        for (int i = 0; i < s->n_conns; i++)
            if (s->conns[i].fd >= 0)
                send_type(f, s->conns[i].fd, W_BYE);
    side_free(s);
    f->side = NULL;
}

/* ---- the recorder's life (flight.h) ---- */

zt_status comm_flight_create(const struct comm_flight_config *cfg, struct comm_flight **out,
                             int *degraded_ranks)
{
    int missing = 0;
    *out = NULL;
    struct comm_flight *f = NULL;
    ZT_TRY(flight_init(cfg, &f));
    zt_status st = cfg->timeout_s > 0 ? flight_side_start(f, &missing) : ZT_OK;
    if (st != ZT_OK) {
        comm_flight_destroy(f);
        return st;
    }
    if (degraded_ranks)
        *degraded_ranks = missing;
    *out = f;
    return ZT_OK;
}

void comm_flight_leave(struct comm_flight *f)
{
    if (f && f->side)
        flight_side_stop(f, 1);
}

void comm_flight_destroy(struct comm_flight *f)
{
    if (!f)
        return;
    if (f->side)
        flight_side_stop(f, 1);
    flight_free(f);
}
