/* worker/param_quant.h — a frozen base stored in 4 bits (QLoRA).
 *
 * QLoRA (Dettmers et al., 2023) keeps the frozen base model's linear
 * weights as 4-bit block-wise codes (worker/quant4.h: NF4 or FP4, blocks
 * of 64, optionally with the block scales quantised again) and trains LoRA
 * adapters on top; each weight is dequantised when a layer uses it and the
 * dequantised copy is dropped after. Which weights: every linear layer's
 * but the output head's, as Hugging Face's bitsandbytes integration
 * converts them (the head and the embeddings, norms and biases keep the
 * working precision).
 *
 * Storage. A unit holding a 4-bit tensor is *packed*: its working copy is
 * one byte image of its tensors in table order, each 4-bit tensor as its
 * quant4 region (codes, then its scales), every other tensor as its
 * elements in the working precision, each tensor starting at a multiple of
 * 4 bytes. The ZeRO engine shards and gathers that image as bytes and
 * decodes a gathered unit into the type the passes compute in; a packed unit is
 * always frozen, so nothing else about it is stored. Encoding needs the
 * whole unit (a tensor's double-quantisation offset is the mean of all its
 * block scales), so whoever loads weights encodes full units and keeps
 * its share of the image.
 *
 * bnb_4bit_compute_dtype: bitsandbytes dequantises into the compute dtype.
 * Here the dequantised weights are rounded through it, which is the value
 * bitsandbytes' matmul reads, whatever type the passes compute in.
 */
#ifndef ZT_WORKER_PARAM_QUANT_H
#define ZT_WORKER_PARAM_QUANT_H

#include <stddef.h>

#include "../common/dtype.h"
#include "../common/status.h"
#include "model_family.h"
#include "quant4.h"

struct param_quant_spec {
    enum quant4_type type;
    int double_quant;
    enum zt_dtype compute; /* ZT_F32, ZT_BF16 or ZT_F16 */
};

/* Stores t's frozen linear weights, but the output head's, in 4 bits.
 * Errors: ZT_ERR_CONFIG when none is frozen (4-bit storage is for a
 * frozen base: enable lora). */
zt_status param_quant_attach(struct param_table *t, const struct param_quant_spec *spec);

/* Whether unit u is packed (holds a 4-bit tensor). */
int param_quant_unit_packed(const struct param_table *t, int u);

/* Bytes of packed unit u's image with `working` the run's precision. */
size_t param_quant_unit_bytes(const struct param_table *t, int u, enum zt_dtype working);

/* Encodes unit u's values src[unit size] (fp32, host) into its image
 * (host memory of param_quant_unit_bytes bytes). */
void param_quant_encode(const struct param_table *t, int u, enum zt_dtype working, const float *src,
                        void *image);

/* Bytes tensor k takes in its unit's image (tensors lie there in table
 * order): its 4-bit region, or its elements in the working precision,
 * rounded up to a multiple of 4. */
size_t param_quant_tensor_bytes(const struct param_table *t, int k, enum zt_dtype working);

/* Where param_quant_encode_tensor reads a tensor's values from: n fp32
 * values of flat elements [first, first + n) into dst. */
struct param_quant_source {
    zt_status (*read)(void *ctx, size_t first, size_t n, float *dst);
    void *ctx;
};

/* Encodes tensor k (of a packed unit) into region[param_quant_tensor_bytes]
 * (4-byte aligned host memory), its bytes of the unit's image, exactly as
 * param_quant_encode does in bytes [keep_lo, keep_hi) of the region (a
 * rank's share; the others may be left zero: a 4-bit tensor's codes are
 * computed only for the blocks those bytes hold), reading its values
 * chunk_n (a multiple of QUANT4_BLOCK) at a time into chunk[chunk_n]: a
 * loader then never holds the unit, or the tensor, in fp32. `scales` has
 * room for quant4_blocks(numel) floats (used under double quantisation).
 * Errors: the source's. */
zt_status param_quant_encode_tensor(const struct param_table *t, int k, enum zt_dtype working,
                                    const struct param_quant_source *src, size_t keep_lo,
                                    size_t keep_hi, float *chunk, size_t chunk_n, float *scales,
                                    void *region);

/* The blocks [*k0, *k1) whose codes param_quant_encode_tensor computes for
 * region bytes [keep_lo, keep_hi) of a 4-bit tensor of numel elements. */
void param_quant_kept_blocks(size_t numel, size_t keep_lo, size_t keep_hi, size_t *k0, size_t *k1);

/* Decodes packed unit u's image (host memory) into dst[unit size] (host)
 * of type `to`, fp32 or the working precision: 4-bit tensors dequantised
 * and rounded through the compute dtype, the others widened or copied. */
void param_quant_decode(const struct param_table *t, int u, enum zt_dtype working,
                        const void *image, enum zt_dtype to, void *dst);

/* A 4-bit tensor's values, its region (quant4.h) of numel elements,
 * dequantised into y[numel] of type `to` (fp32 or the compute dtype q
 * names), rounded through q's compute dtype: what param_quant_decode does
 * for each 4-bit tensor of a unit at every use. */
void param_quant_decode_region(const struct param_quant *q, const void *region, size_t numel,
                               enum zt_dtype to, void *y);

/* Replaces each 4-bit tensor's values in params[t->n_params] (fp32, host,
 * the flat order) by what its storage gives back: quantised and
 * dequantised, rounded through the compute dtype. The model a 4-bit run
 * computes with, for export. Errors: ZT_ERR_NOMEM. */
zt_status param_quant_round_trip(const struct param_table *t, float *params);

/* How many of t's parameters are stored in 4 bits, and the bytes of their
 * regions (codes and scales) in the images. */
size_t param_quant_numel(const struct param_table *t);
size_t param_quant_region_bytes(const struct param_table *t);

#endif
