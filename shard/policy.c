/* shard/policy.c — the ZeRO stages as flags (see shard.h). */
#include "shard.h"

static const struct shard_policy policies[4] = {
    {.stage = 0, .shard_states = 0, .shard_grads = 0, .shard_params = 0},
    {.stage = 1, .shard_states = 1, .shard_grads = 0, .shard_params = 0},
    {.stage = 2, .shard_states = 1, .shard_grads = 1, .shard_params = 0},
    {.stage = 3, .shard_states = 1, .shard_grads = 1, .shard_params = 1},
};

const struct shard_policy *shard_policy_of(int stage)
{
    return stage >= 0 && stage <= 3 ? &policies[stage] : NULL;
}
