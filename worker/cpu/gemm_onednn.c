/* worker/cpu/gemm_onednn.c — cpu_gemm's products as oneDNN matmul
 * primitives.
 *
 * A product maps onto one matmul: src = A [M,K], weights = B [K,N],
 * dst = C [M,N], each described by its strides, so a transposed operand
 * is the stride pair {1, ld} and a column slice of wider rows is {ld, 1}.
 * alpha is the primitive's output scale; accumulation is a sum post-op of
 * scale 1 (dst = alpha A B + dst), which oneDNN folds into the kernel's
 * store instead of a second pass over C.
 *
 * A primitive is built for the thread count OpenMP gives at that moment
 * (its work split depends on it), so the count is part of the key. The
 * memory objects are built with the primitive and only repointed at each
 * call's buffers.
 */
#include "worker/cpu/gemm_impl.h"

#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <oneapi/dnnl/dnnl.h>
#include <oneapi/dnnl/dnnl_debug.h>

/* oneDNN's status at the boundary: ZT_ERR_DEVICE naming the call. */
#define DNNL_TRY(call)                                                                             \
    do {                                                                                           \
        dnnl_status_t st_ = (call);                                                                \
        if (st_ != dnnl_success)                                                                   \
            return zt_error_set(ZT_ERR_DEVICE, "oneDNN %s failed: %s", #call,                      \
                                dnnl_status2str(st_));                                             \
    } while (0)

/* A product less its pointers: what a primitive is built for. */
struct key {
    int trans_a, trans_b, M, N, K, lda, ldb, ldc, accumulate, ab_type, c_type, threads;
    float alpha;
};

struct prim {
    struct key key;
    dnnl_primitive_desc_t pd;
    dnnl_primitive_t p;
    dnnl_memory_t a, b, c;
    dnnl_memory_t scratch; /* own_scratch only */
    const char *kernel;    /* the pd's implementation name, owned by pd */
    int generic;
    struct prim *next;
};

struct gemm_onednn {
    dnnl_engine_t engine;
    dnnl_stream_t stream;
    struct prim *prims; /* most recently built first */
    int own_scratch;
};

zt_status gemm_onednn_open(int own_scratch, struct gemm_onednn **out)
{
    *out = NULL;
    struct gemm_onednn *d = calloc(1, sizeof *d);
    if (!d)
        return zt_error_set(ZT_ERR_NOMEM, "oneDNN GEMM state: out of memory");
    d->own_scratch = own_scratch;
    zt_status s = ZT_OK;
    if (dnnl_engine_create(&d->engine, dnnl_cpu, 0) != dnnl_success)
        s = zt_error_set(ZT_ERR_DEVICE, "oneDNN: the CPU engine would not open");
    else if (dnnl_stream_create(&d->stream, d->engine, dnnl_stream_default_flags) != dnnl_success)
        s = zt_error_set(ZT_ERR_DEVICE, "oneDNN: the CPU stream would not open");
    if (s != ZT_OK) {
        gemm_onednn_close(d);
        return s;
    }
    *out = d;
    return ZT_OK;
}

static void prim_free(struct prim *p)
{
    if (p->a)
        dnnl_memory_destroy(p->a);
    if (p->b)
        dnnl_memory_destroy(p->b);
    if (p->c)
        dnnl_memory_destroy(p->c);
    if (p->scratch)
        dnnl_memory_destroy(p->scratch);
    if (p->p)
        dnnl_primitive_destroy(p->p);
    if (p->pd)
        dnnl_primitive_desc_destroy(p->pd);
    free(p);
}

void gemm_onednn_close(struct gemm_onednn *d)
{
    if (!d)
        return;
    for (struct prim *p = d->prims, *next; p; p = next) {
        next = p->next;
        prim_free(p);
    }
    if (d->stream)
        dnnl_stream_destroy(d->stream);
    if (d->engine)
        dnnl_engine_destroy(d->engine);
    free(d);
}

