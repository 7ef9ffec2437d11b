/* worker/model_family.c — the table of model families and the parameter
 * table's generic operations (see model_family.h); the instance calls are
 * in model_instance.c. */
#include "model_family.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fp8_scaling.h"
#include "llama.h"
#include "lora.h"
#include "model.h"

static const struct model_family *const families[] = {&gpt2_family, &llama_family};
#define N_FAMILIES (sizeof families / sizeof families[0])

const struct model_family *model_family_find(const char *name)
{
    for (size_t k = 0; k < N_FAMILIES; k++)
        if (strcmp(families[k]->name, name) == 0)
            return families[k];
    return NULL;
}

zt_status param_table_build(const struct zt_kvlist *shape, struct param_table *out)
{
    memset(out, 0, sizeof *out);
    const struct model_family *f = model_family_find(shape->kind);
    if (!f) {
        char known[128] = "";
        for (size_t k = 0, at = 0; k < N_FAMILIES && at < sizeof known; k++)
            at += (size_t)snprintf(known + at, sizeof known - at, "%s%s", k ? ", " : "",
                                   families[k]->name);
        return zt_error_set(ZT_ERR_CHECKPOINT, "model family '%s' is not known (known: %s)",
                            shape->kind, known);
    }
    return f->table_build(shape, out);
}

void param_table_free(struct param_table *t)
{
    if (t->whole) {
        param_table_free(t->whole);
        free(t->whole);
    }
    fp8_scaling_destroy(t->fp8);
    free(t->lora.unit_adapter);
    free(t->tensors);
    free(t->unit_offset);
    memset(t, 0, sizeof *t);
}

struct param_table param_table_base(const struct param_table *t)
{
    struct param_table base = *t;
    if (t->lora.r > 0) {
        base.n_tensors = t->lora.n_base_tensors;
        base.n_units = t->lora.n_base_units;
        base.n_params = t->lora.n_base_params;
    }
    memset(&base.lora, 0, sizeof base.lora);
    return base;
}

/* The tensor holding flat element i (i < t->n_params): the tensors tile
 * the space in table order. */
static int tensor_of(const struct param_table *t, size_t i)
{
    int lo = 0, hi = t->n_tensors - 1;
    while (lo < hi) {
        int mid = lo + (hi - lo + 1) / 2;
        if (t->tensors[mid].offset <= i)
            lo = mid;
        else
            hi = mid - 1;
    }
    return lo;
}

void param_table_piece(const struct param_table *t, size_t pos, size_t end, int *k, size_t *lo,
                       size_t *hi)
{
    const struct param_tensor *p = &t->tensors[ *k = tensor_of(t, pos)];
    const size_t stop = end < p->offset + p->numel ? end : p->offset + p->numel;
    ZT_ASSERT(pos >= p->offset && pos < stop);
    *lo = pos - p->offset;
    *hi = stop - p->offset;
}

void param_table_init(const struct param_table *t, uint64_t seed, size_t begin, size_t end,
                      float *dst)
{
    ZT_ASSERT(!t->whole); /* a slice's: param_table_tp_init */
    const size_t n_base = t->lora.r > 0 ? t->lora.n_base_params : t->n_params;
    if (begin < n_base)
        t->family->init_params(t, seed, begin, end < n_base ? end : n_base, dst);
    if (end > n_base) {
        const size_t lo = begin > n_base ? begin : n_base;
        lora_init_params(t, seed, lo, end, dst + (lo - begin));
    }
}

/* Length of the dotted prefix a and b share ("h.2.attn" and "h.2.mlp": 3). */
static size_t shared_dotted_prefix(const char *a, const char *b)
{
    size_t i = 0, dot = 0;
    while (a[i] && a[i] == b[i]) {
        if (a[i] == '.')
            dot = i;
        i++;
    }
    return dot;
}

