/* worker/optim_adamw8bit.c — 8-bit AdamW with block-wise quantised
 * moments, as bitsandbytes' AdamW8bit (see optimizer.h). */
#include <math.h>
#include <stddef.h>

#include "optimizer.h"
#include "quant_maps.h"

static int adamw8bit_quantised(size_t numel, const struct optimizer_hparams *hp)
{
    return (long)numel >= hp->min_8bit_size;
}

static size_t adamw8bit_blocks(size_t numel)
{
    return (numel + ADAMW8BIT_BLOCK - 1) / ADAMW8BIT_BLOCK;
}

/* Quantised tensors: absmax1 and absmax2 per block; the others: fp32 m
 * and v. */
size_t adamw8bit_state_len(int rows, int cols, const struct optimizer_hparams *hp)
{
    const size_t numel = (size_t)rows * (size_t)cols;
    return 2 * (adamw8bit_quantised(numel, hp) ? adamw8bit_blocks(numel) : numel);
}

/* Round 0 (max): each block's largest |m| and v after the update; round
 * 1 (sum): the updated fp32 m and v of tensors kept in fp32, each element
 * from the rank that holds it. */
size_t adamw8bit_stats_len(int round, int rows, int cols, const struct optimizer_hparams *hp)
{
    const size_t numel = (size_t)rows * (size_t)cols;
    const int quantised = adamw8bit_quantised(numel, hp);
    if (round == 0)
        return quantised ? 2 * adamw8bit_blocks(numel) : 0;
    return quantised ? 0 : 2 * numel;
}

/* A run of piece elements [i, end) in one block of the whole tensor, with
 * that block's absmax before the update: the per-element work of the two
 * passes below without a block lookup per element. */
struct adamw8bit_segment {
    size_t end, block;
    float scale1, scale2; /* the block's absmax of m and v before the update */
};

static struct adamw8bit_segment adamw8bit_segment_at(const struct optimizer_piece *pc, size_t i)
{
    const size_t at = optimizer_slice_index(&pc->slice, pc->lo + i);
    size_t room = ADAMW8BIT_BLOCK - at % ADAMW8BIT_BLOCK;
    if (pc->slice.run) {
        const size_t in_run = pc->slice.run - (pc->lo + i) % pc->slice.run;
        room = in_run < room ? in_run : room;
    }
    const size_t n = pc->hi - pc->lo, block = at / ADAMW8BIT_BLOCK;
    return (struct adamw8bit_segment){.end = n - i < room ? n : i + room,
                                      .block = block,
                                      .scale1 = pc->tensor_state[block],
                                      .scale2 =
                                          pc->tensor_state[adamw8bit_blocks(pc->numel) + block]};
}

/* Piece element i's moments after this step's update, from its codes and
 * its block's absmax before it. */
static inline void adamw8bit_moments(const struct optimizer_piece *pc, size_t i,
                                     const struct adamw8bit_segment *sg,
                                     const struct optimizer_hparams *hp, float *m, float *v)
{
    const unsigned char c1 = ((const unsigned char *)pc->states[0])[i];
    const unsigned char c2 = ((const unsigned char *)pc->states[1])[i];
    const float g = pc->grads[i];
    *m = quant_dynamic_signed[c1] * sg->scale1 * hp->beta1 + (1.0f - hp->beta1) * g;
    *v = quant_dynamic_unsigned[c2] * sg->scale2 * hp->beta2 + (1.0f - hp->beta2) * g * g;
}

void adamw8bit_round(int round, const struct optimizer_piece *pc,
                     const struct optimizer_hparams *hp)
{
    const size_t n = pc->hi - pc->lo;
    if (adamw8bit_quantised(pc->numel, hp)) {
        if (round != 0)
            return;
        const size_t nb = adamw8bit_blocks(pc->numel);
        double *max1 = pc->stats[0], *max2 = pc->stats[0] + nb;
        for (size_t i = 0, end; i < n; i = end) {
            const struct adamw8bit_segment sg = adamw8bit_segment_at(pc, i);
            end = sg.end;
            /* NaN moments are passed over, as fmax passes them */
            float top1 = 0.0f, top2 = 0.0f;
            for (size_t j = i; j < end; j++) {
                float m, v;
                adamw8bit_moments(pc, j, &sg, hp, &m, &v);
                top1 = fabsf(m) > top1 ? fabsf(m) : top1;
                top2 = fabsf(v) > top2 ? fabsf(v) : top2;
            }
            max1[sg.block] = fmax(max1[sg.block], top1);
            max2[sg.block] = fmax(max2[sg.block], top2);
        }
        return;
    }
    if (round != 1)
        return;
    const float *m_old = pc->tensor_state, *v_old = pc->tensor_state + pc->numel;
    double *m_new = pc->stats[1], *v_new = pc->stats[1] + pc->numel;
    for (size_t i = 0; i < n; i++) {
        const size_t at = optimizer_slice_index(&pc->slice, pc->lo + i);
        const float g = pc->grads[i];
        m_new[at] = hp->beta1 * m_old[at] + (1.0f - hp->beta1) * g;
        v_new[at] = hp->beta2 * v_old[at] + (1.0f - hp->beta2) * g * g;
    }
}