static struct key key_of(const struct cpu_gemm_call *c)
{
    struct key k;
    memset(&k, 0, sizeof k); /* the padding too: keys are compared with memcmp */
    k.trans_a = c->trans_a, k.trans_b = c->trans_b;
    k.M = c->M, k.N = c->N, k.K = c->K;
    k.lda = c->lda, k.ldb = c->ldb, k.ldc = c->ldc;
    k.accumulate = c->accumulate, k.ab_type = (int)c->ab_type, k.c_type = (int)c->c_type;
    k.threads = omp_get_max_threads();
    k.alpha = c->alpha;
    return k;
}

static dnnl_data_type_t dnnl_type(int t)
{
    return t == ZT_BF16 ? dnnl_bf16 : t == ZT_F16 ? dnnl_f16 : dnnl_f32;
}

/* The memory descriptors of a product's three operands. */
static zt_status describe(const struct key *k, dnnl_memory_desc_t *a, dnnl_memory_desc_t *b,
                          dnnl_memory_desc_t *c)
{
    const dnnl_data_type_t t = dnnl_type(k->ab_type), ct = dnnl_type(k->c_type);
    dnnl_dims_t ad = {k->M, k->K}, bd = {k->K, k->N}, cd = {k->M, k->N};
    dnnl_dims_t as = {k->lda, 1}, bs = {k->ldb, 1}, cs = {k->ldc, 1};
    if (k->trans_a)
        as[0] = 1, as[1] = k->lda;
    if (k->trans_b)
        bs[0] = 1, bs[1] = k->ldb;
    DNNL_TRY(dnnl_memory_desc_init_by_strides(a, 2, ad, t, as));
    DNNL_TRY(dnnl_memory_desc_init_by_strides(b, 2, bd, t, bs));
    DNNL_TRY(dnnl_memory_desc_init_by_strides(c, 2, cd, ct, cs));
    return ZT_OK;
}

/* The attributes: alpha as the output scale, accumulation as a sum, and
 * who holds the scratch. */
static zt_status attributes(const struct key *k, int own_scratch, dnnl_primitive_attr_t attr)
{
    if (own_scratch)
        DNNL_TRY(dnnl_primitive_attr_set_scratchpad_mode(attr, dnnl_scratchpad_mode_user));
    if (k->alpha != 1.0f)
        DNNL_TRY(dnnl_primitive_attr_set_output_scales(attr, 1, 0, &k->alpha));
    if (!k->accumulate)
        return ZT_OK;
    dnnl_post_ops_t po;
    DNNL_TRY(dnnl_post_ops_create(&po));
    dnnl_status_t st = dnnl_post_ops_append_sum(po, 1.0f);
    if (st == dnnl_success)
        st = dnnl_primitive_attr_set_post_ops(attr, po);
    dnnl_post_ops_destroy(po);
    DNNL_TRY(st);
    return ZT_OK;
}

