/* worker/cpu/gemm.c — cpu_gemm: which library runs a product, and the
 * OpenBLAS side.
 *
 * The choice is made per product shape, once: under CPU_GEMM_AUTO the
 * oneDNN primitive is built (gemm_onednn.c keeps it), and when oneDNN has
 * only its reference loop for the shape an fp32 product goes to OpenBLAS
 * instead (a bf16 one has nowhere else to go and stays). Forcing a
 * library is for records that must not move with the CPU and for
 * benchmarks.
 */
#include "worker/cpu/gemm.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cblas.h>

#include "worker/cpu/gemm_impl.h"

struct cpu_gemm {
    enum cpu_gemm_lib lib;    /* never AUTO's environment lookup: resolved */
    struct gemm_onednn *dnnl; /* NULL when forced to OpenBLAS */
};

static const char *const LIB_NAMES[CPU_GEMM_LIB_COUNT] = {
    [CPU_GEMM_AUTO] = "auto", [CPU_GEMM_ONEDNN] = "onednn", [CPU_GEMM_OPENBLAS] = "openblas"};

const char *cpu_gemm_lib_name(enum cpu_gemm_lib lib)
{
    return (unsigned)lib < CPU_GEMM_LIB_COUNT ? LIB_NAMES[lib] : "?";
}

/* ZT_CPU_GEMM's library, or AUTO when it is unset or empty. */
static zt_status lib_from_env(enum cpu_gemm_lib *lib)
{
    const char *v = getenv("ZT_CPU_GEMM");
    *lib = CPU_GEMM_AUTO;
    if (!v || !*v)
        return ZT_OK;
    for (int k = 0; k < CPU_GEMM_LIB_COUNT; k++)
        if (strcmp(v, LIB_NAMES[k]) == 0) {
            *lib = (enum cpu_gemm_lib)k;
            return ZT_OK;
        }
    return zt_error_set(ZT_ERR_CONFIG,
                        "ZT_CPU_GEMM=%s: unknown GEMM library (auto, onednn, openblas)", v);
}

static zt_status create(enum cpu_gemm_lib lib, int own_scratch, struct cpu_gemm **out)
{
    *out = NULL;
    if (lib == CPU_GEMM_AUTO)
        ZT_TRY(lib_from_env(&lib));
    struct cpu_gemm *g = calloc(1, sizeof *g);
    if (!g)
        return zt_error_set(ZT_ERR_NOMEM, "GEMM state: out of memory");
    g->lib = lib;
    if (lib != CPU_GEMM_OPENBLAS) {
        zt_status s = gemm_onednn_open(own_scratch, &g->dnnl);
        if (s != ZT_OK) {
            free(g);
            return s;
        }
    }
    *out = g;
    return ZT_OK;
}

zt_status cpu_gemm_create(enum cpu_gemm_lib lib, struct cpu_gemm **out)
{
    return create(lib, 0, out);
}

void cpu_gemm_destroy(struct cpu_gemm *g)
{
    if (!g)
        return;
    gemm_onednn_close(g->dnnl);
    free(g);
}

struct cpu_gemm_team {
    int n;
    struct cpu_gemm *member[]; /* n slots, NULL until their thread asks */
};

zt_status cpu_gemm_team_create(int threads, struct cpu_gemm_team **out)
{
    *out = calloc(1, sizeof **out + (size_t)threads * sizeof(struct cpu_gemm *));
    if (!*out)
        return zt_error_set(ZT_ERR_NOMEM, "GEMM states for %d threads: out of memory", threads);
    (*out)->n = threads;
    return ZT_OK;
}

void cpu_gemm_team_destroy(struct cpu_gemm_team *t)
{
    if (!t)
        return;
    for (int i = 0; i < t->n; i++)
        cpu_gemm_destroy(t->member[i]);
    free(t);
}

int cpu_gemm_team_size(const struct cpu_gemm_team *t)
{
    return t->n;
}

zt_status cpu_gemm_team_member(struct cpu_gemm_team *t, int i, struct cpu_gemm **out)
{
    ZT_ASSERT(i >= 0 && i < t->n);
    if (!t->member[i])
        ZT_TRY(create(CPU_GEMM_AUTO, 1, &t->member[i]));
    *out = t->member[i];
    return ZT_OK;
}

static void openblas_run(const struct cpu_gemm_call *c)
{
    cblas_sgemm(CblasRowMajor, c->trans_a ? CblasTrans : CblasNoTrans,
                c->trans_b ? CblasTrans : CblasNoTrans, c->M, c->N, c->K, c->alpha, c->A, c->lda,
                c->B, c->ldb, c->accumulate ? 1.0f : 0.0f, (float *)c->C, c->ldc);
}