void param_table_unit_label(const struct param_table *t, int unit, char *buf, size_t n)
{
    ZT_ASSERT(unit >= 0 && unit < t->n_units && n > 0);
    const char *first = NULL;
    size_t prefix = 0;
    for (int k = 0; k < t->n_tensors; k++) {
        if (t->tensors[k].unit != unit)
            continue;
        const char *name = t->tensors[k].name;
        if (!first) {
            first = name;
            prefix = strrchr(name, '.') ? (size_t)(strrchr(name, '.') - name) : strlen(name);
        } else {
            size_t p = shared_dotted_prefix(first, name);
            prefix = p < prefix ? p : prefix;
        }
    }
    buf[0] = '\0';
    if (!first)
        return;
    if (prefix > 0) {
        snprintf(buf, n, "%.*s", (int)prefix, first);
        return;
    }
    size_t used = 0;
    for (int k = 0; k < t->n_tensors && used + 1 < n; k++) {
        if (t->tensors[k].unit != unit)
            continue;
        const char *name = t->tensors[k].name;
        const size_t head = strcspn(name, ".");
        int w = snprintf(buf + used, n - used, "%s%.*s", used ? "," : "", (int)head, name);
        used += w > 0 ? (size_t)w : 0;
    }
}

int param_table_blocks(const struct param_table *t)
{
    return t->family->blocks(t);
}

int param_table_head_tied(const struct param_table *t)
{
    return t->family->head_tied(t);
}

struct model_stage model_stage_whole(const struct param_table *t)
{
    return (struct model_stage){0, param_table_blocks(t), 1, 1, 1, 0};
}

/* The base unit adapter unit u adapts (u itself for a base unit). */
static int base_unit_of(const struct param_table *t, int u)
{
    if (t->lora.r == 0 || u < t->lora.n_base_units)
        return u;
    for (int b = 0; b < t->lora.n_base_units; b++)
        if (t->lora.unit_adapter[b] == u)
            return b;
    return u;
}

int model_stage_holds(const struct param_table *t, const struct model_stage *s, int u)
{
    if (!s)
        return 1;
    const int b = base_unit_of(t, u), L = param_table_blocks(t);
    if (b == 0)
        return s->first || (s->last && param_table_head_tied(t));
    if (b == L + 1)
        return s->last;
    for (int j = 0; j < model_stage_chunks(s); j++) {
        const int at = b - 1 - j * s->stride;
        if (at >= s->first_block && at < s->end_block)
            return 1;
    }
    return 0;
}

int model_stage_chunks(const struct model_stage *s)
{
    return s->chunks > 1 ? s->chunks : 1;
}

int model_stage_blocks(const struct model_stage *s)
{
    return (s->end_block - s->first_block) * model_stage_chunks(s);
}

struct model_stage model_stage_chunk(const struct model_stage *s, int j, int n_blocks)
{
    ZT_ASSERT(j >= 0 && j < model_stage_chunks(s));
    const int first = s->first_block + j * s->stride, end = s->end_block + j * s->stride;
    return (struct model_stage){first, end, first == 0, end == n_blocks, 1, 0};
}

zt_status model_stage_interleaved(const struct param_table *t, int stages, int chunks, int index,
                                  struct model_stage *out)
{
    const int L = param_table_blocks(t);
    ZT_ASSERT(stages >= 1 && chunks >= 1 && index >= 0 && index < stages);
    if (L % (stages * chunks) != 0)
        return zt_error_set(ZT_ERR_CONFIG,
                            "the model's %d blocks do not divide into pipeline.stages %d x "
                            "pipeline.virtual_stages %d equal chunks",
                            L, stages, chunks);
    const int size = L / (stages * chunks);
    *out = (struct model_stage){index * size, (index + 1) * size, index == 0, index == stages - 1,
                                chunks,       stages * size};
    return ZT_OK;
}

size_t model_stage_params(const struct param_table *t, const struct model_stage *s)
{
    size_t n = 0;
    for (int u = 0; u < t->n_units; u++)
        if (model_stage_holds(t, s, u))
            n += param_table_unit_size(t, u);
    return n;
}

/* The stages' first blocks (first[P] = L) that balance `weight` (block l's
 * is weight[l], plus `head` on the last stage and `embed` on the first):
 * the split whose heaviest stage is lightest, by dynamic programming over
 * (stages, blocks) — P and L are small. Every stage gets a block. */
