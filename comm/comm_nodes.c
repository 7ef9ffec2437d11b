/* comm/comm_nodes.c — which node each rank of a group is on, and the
 * intra-node / inter-node split of the bytes a group sends (comm.h).
 *
 * The world's nodes are found once, when comm_create makes the group of
 * all ranks: each rank learns the lowest world rank of its node (the
 * MPI_COMM_TYPE_SHARED split, or world rank / S with a simulated node
 * size S from rank 0's environment), one allgather gives every rank every
 * rank's, and a node's index is the number of nodes whose lowest rank is
 * lower. A split needs no message: its members' world ranks come from
 * MPI's group translation and their nodes from the parent's table.
 *
 * The link split of a collective is the ring model of comm.h, so it is a
 * property of the group alone (ring_cross, counted once here) and every
 * rank of the group counts the same split.
 */
#include "comm_impl.h"

#include <errno.h>
#include <limits.h>
#include <stdlib.h>

static const char *const link_names[COMM_LINK_COUNT] = {
    [COMM_LINK_INTRA] = "intra", [COMM_LINK_INTER] = "inter"};

const char *comm_link_name(enum comm_link l)
{
    return (int)l >= 0 && l < COMM_LINK_COUNT ? link_names[l] : "unknown";
}

/* The edges of the ring 0 -> 1 -> ... -> size-1 -> 0 joining two nodes. */
static int count_ring_cross(const int *node_of, int size)
{
    int cross = 0;
    for (int i = 0; size > 1 && i < size; i++)
        cross += node_of[i] != node_of[(i + 1) % size];
    return cross;
}

/* The simulated ranks per node of world rank 0's environment: 0 when the
 * variable is unset, -1 when it is not a number >= 1. */
static int simulated_node_size(void)
{
    const char *v = getenv("ZT_SIMULATED_RANKS_PER_NODE");
    if (!v || !*v)
        return 0;
    char *end;
    errno = 0;
    long n = strtol(v, &end, 10);
    return errno == 0 && *end == '\0' && n >= 1 && n <= INT_MAX ? (int)n : -1;
}

/* The lowest world rank of this rank's node, as MPI sees nodes. */
static zt_status shared_leader(const struct comm *c, int *leader)
{
    MPI_Comm local;
    COMM_MPI_TRY(MPI_Comm_split_type(c->mpi, MPI_COMM_TYPE_SHARED, c->rank, MPI_INFO_NULL, &local));
    int rc = MPI_Allreduce(&c->rank, leader, 1, MPI_INT, MPI_MIN, local);
    MPI_Comm_free(&local);
    if (rc != MPI_SUCCESS)
        return comm_mpi_error(rc, "MPI_Allreduce(node leader)");
    return ZT_OK;
}

zt_status comm_nodes_world(struct comm *c)
{
    int simulated = c->rank == 0 ? simulated_node_size() : 0;
    COMM_MPI_TRY(MPI_Bcast(&simulated, 1, MPI_INT, 0, c->mpi));
    if (simulated < 0)
        return zt_error_set(ZT_ERR_CONFIG,
                            "ZT_SIMULATED_RANKS_PER_NODE: '%s' on rank 0 is not a number >= 1 "
                            "(ranks per simulated node; unset it to use the real nodes)",
                            c->rank == 0 ? getenv("ZT_SIMULATED_RANKS_PER_NODE") : "?");
    int leader = simulated > 0 ? c->rank / simulated * simulated : 0;
    if (simulated == 0)
        ZT_TRY(shared_leader(c, &leader));
    int *leaders = malloc((size_t)c->size * sizeof *leaders);
    c->node_of = malloc((size_t)c->size * sizeof *c->node_of);
    if (!leaders || !c->node_of) {
        free(leaders);
        return zt_error_set(ZT_ERR_NOMEM, "comm: cannot allocate the node table");
    }
    int rc = MPI_Allgather(&leader, 1, MPI_INT, leaders, 1, MPI_INT, c->mpi);
    if (rc != MPI_SUCCESS) {
        free(leaders);
        return comm_mpi_error(rc, "MPI_Allgather(node leaders)");
    }
    for (int r = 0; r < c->size; r++) {
        int below = 0; /* nodes whose lowest rank is below this rank's node's */
        for (int q = 0; q < leaders[r]; q++)
            below += leaders[q] == q;
        c->node_of[r] = below;
    }
    free(leaders);
    c->ring_cross = count_ring_cross(c->node_of, c->size);
    return ZT_OK;
}

zt_status comm_nodes_split(const struct comm *parent, struct comm *child)
{
    MPI_Group pg, cg;
    int *ranks = malloc(2 * (size_t)child->size * sizeof *ranks);
    child->node_of = malloc((size_t)child->size * sizeof *child->node_of);
    if (!ranks || !child->node_of) {
        free(ranks);
        return zt_error_set(ZT_ERR_NOMEM, "comm_split: cannot allocate the node table");
    }
    int rc = MPI_Comm_group(parent->mpi, &pg);
    if (rc == MPI_SUCCESS) {
        rc = MPI_Comm_group(child->mpi, &cg);
        if (rc == MPI_SUCCESS) {
            for (int i = 0; i < child->size; i++)
                ranks[i] = i;
            rc = MPI_Group_translate_ranks(cg, child->size, ranks, pg, ranks + child->size);
            MPI_Group_free(&cg);
        }
        MPI_Group_free(&pg);
    }
    if (rc != MPI_SUCCESS) {
        free(ranks);
        return comm_mpi_error(rc, "MPI_Group_translate_ranks(split nodes)");
    }
    for (int i = 0; i < child->size; i++)
        child->node_of[i] = parent->node_of[ranks[child->size + i]];
    free(ranks);
    child->ring_cross = count_ring_cross(child->node_of, child->size);
    return ZT_OK;
}

void comm_nodes_account(struct comm *c, enum comm_kind kind, uint64_t bytes, int peer)
{
    uint64_t inter;
    if (peer >= 0)
        inter = c->node_of[peer] != c->node_of[c->rank] ? bytes : 0;
    else
        inter = c->size > 1 ? bytes * (uint64_t)c->ring_cross / (uint64_t)c->size : 0;
    c->stats.link_bytes[COMM_LINK_INTER][kind] += inter;
    c->stats.link_bytes[COMM_LINK_INTRA][kind] += bytes - inter;
}

int comm_node_of(const struct comm *c, int rank)
{
    ZT_ASSERT(rank >= 0 && rank < c->size);
    return c->node_of[rank];
}

int comm_nodes_spanned(const struct comm *c)
{
    int n = 0;
    for (int i = 0; i < c->size; i++) {
        int seen = 0;
        for (int j = 0; j < i && !seen; j++)
            seen = c->node_of[j] == c->node_of[i];
        n += !seen;
    }
    return n;
}
