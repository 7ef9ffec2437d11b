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
 *   STALL(call) -------------------->    (first stall only) QUERY to all
 *   STATE(groups, blocked, last) <---    QUERY
 *                                        after the answers or GRACE s:
 *                                        prints the line, ABORT(line) to all
 *   DONE (log written), _exit(1) <---    ABORT; waits for DONEs, _exit(1)
 *   BYE ----------------------------->   (left cleanly: not dead)
 *
 * A connection that ends without BYE is a dead rank: rank 0 names it and
 * sends ABORT; the others, losing rank 0 that way, name rank 0. A STALL
 * that rank 0 does not answer with ABORT within GRACE + 2 s means rank 0 is
 * stopped or unreachable; the reporting rank names it.
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
#include <time.h>
#include <unistd.h>

#include <mpi.h>

#define MAX_ADDRS   16
#define WIRE_GROUPS 16
#define WIRE_TEXT   1024
#define GRACE_S     3.0 /* rank 0 waits this long for the states */
#define CONNECT_S   2.0 /* per address tried */

enum wire_type {
    W_HELLO = 1,
    W_ACK,
    W_BYE,  /* leaving cleanly */
    W_GONE, /* leaving after a failure this rank reported: the job ends */
    W_STALL,
    W_QUERY,
    W_STATE,
    W_ABORT,
    W_DONE
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
    char name[FLIGHT_NAME_LEN];
};

struct wire_msg {
    uint64_t token;
    int32_t type, rank;
    struct wire_call blocked; /* STALL, STATE: the call this rank is blocked in */
    struct wire_call last;    /* STATE: the latest call that ended */
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
    m->n_groups = f->n_groups < WIRE_GROUPS ? f->n_groups : WIRE_GROUPS;
    for (int g = 0; g < m->n_groups; g++) {
        m->groups[g].key = f->groups[g].key;
        m->groups[g].entered = f->groups[g].entered;
        m->groups[g].completed = f->groups[g].completed;
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
 * log and exits. Waits up to a second for their DONE so that the launcher
 * does not kill them before. */
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
        if (s->conns[i].fd >= 0 && s->conns[i].rank >= 0 && !s->conns[i].left) {
            send_msg(s->conns[i].fd, &m);
            waiting++;
        }
    }
    const double until = flight_now(f) + 1.0;
    while (waiting > 0 && flight_now(f) < until) {
        for (int i = 0; i < s->n_conns; i++) {
            struct conn *c = &s->conns[i];
            if (c->fd < 0 || c->rank < 0)
                continue;
            int r = read_some(c);
            if (r != 0) {
                waiting--;
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

static void start_inquiry(struct comm_flight *f, int from_rank, const struct wire_call *call)
{
    struct flight_side *s = f->side;
    if (s->inquiring)
        return;
    s->inquiring = 1;
    s->stall_rank = from_rank;
    s->stall = *call;
    s->inquiry_deadline = flight_now(f) + GRACE_S;
    memset(s->answered, 0, (size_t)f->world);
    memset(&s->states[0], 0, sizeof s->states[0]);
    fill_state(f, &s->states[0]);
    s->answered[0] = 1;
    for (int i = 0; i < s->n_conns; i++)
        if (s->conns[i].rank > 0 && s->conns[i].fd >= 0 && !s->conns[i].left)
            send_type(f, s->conns[i].fd, W_QUERY);
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

/* What rank r is doing instead of the stalled call, when it answered. */
static int not_entered(const struct comm_flight *f, int r, char *why, size_t n)
{
    const struct flight_side *s = f->side;
    const struct wire_msg *m = &s->states[r];
    for (int g = 0; g < m->n_groups; g++) {
        if (m->groups[g].key != s->stall.group_key)
            continue;
        if (m->groups[g].entered >= s->stall.seq)
            return 0;
        char call[160];
        if (m->blocked.valid) {
            describe_call(&m->blocked, call, sizeof call);
            snprintf(why, n, "blocked in %s for %.1f s", call, m->blocked.seconds);
        } else if (m->last.valid) {
            describe_call(&m->last, call, sizeof call);
            snprintf(why, n, "not in a collective; its latest call, %s, ended %.1f s ago", call,
                     m->last.seconds);
        } else {
            snprintf(why, n, "no collective yet");
        }
        return 1;
    }
    return 0; /* not a member of that group */
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

static void conclude_inquiry(struct comm_flight *f)
{
    struct flight_side *s = f->side;
    char line[WIRE_TEXT - 1], call[200], part[400];
    int count = 0;
    describe_call(&s->stall, call, sizeof call);
    snprintf(line, sizeof line,
             "zerotrain: error: rank 0: comm.timeout_s = %g: %s has not completed on rank %d "
             "after %.1f s: ",
             f->timeout_s, call, s->stall_rank, s->stall.seconds);
    list_silent(f, line, sizeof line, &count);
    for (int r = 0; r < f->world; r++) {
        char why[300];
        if (!s->answered[r] || !not_entered(f, r, why, sizeof why))
            continue;
        snprintf(part, sizeof part, "%srank %d (host %s) never entered it: %s", count ? "; " : "",
                 r, f->hosts[r], why);
        append(line, sizeof line, "%s", part);
        count++;
    }
    if (!count)
        append(line, sizeof line, "%s",
               "every rank of the group entered it, so the collective itself does not complete "
               "(a network or MPI problem)");
    snprintf(part, sizeof part, "; flight logs in %.300s/flight/", f->dir);
    append(line, sizeof line, "%s", part);
    abort_all(f, line);
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
        if (f->rank == 0)
            start_inquiry(f, m->rank, &m->blocked);
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

/* Once per tick: has this rank been blocked longer than the timeout? */
static void check_own_stall(struct comm_flight *f)
{
    struct flight_side *s = f->side;
    struct flight_entry e;
    struct wire_msg m;
    if (s->fired)
        return;
    pthread_mutex_lock(&f->mu);
    const double now = flight_now(f);
    int stalled = flight_entry_get(f, f->blocked_id, &e) && now - e.wait_start > f->timeout_s;
    pthread_mutex_unlock(&f->mu);
    if (!stalled)
        return;
    s->fired = 1;
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
        if (s->inquiring && (all_answered(f) || flight_now(f) > s->inquiry_deadline))
            conclude_inquiry(f);
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