static void balance(const double *weight, int L, int P, double embed, double head, int *first)
{
    const size_t W = (size_t)L + 1;
    double *best = malloc((size_t)(P + 1) * W * sizeof *best);
    int *cut = malloc((size_t)(P + 1) * W * sizeof *cut);
    double *prefix = malloc(W * sizeof *prefix);
    if (!best || !cut || !prefix) { /* fall back to the uniform split */
        for (int p = 0; p <= P; p++)
            first[p] = (int)((long)L * p / P);
        free(best), free(cut), free(prefix);
        return;
    }
    prefix[0] = 0.0;
    for (int l = 0; l < L; l++)
        prefix[l + 1] = prefix[l] + weight[l];
    /* best[p * W + n]: the lightest heaviest stage when p stages take blocks [0, n). */
    for (int p = 1; p <= P; p++)
        for (int n = p; n <= L; n++) {
            double b = INFINITY;
            int at = p - 1;
            for (int k = p - 1; k < n; k++) {
                if (p == 1 && k > 0)
                    break;
                double stage = prefix[n] - prefix[k] + (p == 1 ? embed : 0.0) +
                               (p == P && n == L ? head : 0.0);
                double prev = p == 1 ? 0.0 : best[(size_t)(p - 1) * W + (size_t)k];
                double worst = stage > prev ? stage : prev;
                if (worst < b) {
                    b = worst;
                    at = k;
                }
            }
            best[(size_t)p * W + (size_t)n] = b;
            cut[(size_t)p * W + (size_t)n] = at;
        }
    first[P] = L;
    for (int p = P, n = L; p >= 1; p--) {
        n = cut[(size_t)p * W + (size_t)n];
        first[p - 1] = n;
    }
    free(best), free(cut), free(prefix);
}

zt_status model_stage_of(const struct param_table *t, int stages, enum model_partition method,
                         int index, struct model_stage *out)
{
    const int L = param_table_blocks(t);
    ZT_ASSERT(stages >= 1 && index >= 0 && index < stages);
    if (stages > L)
        return zt_error_set(ZT_ERR_CONFIG,
                            "pipeline.stages %d is more than the model's %d blocks: every stage "
                            "needs a block",
                            stages, L);
    int *first = malloc((size_t)(stages + 1) * sizeof *first);
    double *weight = malloc((size_t)L * sizeof *weight);
    if (!first || !weight) {
        free(first), free(weight);
        return zt_error_set(ZT_ERR_NOMEM, "cannot allocate the pipeline partition");
    }
    if (method == MODEL_PARTITION_UNIFORM) {
        const int base = L / stages, extra = L % stages;
        first[0] = 0;
        for (int p = 0; p < stages; p++)
            first[p + 1] = first[p] + base + (p < extra);
    } else {
        for (int l = 0; l < L; l++)
            weight[l] = (double)param_table_unit_size(t, 1 + l);
        const double embed = (double)param_table_unit_size(t, 0);
        const double head = (double)param_table_unit_size(t, L + 1) +
                            (param_table_head_tied(t) && stages > 1 ? embed : 0.0);
        balance(weight, L, stages, embed, head, first);
    }
    *out =
        (struct model_stage){first[index], first[index + 1], index == 0, index == stages - 1, 1, 0};
    free(first), free(weight);
    return ZT_OK;
}

int param_table_unit_order(const struct param_table *t, const struct model_stage *stage,
                           enum model_pass pass, int *order, int cap)
{
    const struct model_stage s = stage ? *stage : model_stage_whole(t);
    const int L = param_table_blocks(t), tied = param_table_head_tied(t);
    int base[MODEL_MAX_UNITS + 2], n = 0;
    const int runs = model_stage_chunks(&s);
    if (pass == MODEL_PASS_FORWARD) {
        if (s.first)
            base[n++] = 0;
        for (int j = 0; j < runs; j++)
            for (int l = s.first_block; l < s.end_block; l++)
                base[n++] = 1 + l + j * s.stride;
        if (s.last)
            base[n++] = L + 1;
        if (s.last && tied)
            base[n++] = 0;
    } else {
        if (s.last && tied)
            base[n++] = 0;
        if (s.last)
            base[n++] = L + 1;
        for (int j = runs - 1; j >= 0; j--)
            for (int l = s.end_block - 1; l >= s.first_block; l--)
                base[n++] = 1 + l + j * s.stride;
    }
    int k = 0;
    for (int i = 0; i < n; i++) {
        const int a = param_table_adapter_unit(t, base[i]);
        if (k < cap)
            order[k] = base[i];
        k++;
        if (a >= 0 && k < cap)
            order[k] = a;
        k += a >= 0;
    }
    return k;
}

static const char *const profile_names[] = {
#define MODEL_PROFILE_NAME(id, name) name,
    MODEL_PROFILE_CATEGORIES(MODEL_PROFILE_NAME)
#undef MODEL_PROFILE_NAME
};

const char *model_profile_name(enum model_profile_category c)
{
    ZT_ASSERT((unsigned)c < MODEL_PROF_COUNT);
    return profile_names[c];
}