/* Whether c goes to OpenBLAS under g's library. */
static zt_status takes_openblas(struct cpu_gemm *g, const struct cpu_gemm_call *c, int *blas)
{
    *blas = g->lib == CPU_GEMM_OPENBLAS;
    if (g->lib != CPU_GEMM_AUTO || c->ab_type != ZT_F32 || c->c_type != ZT_F32)
        return ZT_OK;
    const char *kernel;
    return gemm_onednn_kernel(g->dnnl, c, &kernel, blas);
}

/* C = alpha * (an empty sum) + C or 0: no library is asked (oneDNN
 * refuses K = 0). */
static void empty_sum(const struct cpu_gemm_call *c)
{
    if (c->accumulate)
        return;
    const size_t es = zt_dtype_size(c->c_type);
    for (int i = 0; i < c->M; i++)
        memset((char *)c->C + (size_t)i * c->ldc * es, 0, (size_t)c->N * es);
}

static zt_status run(struct cpu_gemm *g, const struct cpu_gemm_call *c)
{
    if (c->M == 0 || c->N == 0)
        return ZT_OK;
    if (c->K == 0) {
        empty_sum(c);
        return ZT_OK;
    }
    int blas;
    ZT_TRY(takes_openblas(g, c, &blas));
    if (blas && (c->ab_type != ZT_F32 || c->c_type != ZT_F32))
        return zt_error_set(ZT_ERR_UNSUPPORTED,
                            "a %s GEMM needs oneDNN (ZT_CPU_GEMM=openblas has fp32 only)",
                            zt_precision_name(c->ab_type != ZT_F32 ? c->ab_type : c->c_type));
    if (blas) {
        openblas_run(c);
        return ZT_OK;
    }
    return gemm_onednn_run(g->dnnl, c);
}

zt_status cpu_gemm_run(struct cpu_gemm *g, const struct cpu_gemm_call *c)
{
    if (g)
        return run(g, c);
    ZT_TRY(cpu_gemm_create(CPU_GEMM_AUTO, &g));
    zt_status s = run(g, c);
    cpu_gemm_destroy(g);
    return s;
}

/* A linear layer's forward at GPT-2's width, for describe and supports. */
static struct cpu_gemm_call probe_of(enum zt_dtype ab_type)
{
    return (struct cpu_gemm_call){.trans_b = 1,
                                  .M = 512,
                                  .N = 768,
                                  .K = 768,
                                  .alpha = 1.0f,
                                  .ab_type = ab_type,
                                  .c_type = ZT_F32,
                                  .lda = 768,
                                  .ldb = 768,
                                  .ldc = 768};
}

zt_status cpu_gemm_supports(struct cpu_gemm *g, enum zt_dtype ab_type)
{
    if (ab_type == ZT_F32)
        return ZT_OK;
    struct cpu_gemm *own = NULL;
    if (!g) {
        ZT_TRY(cpu_gemm_create(CPU_GEMM_AUTO, &own));
        g = own;
    }
    const struct cpu_gemm_call probe = probe_of(ab_type);
    const char *kernel;
    int generic;
    zt_status s = g->lib == CPU_GEMM_OPENBLAS
                      ? zt_error_set(ZT_ERR_UNSUPPORTED,
                                     "a %s GEMM needs oneDNN (ZT_CPU_GEMM=openblas has fp32 only)",
                                     zt_precision_name(ab_type))
                      : gemm_onednn_kernel(g->dnnl, &probe, &kernel, &generic);
    cpu_gemm_destroy(own);
    return s;
}

zt_status cpu_gemm_describe(struct cpu_gemm *g, enum zt_dtype ab_type, char *buf, size_t n)
{
    struct cpu_gemm *own = NULL;
    if (!g) {
        ZT_TRY(cpu_gemm_create(CPU_GEMM_AUTO, &own));
        g = own;
    }
    const struct cpu_gemm_call probe = probe_of(ab_type); /* no buffer is touched */
    int blas;
    zt_status s = takes_openblas(g, &probe, &blas);
    if (s == ZT_OK && blas && ab_type == ZT_F32) {
        char v[32] = "?"; /* OPENBLAS_VERSION reads " OpenBLAS 0.3.21 " */
        sscanf(OPENBLAS_VERSION, "%*s %31s", v);
        snprintf(buf, n, "openblas %s %s", v, openblas_get_corename());
    } else if (s == ZT_OK && blas) {
        snprintf(buf, n, "none (%s needs oneDNN)", zt_precision_name(ab_type));
    } else if (s == ZT_OK) {
        const char *kernel;
        int generic;
        s = gemm_onednn_kernel(g->dnnl, &probe, &kernel, &generic);
        if (s == ZT_OK) {
            char v[32];
            gemm_onednn_version(v, sizeof v);
            snprintf(buf, n, "onednn %s %s", v, kernel);
        }
    }
    cpu_gemm_destroy(own);
    return s;
}
