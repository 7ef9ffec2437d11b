/* comm/nodes.h — which node each rank of a group is on; for comm/ only.
 *
 * A `struct comm_nodes` belongs to one group (a struct comm keeps its own):
 * the node index of each of its ranks and how many edges of the ring in
 * rank order join two nodes, from which every call's bytes are split into
 * intra-node and inter-node (the model is comm.h's). It knows nothing of
 * struct comm, so comm.c uses it without it using comm.c. The table is the
 * same on every rank of the group.
 */
#ifndef ZT_COMM_NODES_H
#define ZT_COMM_NODES_H

#include <mpi.h>
#include <stdint.h>

#include "../common/status.h"

struct comm_nodes {
    int *node_of;   /* size entries, owned */
    int size, rank; /* the group's, and this rank's place in it */
    int ring_cross; /* edges of the ring 0 -> 1 -> ... -> size-1 -> 0 joining two nodes */
};

/* The nodes of the ranks of `mpi`, a communicator of every world rank in
 * world order: MPI_COMM_TYPE_SHARED's nodes, or world rank / S with
 * ZT_SIMULATED_RANKS_PER_NODE=S in rank 0's environment; numbered by their
 * lowest rank. Collective over mpi. On failure *out holds nothing.
 * Errors: ZT_ERR_CONFIG (the variable is not a number >= 1), ZT_ERR_NOMEM,
 * ZT_ERR_COMM. */
zt_status comm_nodes_world(MPI_Comm mpi, struct comm_nodes *out);
/* The nodes of a split's members, from the parent's table and the two
 * communicators' groups (local: no message). Errors: ZT_ERR_NOMEM,
 * ZT_ERR_COMM. */
zt_status comm_nodes_split(const struct comm_nodes *parent, MPI_Comm parent_mpi, MPI_Comm child_mpi,
                           struct comm_nodes *out);
/* Of `bytes` this rank sends in one call, those that cross nodes: to `peer`
 * for a message, the ring's crossing share for a collective (peer < 0). */
uint64_t comm_nodes_inter_bytes(const struct comm_nodes *n, uint64_t bytes, int peer);
/* The node of group rank r; the number of distinct nodes of the group. */
int comm_nodes_node_of(const struct comm_nodes *n, int r);
int comm_nodes_count(const struct comm_nodes *n);
/* Releases the table (a zeroed one too). */
void comm_nodes_free(struct comm_nodes *n);

#endif
