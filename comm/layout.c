/* comm/layout.c — the rank grid of layout.h: coordinates, its printed
 * form, and the split of a world into the groups of each axis.
 *
 * Every group is named the same way in the three places that need it: by
 * a kind (which coordinates vary inside the group) and the coordinates it
 * holds fixed, with member i the rank whose varying coordinates count i.
 * The split gives each group a color (its index among the groups of that
 * kind) and each rank its member index as the key, so that a group's comm
 * ranks are exactly the member indices that the printed lists show.
 */
#include "layout.h"

/* The kinds of group; which coordinates vary in each is in member(). */
enum group_kind {
    GROUP_TP,    /* tp varies */
    GROUP_DP,    /* dp varies */
    GROUP_PP,    /* pp varies: one pipeline */
    GROUP_MODEL, /* tp, then pp, vary: one model replica */
    GROUP_STAGE, /* tp, then dp, vary: one pipeline stage */
};

zt_status comm_layout_make(int world, int tp, int pp, struct comm_layout *out)
{
    *out = (struct comm_layout){0};
    if (world < 1 || tp < 1 || pp < 1)
        return zt_error_set(ZT_ERR_CONFIG,
                            "layout: world size %d, tensor-parallel size %d and pipeline stages "
                            "%d must each be at least 1",
                            world, tp, pp);
    const long long replica = (long long)tp * pp;
    if (world % replica != 0)
        return zt_error_set(ZT_ERR_CONFIG,
                            "layout: world size %d is not a multiple of tensor-parallel size %d x "
                            "pipeline stages %d = %lld ranks per model replica",
                            world, tp, pp, replica);
    *out = (struct comm_layout){.tp = tp, .pp = pp, .dp = (int)(world / replica), .world = world};
    return ZT_OK;
}

struct comm_coords comm_layout_coords(const struct comm_layout *l, int rank)
{
    ZT_ASSERT(rank >= 0 && rank < l->world);
    const int rest = rank / l->tp; /* dp + D * pp */
    return (struct comm_coords){.tp = rank % l->tp, .pp = rest / l->dp, .dp = rest % l->dp};
}

int comm_layout_rank(const struct comm_layout *l, struct comm_coords c)
{
    ZT_ASSERT(c.tp >= 0 && c.tp < l->tp && c.pp >= 0 && c.pp < l->pp && c.dp >= 0 && c.dp < l->dp);
    return c.tp + l->tp * (c.dp + l->dp * c.pp);
}

/* How many ranks a group of kind k has. */
static int group_size(const struct comm_layout *l, enum group_kind k)
{
    switch (k) {
    case GROUP_TP:
        return l->tp;
    case GROUP_DP:
        return l->dp;
    case GROUP_PP:
        return l->pp;
    case GROUP_MODEL:
        return l->tp * l->pp;
    case GROUP_STAGE:
        return l->tp * l->dp;
    }
    ZT_ASSERT(0 && "every kind is handled");
    return 0;
}

/* The coordinates of member i of the group of kind k through `at` (whose
 * varying coordinates are ignored). */
static struct comm_coords member(const struct comm_layout *l, enum group_kind k,
                                 struct comm_coords at, int i)
{
    switch (k) {
    case GROUP_TP:
        at.tp = i;
        break;
    case GROUP_DP:
        at.dp = i;
        break;
    case GROUP_PP:
        at.pp = i;
        break;
    case GROUP_MODEL:
        at.tp = i % l->tp;
        at.pp = i / l->tp;
        break;
    case GROUP_STAGE:
        at.tp = i % l->tp;
        at.dp = i / l->tp;
        break;
    }
    return at;
}

/* ---- printing ------------------------------------------------------------ */

/* The group's ranks in member order: ascending, since every kind varies
 * its coordinates innermost first, as the rank numbering does. With
 * `arrows` (a pipeline) they are joined by " -> "; otherwise runs of three
 * or more consecutive ranks are written "a-b". */
static void print_members(FILE *f, const struct comm_layout *l, enum group_kind k,
                          struct comm_coords at, int arrows)
{
    const int n = group_size(l, k);
    fputs(n == 1 ? ": rank " : ": ranks ", f);
    for (int i = 0; i < n;) {
        const int first = comm_layout_rank(l, member(l, k, at, i));
        int run = 1;
        while (!arrows && i + run < n &&
               comm_layout_rank(l, member(l, k, at, i + run)) == first + run)
            run++;
        fputs(i == 0 ? "" : arrows ? " -> " : ", ", f);
        if (run >= 3) {
            fprintf(f, "%d-%d", first, first + run - 1);
            i += run;
        } else {
            fprintf(f, "%d", first);
            i++;
        }
    }
    fputc('\n', f);
}