/* bitsandbytes' step: p += -lr sqrt(bc2) / bc1 * m / (sqrt(v) + eps sqrt(bc2)),
 * then the decoupled decay p *= 1 - lr wd. The factors are the step's,
 * computed once per piece: two powf per element cost more than the rest
 * of the update. */
struct adamw8bit_step {
    float step_size; /* -lr sqrt(bc2) / bc1 */
    float eps;       /* eps sqrt(bc2) */
    float keep;      /* 1 - lr wd decay */
};

static struct adamw8bit_step adamw8bit_step_of(float decay, const struct optimizer_hparams *hp)
{
    const float bc1 = 1.0f - powf(hp->beta1, (float)hp->step);
    const float bc2 = sqrtf(1.0f - powf(hp->beta2, (float)hp->step));
    return (struct adamw8bit_step){.step_size = -hp->lr * bc2 / bc1,
                                   .eps = bc2 * hp->eps,
                                   .keep = 1.0f - hp->lr * hp->weight_decay * decay};
}

static float adamw8bit_param(float p, float m, float v, const struct adamw8bit_step *k)
{
    p += k->step_size * (m / (sqrtf(v) + k->eps));
    return p * k->keep;
}

static void adamw8bit_apply_quantised(const struct optimizer_piece *pc,
                                      const struct optimizer_hparams *hp)
{
    const size_t nb = adamw8bit_blocks(pc->numel);
    const double *max1 = pc->stats[0], *max2 = pc->stats[0] + nb;
    unsigned char *c1 = pc->states[0], *c2 = pc->states[1];
    const struct adamw8bit_step k = adamw8bit_step_of(pc->decay, hp);
    for (size_t i = 0, end; i < pc->hi - pc->lo; i = end) {
        const struct adamw8bit_segment sg = adamw8bit_segment_at(pc, i);
        end = sg.end;
        /* an all-zero block has absmax 0: its codes are those of 0 */
        const float a1 = (float)max1[sg.block], a2 = (float)max2[sg.block];
        for (size_t j = i; j < end; j++) {
            float m, v;
            adamw8bit_moments(pc, j, &sg, hp, &m, &v);
            pc->params[j] = adamw8bit_param(pc->params[j], m, v, &k);
            unsigned char q1 = quant_index_encode(&quant_index_signed, a1 > 0.0f ? m / a1 : 0.0f);
            /* the first moment keeps its sign (bitsandbytes' rule) */
            if (signbit(quant_dynamic_signed[q1]) != signbit(m))
                q1 = (unsigned char)(m > 0.0f ? q1 + 1 : q1 - 1);
            c1[j] = q1;
            c2[j] = quant_index_encode(&quant_index_unsigned, a2 > 0.0f ? v / a2 : 0.0f);
        }
    }
    /* every rank, holding a piece or not, takes the new scales */
    for (size_t b = 0; b < 2 * nb; b++)
        pc->tensor_state[b] = (float)pc->stats[0][b];
}

void adamw8bit_apply(const struct optimizer_piece *pc, const struct optimizer_hparams *hp)
{
    if (adamw8bit_quantised(pc->numel, hp)) {
        adamw8bit_apply_quantised(pc, hp);
        return;
    }
    const double *m_new = pc->stats[1], *v_new = pc->stats[1] + pc->numel;
    const struct adamw8bit_step k = adamw8bit_step_of(pc->decay, hp);
    for (size_t i = 0; i < pc->hi - pc->lo; i++) {
        const size_t at = optimizer_slice_index(&pc->slice, pc->lo + i);
        pc->params[i] = adamw8bit_param(pc->params[i], (float)m_new[at], (float)v_new[at], &k);
    }
    for (size_t at = 0; at < pc->numel; at++) {
        pc->tensor_state[at] = (float)m_new[at];
        pc->tensor_state[pc->numel + at] = (float)v_new[at];
    }
}
