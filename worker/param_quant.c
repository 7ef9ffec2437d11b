/* worker/param_quant.c — the 4-bit base's unit images (see param_quant.h). */
#include "param_quant.h"

#include <stdlib.h>
#include <string.h>

#include "../common/half.h"
#include "precision.h"

/* Tensors start at multiples of 4 bytes (quant4 regions need it). */
static size_t align4(size_t n)
{
    return (n + 3) & ~(size_t)3;
}

static size_t tensor_bytes(const struct param_table *t, const struct param_tensor *p,
                           enum zt_dtype working)
{
    if (p->storage == PARAM_STORAGE_Q4)
        return quant4_bytes(p->numel, t->quant.double_quant);
    return align4(p->numel * zt_dtype_size(working));
}

zt_status param_quant_attach(struct param_table *t, const struct param_quant_spec *spec)
{
    int n = 0;
    for (int k = 0; k < t->n_tensors; k++) {
        struct param_tensor *p = &t->tensors[k];
        if (p->linear != PARAM_LINEAR || p->trainable)
            continue;
        p->storage = PARAM_STORAGE_Q4;
        n++;
    }
    if (n == 0)
        return zt_error_set(ZT_ERR_CONFIG,
                            "quantization.load_in_4bit: no frozen linear layer to store in 4 bits "
                            "(4-bit storage is for a frozen base: set lora.enabled: true)");
    t->quant = (struct param_quant){1, (int)spec->type, spec->double_quant, spec->compute};
    return ZT_OK;
}

int param_quant_unit_packed(const struct param_table *t, int u)
{
    if (!t->quant.enabled)
        return 0;
    for (int k = 0; k < t->n_tensors; k++)
        if (t->tensors[k].unit == u && t->tensors[k].storage == PARAM_STORAGE_Q4)
            return 1;
    return 0;
}

size_t param_quant_unit_bytes(const struct param_table *t, int u, enum zt_dtype working)
{
    size_t bytes = 0;
    for (int k = 0; k < t->n_tensors; k++)
        if (t->tensors[k].unit == u)
            bytes += tensor_bytes(t, &t->tensors[k], working);
    return bytes;
}

void param_quant_encode(const struct param_table *t, int u, enum zt_dtype working, const float *src,
                        void *image)
{
    unsigned char *at = image;
    const size_t base = t->unit_offset[u];
    for (int k = 0; k < t->n_tensors; k++) {
        const struct param_tensor *p = &t->tensors[k];
        if (p->unit != u)
            continue;
        const size_t bytes = tensor_bytes(t, p, working);
        const float *x = src + (p->offset - base);
        if (p->storage == PARAM_STORAGE_Q4) {
            quant4_quantize_region((enum quant4_type)t->quant.type, t->quant.double_quant, x,
                                   p->numel, at);
        } else {
            memset(at, 0, bytes);
            precision_from_f32(working, x, at, p->numel);
        }
        at += bytes;
    }
}

size_t param_quant_tensor_bytes(const struct param_table *t, int k, enum zt_dtype working)
{
    return tensor_bytes(t, &t->tensors[k], working);
}

/* Blocks [*k0, *k1) of a 4-bit tensor whose codes lie in region bytes
 * [keep_lo, keep_hi) (a block's codes: QUANT4_BLOCK / 2 bytes from
 * b * QUANT4_BLOCK / 2). */
void param_quant_kept_blocks(size_t numel, size_t keep_lo, size_t keep_hi, size_t *k0, size_t *k1)
{
    const size_t half = QUANT4_BLOCK / 2, blocks = quant4_blocks(numel ? numel : 1);
    *k0 = keep_lo / half < blocks ? keep_lo / half : blocks;
    *k1 = (keep_hi + half - 1) / half < blocks ? (keep_hi + half - 1) / half : blocks;
    if (*k1 < *k0)
        *k1 = *k0;
}

/* Elements [lo, lo + n) of a 4-bit tensor, chunk x: codes for blocks
 * [k0, k1), and every block's scale (double quantisation's offset is the
 * mean of all of them; without it, kept bytes may hold any block's). */
static void quantize_kept(enum quant4_type type, const float *x, size_t lo, size_t n, size_t k0,
                          size_t k1, unsigned char *codes, float *absmax)
{
    const size_t first = lo / QUANT4_BLOCK, last = first + quant4_blocks(n);
    const size_t a = k0 < first ? first : k0 > last ? last : k0;
    const size_t b = k1 < a ? a : k1 > last ? last : k1;
    const size_t ea = (a - first) * QUANT4_BLOCK,
                 eb = (b - first) * QUANT4_BLOCK < n ? (b - first) * QUANT4_BLOCK : n;
    if (ea)
        quant4_absmax(x, ea, absmax + first);
    if (eb > ea)
        quant4_quantize(type, x + ea, eb - ea, codes + a * (QUANT4_BLOCK / 2), absmax + a);
    if (n > eb)
        quant4_absmax(x + eb, n - eb, absmax + b);
}