void comm_layout_print(const struct comm_layout *l, FILE *f)
{
    fprintf(f, "layout: world %d = tensor %d x pipeline %d x data %d\n", l->world, l->tp, l->pp,
            l->dp);
    for (int r = 0; r < l->world; r++) {
        const struct comm_coords c = comm_layout_coords(l, r);
        fprintf(f, "  rank %d: tp %d, pp %d, dp %d\n", r, c.tp, c.pp, c.dp);
    }
    struct comm_coords at = {0};
    if (l->pp > 1)
        for (at.pp = 0; at.pp < l->pp; at.pp++) {
            fprintf(f, "  pipeline stage %d", at.pp);
            print_members(f, l, GROUP_STAGE, at, 0);
        }
    at = (struct comm_coords){0};
    if (l->tp > 1)
        for (at.pp = 0; at.pp < l->pp; at.pp++)
            for (at.dp = 0; at.dp < l->dp; at.dp++) {
                fprintf(f, "  tensor-parallel group (pp %d, dp %d)", at.pp, at.dp);
                print_members(f, l, GROUP_TP, at, 0);
            }
    at = (struct comm_coords){0};
    if (l->dp > 1)
        for (at.pp = 0; at.pp < l->pp; at.pp++)
            for (at.tp = 0; at.tp < l->tp; at.tp++) {
                fprintf(f, "  data-parallel group (tp %d, pp %d)", at.tp, at.pp);
                print_members(f, l, GROUP_DP, at, 0);
            }
    at = (struct comm_coords){0};
    if (l->pp > 1)
        for (at.dp = 0; at.dp < l->dp; at.dp++)
            for (at.tp = 0; at.tp < l->tp; at.tp++) {
                fprintf(f, "  pipeline (tp %d, dp %d)", at.tp, at.dp);
                print_members(f, l, GROUP_PP, at, 1);
            }
    at = (struct comm_coords){0};
    if (l->tp * l->pp > 1)
        for (at.dp = 0; at.dp < l->dp; at.dp++) {
            fprintf(f, "  model replica (dp %d)", at.dp);
            print_members(f, l, GROUP_MODEL, at, 0);
        }
}

/* ---- the axes' communicators -------------------------------------------- */

/* The color of c's group of kind k (its index among those groups) and c's
 * key in it (its member index). */
static void color_key(const struct comm_layout *l, enum group_kind k, struct comm_coords c,
                      int *color, int *key)
{
    switch (k) {
    case GROUP_TP:
        *color = c.dp + l->dp * c.pp;
        *key = c.tp;
        return;
    case GROUP_DP:
        *color = c.tp + l->tp * c.pp;
        *key = c.dp;
        return;
    case GROUP_PP:
        *color = c.tp + l->tp * c.dp;
        *key = c.pp;
        return;
    case GROUP_MODEL:
        *color = c.dp;
        *key = c.tp + l->tp * c.pp;
        return;
    case GROUP_STAGE:
        *color = c.pp;
        *key = c.tp + l->tp * c.dp;
        return;
    }
    ZT_ASSERT(0 && "every kind is handled");
}

static zt_status split_axis(struct comm *world, const struct comm_layout *l, enum group_kind k,
                            struct comm **out)
{
    static const char *const names[] = {[GROUP_TP] = "tensor",
                                        [GROUP_DP] = "data",
                                        [GROUP_PP] = "pipeline",
                                        [GROUP_MODEL] = "model",
                                        [GROUP_STAGE] = "stage"};
    int color, key;
    color_key(l, k, comm_layout_coords(l, comm_rank(world)), &color, &key);
    ZT_TRY(comm_split(world, color, key, out));
    comm_set_name(*out, names[k]);
    ZT_ASSERT(comm_size(*out) == group_size(l, k) && comm_rank(*out) == key);
    return ZT_OK;
}

static zt_status split_all(struct comm *world, const struct comm_layout *l, struct comm_axes *out)
{
    ZT_TRY(split_axis(world, l, GROUP_TP, &out->tp));
    ZT_TRY(split_axis(world, l, GROUP_PP, &out->pp));
    ZT_TRY(split_axis(world, l, GROUP_DP, &out->dp));
    ZT_TRY(split_axis(world, l, GROUP_MODEL, &out->model));
    return ZT_OK;
}

zt_status comm_axes_split(struct comm *world, const struct comm_layout *l, struct comm_axes *out)
{
    *out = (struct comm_axes){0};
    if (comm_size(world) != l->world)
        return zt_error_set(ZT_ERR_USAGE,
                            "comm_axes_split: the comm has %d ranks, the layout's world %d",
                            comm_size(world), l->world);
    /* comm_split gives every rank the same status, so on failure every rank
     * holds the same groups and may destroy them together. */
    zt_status s = split_all(world, l, out);
    if (s != ZT_OK) {
        comm_axes_destroy(out);
        zt_error_trace_push(__FILE__, __LINE__);
    }
    return s;
}

void comm_axes_destroy(struct comm_axes *a)
{
    if (!a)
        return;
    comm_destroy(a->model);
    comm_destroy(a->dp);
    comm_destroy(a->pp);
    comm_destroy(a->tp);
    *a = (struct comm_axes){0};
}

/* ---- the data-parallel group's hierarchy ---------------------------------- */

static zt_status split_dp(struct comm *dp, int shard_size, int secondary_size,
                          struct comm_dp_groups *out)
{
    const int d = comm_rank(dp), n = comm_size(dp);
    if (shard_size < n) {
        ZT_TRY(comm_split(dp, d / shard_size, d % shard_size, &out->shard));
        ZT_TRY(comm_split(dp, d % shard_size, d / shard_size, &out->replica));
    }
    if (secondary_size > 1)
        ZT_TRY(comm_split(dp, d / secondary_size, d % secondary_size, &out->secondary));
    return ZT_OK;
}

zt_status comm_dp_groups_split(struct comm *dp, int shard_size, int secondary_size,
                               struct comm_dp_groups *out)
{
    const int n = comm_size(dp);
    *out = (struct comm_dp_groups){0};
    ZT_ASSERT(shard_size >= 1 && n % shard_size == 0);
    ZT_ASSERT(secondary_size <= 1 || n % secondary_size == 0);
    zt_status s = split_dp(dp, shard_size, secondary_size, out);
    if (s != ZT_OK) {
        comm_dp_groups_destroy(out);
        zt_error_trace_push(__FILE__, __LINE__);
    }
    return s;
}

void comm_dp_groups_destroy(struct comm_dp_groups *g)
{
    if (!g)
        return;
    comm_destroy(g->secondary);
    comm_destroy(g->replica);
    comm_destroy(g->shard);
    *g = (struct comm_dp_groups){0};
}
