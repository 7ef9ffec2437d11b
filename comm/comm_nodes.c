/* comm/comm_nodes.c — which node each rank of a group is on, and the
 * intra-node / inter-node split of the bytes a group sends (nodes.h).
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
#include "nodes.h"

#include <errno.h>
#include <limits.h>
#include <stdlib.h>

#include "mpi_error.h"

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
static zt_status shared_leader(MPI_Comm mpi, int rank, int *leader)
{
    MPI_Comm local;
    COMM_MPI_TRY(MPI_Comm_split_type(mpi, MPI_COMM_TYPE_SHARED, rank, MPI_INFO_NULL, &local));
    int rc = MPI_Allreduce(&rank, leader, 1, MPI_INT, MPI_MIN, local);
    MPI_Comm_free(&local);
    if (rc != MPI_SUCCESS)
        return comm_mpi_error(rc, "MPI_Allreduce(node leader)");
    return ZT_OK;
}

zt_status comm_nodes_world(MPI_Comm mpi, struct comm_nodes *out)
{
    *out = (struct comm_nodes){0};
    int rank, size;
    COMM_MPI_TRY(MPI_Comm_rank(mpi, &rank));
    COMM_MPI_TRY(MPI_Comm_size(mpi, &size));
    int simulated = rank == 0 ? simulated_node_size() : 0;
    COMM_MPI_TRY(MPI_Bcast(&simulated, 1, MPI_INT, 0, mpi));
    if (simulated < 0)
        return zt_error_set(ZT_ERR_CONFIG,
                            "ZT_SIMULATED_RANKS_PER_NODE: '%s' on rank 0 is not a number >= 1 "
                            "(ranks per simulated node; unset it to use the real nodes)",
                            rank == 0 ? getenv("ZT_SIMULATED_RANKS_PER_NODE") : "?");
    int leader = simulated > 0 ? rank / simulated * simulated : 0;
    if (simulated == 0)
        ZT_TRY(shared_leader(mpi, rank, &leader));
    int *leaders = malloc((size_t)size * sizeof *leaders);
    int *node_of = malloc((size_t)size * sizeof *node_of);
    if (!leaders || !node_of) {
        free(leaders);
        free(node_of);
        return zt_error_set(ZT_ERR_NOMEM, "comm: cannot allocate the node table");
    }
    int rc = MPI_Allgather(&leader, 1, MPI_INT, leaders, 1, MPI_INT, mpi);
    if (rc != MPI_SUCCESS) {
        free(leaders);
        free(node_of);
        return comm_mpi_error(rc, "MPI_Allgather(node leaders)");
    }
    for (int r = 0; r < size; r++) {
        int below = 0; /* nodes whose lowest rank is below this rank's node's */
        for (int q = 0; q < leaders[r]; q++)
            below += leaders[q] == q;
        node_of[r] = below;
    }
    free(leaders);
    *out = (struct comm_nodes){.node_of = node_of,
                               .size = size,
                               .rank = rank,
                               .ring_cross = count_ring_cross(node_of, size)};
    return ZT_OK;
}

zt_status comm_nodes_split(const struct comm_nodes *parent, MPI_Comm parent_mpi, MPI_Comm child_mpi,
                           struct comm_nodes *out)
{
    MPI_Group pg, cg;
    int rank, size;
    *out = (struct comm_nodes){0};
    COMM_MPI_TRY(MPI_Comm_rank(child_mpi, &rank));
    COMM_MPI_TRY(MPI_Comm_size(child_mpi, &size));
    int *ranks = malloc(2 * (size_t)size * sizeof *ranks);
    int *node_of = malloc((size_t)size * sizeof *node_of);
    if (!ranks || !node_of) {
        free(ranks);
        free(node_of);
        return zt_error_set(ZT_ERR_NOMEM, "comm_split: cannot allocate the node table");
    }
    int rc = MPI_Comm_group(parent_mpi, &pg);
    if (rc == MPI_SUCCESS) {
        rc = MPI_Comm_group(child_mpi, &cg);
        if (rc == MPI_SUCCESS) {
            for (int i = 0; i < size; i++)
                ranks[i] = i;
            rc = MPI_Group_translate_ranks(cg, size, ranks, pg, ranks + size);
            MPI_Group_free(&cg);
        }
        MPI_Group_free(&pg);
    }
    if (rc != MPI_SUCCESS) {
        free(ranks);
        free(node_of);
        return comm_mpi_error(rc, "MPI_Group_translate_ranks(split nodes)");
    }
    for (int i = 0; i < size; i++)
        node_of[i] = parent->node_of[ranks[size + i]];
    free(ranks);
    *out = (struct comm_nodes){.node_of = node_of,
                               .size = size,
                               .rank = rank,
                               .ring_cross = count_ring_cross(node_of, size)};
    return ZT_OK;
}

uint64_t comm_nodes_inter_bytes(const struct comm_nodes *n, uint64_t bytes, int peer)
{
    if (peer >= 0)
        return n->node_of[peer] != n->node_of[n->rank] ? bytes : 0;
    return n->size > 1 ? bytes * (uint64_t)n->ring_cross / (uint64_t)n->size : 0;
}

int comm_nodes_node_of(const struct comm_nodes *n, int r)
{
    ZT_ASSERT(r >= 0 && r < n->size);
    return n->node_of[r];
}

int comm_nodes_count(const struct comm_nodes *n)
{
    int count = 0;
    for (int i = 0; i < n->size; i++) {
        int seen = 0;
        for (int j = 0; j < i && !seen; j++)
            seen = n->node_of[j] == n->node_of[i];
        count += !seen;
    }
    return count;
}

void comm_nodes_free(struct comm_nodes *n)
{
    free(n->node_of);
    *n = (struct comm_nodes){0};
}