zt_status param_quant_encode_tensor(const struct param_table *t, int k, enum zt_dtype working,
                                    const struct param_quant_source *src, size_t keep_lo,
                                    size_t keep_hi, float *chunk, size_t chunk_n, float *scales,
                                    void *region)
{
    const struct param_tensor *p = &t->tensors[k];
    const int q4 = p->storage == PARAM_STORAGE_Q4, dq = t->quant.double_quant;
    const struct quant4_layout l = quant4_layout(p->numel ? p->numel : 1, dq);
    unsigned char *r = region;
    ZT_ASSERT(chunk_n > 0 && chunk_n % QUANT4_BLOCK == 0);
    memset(r, 0, tensor_bytes(t, p, working)); /* the padding */
    size_t k0, k1;
    param_quant_kept_blocks(p->numel, keep_lo, keep_hi, &k0, &k1);
    /* blocks are independent but for double quantisation's offset, the
     * mean of every scale: keep them all, then quantise them */
    float *absmax = q4 && !dq ? (float *)(r + l.absmax) : scales;
    for (size_t lo = 0; lo < p->numel; lo += chunk_n) {
        const size_t n = p->numel - lo < chunk_n ? p->numel - lo : chunk_n;
        ZT_TRY(src->read(src->ctx, p->offset + lo, n, chunk));
        if (q4)
            quantize_kept((enum quant4_type)t->quant.type, chunk, lo, n, k0, k1, r, absmax);
        else
            precision_from_f32(working, chunk, r + lo * zt_dtype_size(working), n);
    }
    if (q4 && dq)
        quant4_double_quantize(absmax, l.blocks, r + l.qabsmax, (float *)(r + l.absmax2),
                               (float *)(r + l.offset));
    return ZT_OK;
}

/* y[0..n) rounded to the 16-bit compute dtype and widened back (F32: as
 * they are). */
static void round_through(enum zt_dtype compute, float *y, size_t n)
{
    if (compute == ZT_BF16)
        for (size_t i = 0; i < n; i++)
            y[i] = zt_bf16_to_f32(zt_f32_to_bf16(y[i]));
    else if (compute == ZT_F16)
        for (size_t i = 0; i < n; i++)
            y[i] = zt_f16_to_f32(zt_f32_to_f16(y[i]));
}

/* bf16 into bf16 at once; else a chunk at a time through fp32 when `to` is
 * 16-bit. */
void param_quant_decode_region(const struct param_quant *q, const void *region, size_t numel,
                               enum zt_dtype to, void *y)
{
    enum { CHUNK = 2048 };
    const enum quant4_type type = (enum quant4_type)q->type;
    if (to == ZT_BF16 && q->compute == ZT_BF16) { /* rounded once: the same bits */
        quant4_dequantize_region_bf16(type, q->double_quant, region, numel, 0, numel, y);
        return;
    }
    if (to == ZT_F32) {
        quant4_dequantize_region(type, q->double_quant, region, numel, 0, numel, y);
        round_through(q->compute, y, numel);
        return;
    }
    float chunk[CHUNK];
    for (size_t lo = 0; lo < numel; lo += CHUNK) {
        const size_t hi = lo + CHUNK < numel ? lo + CHUNK : numel;
        quant4_dequantize_region(type, q->double_quant, region, numel, lo, hi, chunk);
        round_through(q->compute, chunk, hi - lo);
        precision_from_f32(to, chunk, (char *)y + lo * zt_dtype_size(to), hi - lo);
    }
}

void param_quant_decode(const struct param_table *t, int u, enum zt_dtype working,
                        const void *image, enum zt_dtype to, void *dst)
{
    ZT_ASSERT(to == ZT_F32 || to == working);
    const unsigned char *at = image;
    const size_t base = t->unit_offset[u], esz = zt_dtype_size(to);
    for (int k = 0; k < t->n_tensors; k++) {
        const struct param_tensor *p = &t->tensors[k];
        if (p->unit != u)
            continue;
        char *y = (char *)dst + (p->offset - base) * esz;
        if (p->storage == PARAM_STORAGE_Q4)
            param_quant_decode_region(&t->quant, at, p->numel, to, y);
        else if (to == ZT_F32)
            precision_to_f32(working, at, (float *)y, p->numel);
        else
            memcpy(y, at, p->numel * esz);
        at += tensor_bytes(t, p, working);
    }
}

zt_status param_quant_round_trip(const struct param_table *t, float *params)
{
    for (int u = 0; u < t->n_units; u++) {
        if (!param_quant_unit_packed(t, u))
            continue;
        /* working precision fp32: the unit's other tensors come back as
         * they are */
        void *image = malloc(param_quant_unit_bytes(t, u, ZT_F32));
        if (!image)
            return zt_error_set(ZT_ERR_NOMEM, "cannot allocate a 4-bit unit's image");
        float *unit = params + t->unit_offset[u];
        param_quant_encode(t, u, ZT_F32, unit, image);
        param_quant_decode(t, u, ZT_F32, image, ZT_F32, unit);
        free(image);
    }
    return ZT_OK;
}

size_t param_quant_region_bytes(const struct param_table *t)
{
    size_t n = 0;
    for (int k = 0; k < t->n_tensors; k++)
        if (t->tensors[k].storage == PARAM_STORAGE_Q4)
            n += quant4_bytes(t->tensors[k].numel, t->quant.double_quant);
    return n;
}

size_t param_quant_numel(const struct param_table *t)
{
    size_t n = 0;
    for (int k = 0; k < t->n_tensors; k++)
        if (t->tensors[k].storage == PARAM_STORAGE_Q4)
            n += t->tensors[k].numel;
    return n;
}
