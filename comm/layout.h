/* comm/layout.h — the grid of ranks: data x tensor x pipeline parallelism.
 *
 * A run of W ranks trains D replicas of the model (data parallelism, with
 * ZeRO sharding among them); each replica is cut into P pipeline stages of
 * consecutive blocks, and each stage's layers are split across T ranks
 * (tensor parallelism). So W = T * P * D, and a rank's place is its three
 * coordinates (tp, pp, dp), each from 0.
 *
 * Ranks are numbered tensor-innermost, then data, then pipeline:
 *
 *     rank = tp + T * (dp + D * pp)
 *
 * Megatron-LM's order, and for the same reason: a tensor-parallel group
 * talks in every layer, so its T ranks are consecutive and a launcher that
 * fills nodes rank by rank puts them on one node; a pipeline stage's T * D
 * ranks are consecutive too, and only the activations crossing a stage
 * boundary travel between blocks of ranks. With T = P = 1 the grid is plain
 * data parallelism and every rank's dp is its world rank.
 *
 * A layout is plain data (copy it by assignment); comm_layout_make is the
 * only way to get a valid one, and the other calls assume it. The axes'
 * communicators (comm_axes_split) are owned by the caller and released with
 * comm_axes_destroy.
 */
#ifndef ZT_COMM_LAYOUT_H
#define ZT_COMM_LAYOUT_H

#include <stdio.h>

#include "../common/status.h"
#include "comm.h"

/* The axis sizes: T (tp), P (pp), D (dp), and the world W = T * P * D. */
struct comm_layout {
    int tp, pp, dp;
    int world;
};

/* One rank's position: each coordinate in [0, its axis's size). */
struct comm_coords {
    int tp, pp, dp;
};

/* The layout of `world` ranks with tensor-parallel size `tp` and `pp`
 * pipeline stages; D is world / (tp * pp). On failure *out is zeroed.
 * Errors: ZT_ERR_CONFIG naming the numbers when world, tp or pp is below 1,
 * or world is not a multiple of tp * pp. */
zt_status comm_layout_make(int world, int tp, int pp, struct comm_layout *out);

/* The coordinates of `rank` (asserted in [0, world)). */
struct comm_coords comm_layout_coords(const struct comm_layout *l, int rank);

/* The rank at coordinates `c` (each asserted in range); the inverse of
 * comm_layout_coords. */
int comm_layout_rank(const struct comm_layout *l, struct comm_coords c);

/* Writes the grid as a user reads it (`--print-layout`): the line
 * "layout: world W = tensor T x pipeline P x data D", one line per rank
 * "  rank R: tp t, pp p, dp d", then every group, each as
 * "  KIND (FIXED COORDINATES): ranks LIST" ("rank R" for a group of one):
 *   "  pipeline stage p: ranks ..."          the T * D ranks of stage p
 *   "  tensor-parallel group (pp p, dp d): ranks ..."
 *   "  data-parallel group (tp t, pp p): ranks ..."
 *   "  pipeline (tp t, dp d): ranks a -> b -> ..."   stage order
 *   "  model replica (dp d): ranks ..."     the T * P ranks of one replica
 * A kind whose groups have one rank each (nobody to talk to) is left out,
 * and so are the stages when P = 1. Lists are ascending, runs of three or
 * more consecutive ranks written "a-b", others separated by ", ". */
void comm_layout_print(const struct comm_layout *l, FILE *f);

/* The communicators of this rank's groups, split from a comm of the
 * layout's world:
 *   tp:    the T ranks sharing (pp, dp); its rank is tp
 *   dp:    the D ranks sharing (tp, pp); its rank is dp (ZeRO and the
 *          sampler run over it)
 *   pp:    the P ranks sharing (tp, dp); its rank is pp (the stage)
 *   model: the T * P ranks sharing dp (one model replica, for the global
 *          gradient norm); its rank is tp + T * pp
 * Every member is a comm of its own, also when its group is one rank. */
struct comm_axes {
    struct comm *tp, *pp, *dp, *model;
};

/* Splits `world` (whose comm_size must be l->world, and whose rank r is
 * the layout's rank r) into this rank's four groups. Collective over
 * world. *out is owned by the caller, freed with comm_axes_destroy; on
 * failure it is zeroed and every rank gets the same status.
 * Errors: ZT_ERR_USAGE (world's size is not the layout's; before any
 * collective), those of comm_split. */
zt_status comm_axes_split(struct comm *world, const struct comm_layout *l, struct comm_axes *out);

/* Destroys each member (collective over each group) and zeroes *a; NULL
 * members, and a NULL a, are fine. */
void comm_axes_destroy(struct comm_axes *a);

/* The hierarchy inside one data-parallel group of D ranks (ZeRO's shard
 * groups, shard/shard.h):
 *   shard:     G consecutive dp ranks, dp / G its color; its rank dp % G
 *              (HSDP: ZeRO shards within it); NULL when G is D
 *   replica:   the D / G ranks holding the same shard, one per shard group
 *              (dp % G its color); its rank dp / G; NULL when G is D
 *   secondary: H consecutive dp ranks, dp / H its color; its rank dp % H
 *              (hpZ's secondary partition); NULL when H is 0 or 1
 * Consecutive dp ranks are consecutive world ranks without tensor
 * parallelism, so a launcher that fills nodes rank by rank puts a group of
 * G (or H) dividing the ranks per node on one node. */
struct comm_dp_groups {
    struct comm *shard, *replica, *secondary;
};

/* Splits the data-parallel group `dp` for shard groups of `shard_size` G
 * and secondary groups of `secondary_size` H (each dividing comm_size(dp),
 * asserted; G = comm_size(dp) and H <= 1: no group). Collective over dp.
 * *out is owned by the caller, freed with comm_dp_groups_destroy; on
 * failure it is zeroed and every rank gets the same status. Errors: those
 * of comm_split. */
zt_status comm_dp_groups_split(struct comm *dp, int shard_size, int secondary_size,
                               struct comm_dp_groups *out);

/* Destroys each member and zeroes *g; NULL members and a NULL g are fine. */
void comm_dp_groups_destroy(struct comm_dp_groups *g);

#endif
