/* plan/plan_context.c — context parallelism as the plan's fourth axis
 * (plan.h).
 *
 * A layout with C > 1 splits each sequence over C ranks of the data-
 * parallel axis (worker/model_context.c): the role built by plan_role holds
 * T/C rows, so its activations and matmul FLOPs are already divided by C,
 * and ZeRO's traffic runs over D x C ranks. What is left is ring
 * attention's own traffic, per micro batch and block: C - 1 key/value
 * blocks forward, 2 (C - 1) + 1 blocks backward (the blocks again and their
 * dK/dV accumulators), each B (S/C) 2 n_kv_head/T head_size elements of the
 * compute type; a recomputed forward sends its blocks again. A block's
 * send overlaps the previous block's attention, so only what the ring's
 * time exceeds the attention's compute by is exposed: attention's share of
 * the FLOPs is 12 S embd per token and layer (fwd + bwd), over T.
 */
#include "plan.h"

int plan_context_size(const struct plan_layout *l)
{
    return l->cp > 1 ? l->cp : 1;
}

const char *plan_context_unsupported(const struct zt_config *c, const struct plan_layout *l)
{
    if (plan_context_size(l) == 1)
        return NULL;
    if (c->data.seq_len % (2 * l->cp) != 0)
        return "a context size whose 2C chunks do not divide the sequence";
    if (c->bf16.enabled || c->fp16.enabled || c->fp8.enabled)
        return "context parallelism in 16-bit or fp8 precision (ring attention is fp32)";
    if (c->lora.enabled || c->run.neftune_noise_alpha > 0.0)
        return "context parallelism with LoRA or NEFTune";
    if (c->zero.shard_group_size > 0 || c->zero.hpz_partition_size > 1)
        return "context parallelism with HSDP or hpZ groups";
    if (c->tensor_parallel.sequence_parallel && (c->data.seq_len / l->cp) % l->tp != 0)
        return "a context size that leaves the tensor ranks unequal rows";
    return NULL;
}

void plan_context_cost(const struct plan_model *pm, const struct plan_layout *l,
                       const struct plan_role *r, const struct machine *m, double flops_rate,
                       int per_node, struct plan_time *out)
{
    const int C = plan_context_size(l);
    if (C == 1)
        return;
    const double rows = (double)l->micro_batch * pm->seq / C;
    const double block = rows * 2.0 * pm->kv_heads / l->tp * (pm->embd / pm->heads) * r->act_esz;
    const double recompute = l->ckpt_every > 0 ? 1.0 / l->ckpt_every : 0.0;
    const double sends = r->blocks * ((C - 1) * (1.0 + recompute) + 2.0 * (C - 1) + 1.0);
    const double bytes = block * sends * l->accum;
    /* the group's C ranks are T apart (comm/layout.h): T C consecutive ranks */
    const struct machine_link *link = (long)l->tp * C > per_node ? &m->inter_node : &m->intra_node;
    const double comm = bytes / link->bandwidth + sends * l->accum * link->latency;
    const double attention =
        12.0 * pm->seq * pm->embd * rows / l->tp * r->blocks * l->accum / flops_rate;
    out->bytes[PLAN_AXIS_DATA] += (uint64_t)bytes;
    out->comm[PLAN_AXIS_DATA] += comm;
    out->context = comm > attention ? comm - attention : 0.0;
}