static zt_status build(struct gemm_onednn *d, const struct key *k, struct prim *p)
{
    dnnl_memory_desc_t a, b, c;
    ZT_TRY(describe(k, &a, &b, &c));
    dnnl_matmul_desc_t md;
    DNNL_TRY(dnnl_matmul_desc_init(&md, &a, &b, NULL, &c));
    dnnl_primitive_attr_t attr;
    DNNL_TRY(dnnl_primitive_attr_create(&attr));
    zt_status s = attributes(k, d->own_scratch, attr);
    dnnl_status_t st = dnnl_success;
    if (s == ZT_OK)
        st = dnnl_primitive_desc_create(&p->pd, &md, attr, d->engine, NULL);
    dnnl_primitive_attr_destroy(attr);
    ZT_TRY(s);
    if (st == dnnl_unimplemented && k->ab_type != ZT_F32) {
        char v[32];
        gemm_onednn_version(v, sizeof v);
        /* the instructions are not enough: oneDNN 2.6 has no fp16 kernel for a
         * CPU that has AVX512-FP16 */
        return zt_error_set(ZT_ERR_UNSUPPORTED, "oneDNN %s has no %s GEMM for this CPU (%s)", v,
                            zt_precision_name((enum zt_dtype)k->ab_type),
                            k->ab_type == ZT_BF16
                                ? "it needs AVX-512, AVX512-BF16 or AMX"
                                : "it needs AVX512-FP16 or AMX-FP16 and a oneDNN with kernels "
                                  "for them");
    }
    DNNL_TRY(st);
    DNNL_TRY(dnnl_primitive_create(&p->p, p->pd));
    DNNL_TRY(dnnl_memory_create(&p->a, &a, d->engine, DNNL_MEMORY_NONE));
    DNNL_TRY(dnnl_memory_create(&p->b, &b, d->engine, DNNL_MEMORY_NONE));
    DNNL_TRY(dnnl_memory_create(&p->c, &c, d->engine, DNNL_MEMORY_NONE));
    if (d->own_scratch)
        DNNL_TRY(dnnl_memory_create(
            &p->scratch, dnnl_primitive_desc_query_md(p->pd, dnnl_query_scratchpad_md, 0),
            d->engine, DNNL_MEMORY_ALLOCATE));
    DNNL_TRY(dnnl_primitive_desc_query(p->pd, dnnl_query_impl_info_str, 0, &p->kernel));
    p->generic = strncmp(p->kernel, "ref", 3) == 0;
    /* A 16-bit reference loop would take hours where a kernel takes seconds. */
    if (p->generic && k->ab_type != ZT_F32)
        return zt_error_set(ZT_ERR_UNSUPPORTED, "oneDNN has only its reference %s GEMM (%s) here",
                            zt_precision_name((enum zt_dtype)k->ab_type), p->kernel);
    return ZT_OK;
}

/* The primitive for k, built and put first when new. */
static zt_status lookup(struct gemm_onednn *d, const struct key *k, struct prim **out)
{
    for (struct prim *p = d->prims; p; p = p->next)
        if (memcmp(&p->key, k, sizeof *k) == 0) {
            *out = p;
            return ZT_OK;
        }
    struct prim *p = calloc(1, sizeof *p);
    if (!p)
        return zt_error_set(ZT_ERR_NOMEM, "oneDNN GEMM primitive: out of memory");
    p->key = *k;
    zt_status s = build(d, k, p);
    if (s != ZT_OK) {
        prim_free(p);
        return s;
    }
    p->next = d->prims;
    d->prims = p;
    *out = p;
    return ZT_OK;
}

zt_status gemm_onednn_kernel(struct gemm_onednn *d, const struct cpu_gemm_call *c,
                             const char **kernel, int *generic)
{
    const struct key k = key_of(c);
    struct prim *p;
    ZT_TRY(lookup(d, &k, &p));
    *kernel = p->kernel;
    *generic = p->generic;
    return ZT_OK;
}

zt_status gemm_onednn_run(struct gemm_onednn *d, const struct cpu_gemm_call *c)
{
    const struct key k = key_of(c);
    struct prim *p;
    ZT_TRY(lookup(d, &k, &p));
    DNNL_TRY(dnnl_memory_set_data_handle(p->a, (void *)c->A));
    DNNL_TRY(dnnl_memory_set_data_handle(p->b, (void *)c->B));
    DNNL_TRY(dnnl_memory_set_data_handle(p->c, c->C));
    dnnl_exec_arg_t args[] = {{DNNL_ARG_SRC, p->a},
                              {DNNL_ARG_WEIGHTS, p->b},
                              {DNNL_ARG_DST, p->c},
                              {DNNL_ARG_SCRATCHPAD, p->scratch}};
    DNNL_TRY(dnnl_primitive_execute(p->p, d->stream, p->scratch ? 4 : 3, args));
    DNNL_TRY(dnnl_stream_wait(d->stream));
    return ZT_OK;
}

void gemm_onednn_version(char *buf, size_t n)
{
    const dnnl_version_t *v = dnnl_version();
    snprintf(buf, n, "%d.%d.%d", v->major, v->minor, v->patch);
}
