/* worker/lora.c — adapters appended to a parameter table (see lora.h). */
#include "lora.h"

#include <math.h>
#include <regex.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../common/rng.h"
#include "tensor_parallel.h"

/* Whether `target` reads as a regular expression (PEFT takes a string
 * target_modules as one) rather than a module name. */
static int is_pattern(const char *target)
{
    return strpbrk(target, "*+?[](){}|^$\\") != NULL;
}

/* How many copies of a subexpression compiling `ere` may make, at most:
 * glibc's regcomp copies a repeated subexpression for each repetition (a+
 * as aa*, a{n} n times), and nested repeats multiply. The product over
 * every repeat bounds any nesting of them; it stops growing past `cap`. */
static double repeat_copies(const char *ere, double cap)
{
    double copies = 1.0;
    for (const char *c = ere; *c && copies <= cap; c++) {
        if (*c == '\\' && c[1]) {
            c++;
        } else if (*c == '[') { /* a bracket's quantifier characters are literal */
            c += c[1] == ']' ? 2 : 1;
            while (*c && *c != ']')
                c++;
            if (!*c)
                break;
        } else if (*c == '*' || *c == '+' || *c == '?') {
            copies *= 2.0;
        } else if (*c == '{') {
            const double n = strtod(c + 1, NULL), m = c[1 + strspn(c + 1, "0123456789")] == ','
                                                          ? strtod(strchr(c, ',') + 1, NULL)
                                                          : n;
            copies *= 1.0 + (n > m ? n : m);
        }
    }
    return copies;
}

/* Python's re.fullmatch(pattern, module) for the patterns PEFT configs
 * use, through POSIX extended expressions: "(?:" becomes "(", and the
 * classes \d, \w, \s their bracket forms. 0 when it does not compile,
 * or when its repeats would make regcomp copy a subexpression more than
 * REPEAT_COPIES_MAX times (a{99}{99}, a++++...: a name pattern needs a
 * handful; such a pattern took regcomp 14 s). */
#define REPEAT_COPIES_MAX 4096.0
static int pattern_matches(const char *module, const char *pattern)
{
    static const struct {
        const char *python, *posix;
    } rewrites[] = {{"(?:", "("},
                    {"\\d", "[0-9]"},
                    {"\\w", "[A-Za-z0-9_]"},
                    {"\\s", "[[:space:]]"},
                    {"\\.", "[.]"}};
    char ere[1024];
    size_t at = 0;
    at += (size_t)snprintf(ere, sizeof ere, "^(");
    for (const char *c = pattern; *c && at + 16 < sizeof ere;) {
        size_t r = 0, n_rewrites = sizeof rewrites / sizeof rewrites[0];
        while (r < n_rewrites && strncmp(c, rewrites[r].python, strlen(rewrites[r].python)) != 0)
            r++;
        if (r < n_rewrites) {
            at += (size_t)snprintf(ere + at, sizeof ere - at, "%s", rewrites[r].posix);
            c += strlen(rewrites[r].python);
        } else {
            ere[at++] = *c++;
        }
    }
    snprintf(ere + at, sizeof ere - at, ")$");
    regex_t re;
    if (repeat_copies(ere, REPEAT_COPIES_MAX) > REPEAT_COPIES_MAX ||
        regcomp(&re, ere, REG_EXTENDED | REG_NOSUB) != 0)
        return 0;
    const int hit = regexec(&re, module, 0, NULL, 0) == 0;
    regfree(&re);
    return hit;
}

/* PEFT's rule for a list of target names: the module's name, or its last
 * dotted components; a target that is a regular expression matches the
 * modules whose whole name it matches, as PEFT's string form does. */
static int name_matches(const char *module, const char *target)
{
    size_t n = strlen(module), k = strlen(target);
    if (is_pattern(target) && pattern_matches(module, target))
        return 1;
    if (n == k)
        return strcmp(module, target) == 0;
    return n > k && module[n - k - 1] == '.' && strcmp(module + n - k, target) == 0;
}

static int all_linear(const struct lora_spec *spec)
{
    return spec->n_targets == 1 && strcmp(spec->targets[0], LORA_ALL_LINEAR) == 0;
}

static int is_adapted(const struct param_table *t, const struct lora_spec *spec,
                      const char *const *module_names, int k)
{
    const struct param_tensor *p = &t->tensors[k];
    if (!p->linear || !module_names[k])
        return 0;
    if (all_linear(spec))
        return p->linear == PARAM_LINEAR;
    for (int i = 0; i < spec->n_targets; i++)
        if (name_matches(module_names[k], spec->targets[i]))
            return 1;
    return 0;
}

static const char *leaf_of(const char *module)
{
    const char *dot = strrchr(module, '.');
    return dot ? dot + 1 : module;
}

/* The last component of each linear module ("c_attn"), each once. */
static void linear_modules(const struct param_table *t, const char *const *module_names, char *buf,
                           size_t n)
{
    size_t at = 0;
    buf[0] = '\0';
    for (int k = 0; k < t->n_tensors && at < n; k++) {
        if (!t->tensors[k].linear || !module_names[k])
            continue;
        const char *leaf = leaf_of(module_names[k]);
        int seen = 0;
        for (int j = 0; j < k && !seen; j++)
            seen = t->tensors[j].linear && module_names[j] &&
                   strcmp(leaf_of(module_names[j]), leaf) == 0;
        if (!seen)
            at += (size_t)snprintf(buf + at, n - at, "%s%s", at ? ", " : "", leaf);
    }
}

/* Every target names at least one module, and only linear ones. */
static zt_status check_targets(const struct param_table *t, const struct lora_spec *spec,
                               const char *const *module_names)
{
    char known[512];
    if (all_linear(spec))
        return ZT_OK;
    for (int i = 0; i < spec->n_targets; i++) {
        int linear = 0, other = 0;
        for (int k = 0; k < t->n_tensors; k++) {
            if (!module_names[k] || !name_matches(module_names[k], spec->targets[i]))
                continue;
            linear += t->tensors[k].linear != 0;
            other += t->tensors[k].linear == 0;
        }
        if (!linear)
            linear_modules(t, module_names, known, sizeof known);
        if (other && !linear)
            return zt_error_set(ZT_ERR_CONFIG,
                                "lora.target_modules: '%s' is not a linear layer of this %s model "
                                "(its linear layers: %s)",
                                spec->targets[i], t->family->name, known);
        if (!linear)
            return zt_error_set(ZT_ERR_CONFIG,
                                "lora.target_modules: '%s' matches no module of this %s model "
                                "(its linear layers: %s; or \"" LORA_ALL_LINEAR "\")",
                                spec->targets[i], t->family->name, known);
    }
    return ZT_OK;
}

/* "h.0.attn.qkv.weight" -> "h.0.attn.qkv.lora_A.weight". */
static void adapter_name(const char *base, const char *which, char *out, size_t n)
{
    size_t stem = strlen(base);
    if (stem > 7 && strcmp(base + stem - 7, ".weight") == 0)
        stem -= 7;
    snprintf(out, n, "%.*s.%s.weight", (int)stem, base, which);
}

static void add_tensor(struct param_table *t, const char *name, int rows, int cols, int unit,
                       int adapts)
{
    struct param_tensor *p = &t->tensors[t->n_tensors++];
    memset(p, 0, sizeof *p);
    snprintf(p->name, sizeof p->name, "%s", name);
    p->rows = rows;
    p->cols = cols;
    p->numel = (size_t)rows * (size_t)cols;
    p->offset = t->n_params;
    p->unit = unit;
    p->trainable = 1;
    p->decay = 1; /* matrices, decayed as Hugging Face's Trainer decays them */
    p->storage = PARAM_STORAGE_WORKING;
    p->adapter = -1;
    p->adapts = adapts;
    t->n_params += p->numel;
}

/* Tensor parallelism cuts the pair just added as it cuts their base p:
 * a column-parallel base's outputs (rows) are split, so B [out, r] is split
 * by rows as the base is (in the same parts and heads) and A [r, in] reads
 * the whole input, replicated; a row-parallel base reads a slice of the
 * input (columns), so A is split by columns and B, whose output is summed
 * over the ranks with the base's, is replicated. */
static void cut_as_base(struct param_table *t, const struct param_tensor *p)
{
    struct param_tensor *a = &t->tensors[t->n_tensors - 2], *b = &t->tensors[t->n_tensors - 1];
    struct param_tensor *cut = p->tp_split == TP_ROWS ? b : p->tp_split == TP_COLS ? a : NULL;
    if (!cut)
        return;
    cut->tp_split = p->tp_split;
    cut->tp_parts = p->tp_split == TP_ROWS ? p->tp_parts : 1;
    cut->tp_block = p->tp_block;
}

/* How many adapted weights and adapter units the spec gives t. */
static void count_adapted(const struct param_table *t, const struct lora_spec *spec,
                          const char *const *module_names, int *n_weights, int *n_units)
{
    int last_unit = -1;
    *n_weights = *n_units = 0;
    for (int k = 0; k < t->n_tensors; k++) {
        if (!is_adapted(t, spec, module_names, k))
            continue;
        (*n_weights)++;
        if (t->tensors[k].unit != last_unit)
            (*n_units)++;
        last_unit = t->tensors[k].unit;
    }
}

/* Grows t's arrays to hold the adapters; t is unchanged on failure. */
static zt_status grow(struct param_table *t, int n_tensors, int n_units)
{
    struct param_tensor *tensors = malloc((size_t)n_tensors * sizeof *tensors);
    size_t *unit_offset = malloc(((size_t)n_units + 1) * sizeof *unit_offset);
    int *unit_adapter = malloc((size_t)t->n_units * sizeof *unit_adapter);
    if (!tensors || !unit_offset || !unit_adapter) {
        free(tensors);
        free(unit_offset);
        free(unit_adapter);
        return zt_error_set(ZT_ERR_NOMEM, "cannot allocate the LoRA adapters' table");
    }
    memcpy(tensors, t->tensors, (size_t)t->n_tensors * sizeof *tensors);
    memcpy(unit_offset, t->unit_offset, ((size_t)t->n_units + 1) * sizeof *unit_offset);
    for (int u = 0; u < t->n_units; u++)
        unit_adapter[u] = -1;
    free(t->tensors);
    free(t->unit_offset);
    t->tensors = tensors;
    t->unit_offset = unit_offset;
    t->lora.unit_adapter = unit_adapter;
    return ZT_OK;
}

zt_status lora_attach(struct param_table *t, const struct lora_spec *spec,
                      const char *const *module_names)
{
    ZT_ASSERT(t->lora.r == 0 && spec->r >= 1 && spec->n_targets >= 1);
    ZT_TRY(check_targets(t, spec, module_names));
    int n_weights, n_units;
    count_adapted(t, spec, module_names, &n_weights, &n_units);
    if (t->n_units + n_units > MODEL_MAX_UNITS)
        return zt_error_set(ZT_ERR_CONFIG,
                            "lora: %d adapted units on %d would exceed %d units in all", n_units,
                            t->n_units, MODEL_MAX_UNITS);
    const int n_base = t->n_tensors, base_units = t->n_units;
    ZT_TRY(grow(t, n_base + 2 * n_weights, base_units + n_units));
    t->lora.r = spec->r;
    t->lora.scale = (float)(spec->alpha / spec->r);
    t->lora.dropout = (float)spec->dropout;
    t->lora.n_base_tensors = n_base;
    t->lora.n_base_units = base_units;
    t->lora.n_base_params = t->n_params;
    for (int k = 0; k < n_base; k++) {
        struct param_tensor *p = &t->tensors[k];
        p->trainable = 0;
        if (!is_adapted(t, spec, module_names, k))
            continue;
        int *unit = &t->lora.unit_adapter[p->unit];
        if (*unit < 0) {
            *unit = t->n_units++;
            t->unit_offset[*unit] = t->n_params;
        }
        char name[sizeof p->name];
        p->adapter = t->n_tensors;
        adapter_name(p->name, "lora_A", name, sizeof name);
        add_tensor(t, name, spec->r, p->cols, *unit, k);
        adapter_name(p->name, "lora_B", name, sizeof name);
        add_tensor(t, name, p->rows, spec->r, *unit, k);
        cut_as_base(t, p);
        t->unit_offset[*unit + 1] = t->n_params;
    }
    return ZT_OK;
}

void lora_init_params(const struct param_table *t, uint64_t seed, size_t begin, size_t end,
                      float *dst)
{
    const uint64_t key = rng_key(seed, "lora");
    for (int k = t->lora.n_base_tensors; k < t->n_tensors; k++) {
        const struct param_tensor *p = &t->tensors[k];
        const int is_a = k == t->tensors[p->adapts].adapter;
        const double bound = 1.0 / sqrt((double)p->cols);
        size_t lo = p->offset > begin ? p->offset : begin;
        size_t hi = p->offset + p->numel < end ? p->offset + p->numel : end;
        for (size_t i = lo; i < hi; i++)
            dst[i - begin] = is_a ? (float)(bound * (2.0 * rng_uniform(key, i) - 1.0)) : 0.0f;
    }
}

/* Whether every target of a is one of b's. */
static int targets_within(const struct lora_spec *a, const struct lora_spec *b)
{
    for (int i = 0; i < a->n_targets; i++) {
        int found = 0;
        for (int j = 0; j < b->n_targets && !found; j++)
            found = strcmp(a->targets[i], b->targets[j]) == 0;
        if (!found)
            return 0;
    }
    return 1;
}

static void targets_text(const struct lora_spec *s, char *buf, size_t n)
{
    size_t at = (size_t)snprintf(buf, n, "[");
    for (int i = 0; i < s->n_targets && at < n; i++)
        at += (size_t)snprintf(buf + at, n - at, "%s%s", i ? ", " : "", s->targets[i]);
    if (at < n)
        snprintf(buf + at, n - at, "]");
}

const char *lora_spec_diff(const struct lora_spec *a, const struct lora_spec *b, char *a_text,
                           char *b_text, size_t n)
{
    if (a->r != b->r) {
        snprintf(a_text, n, "%d", a->r);
        snprintf(b_text, n, "%d", b->r);
        return "r";
    }
    if (a->alpha != b->alpha) {
        snprintf(a_text, n, "%.17g", a->alpha);
        snprintf(b_text, n, "%.17g", b->alpha);
        return "lora_alpha";
    }
    if (!targets_within(a, b) || !targets_within(b, a)) {
        targets_text(a, a_text, n);
        targets_text(b, b_text, n);
        return "target_modules";
    }
    return NULL;
}

int lora_spec_adapts_same(const struct param_table *t, const struct lora_spec *spec,
                          const char *const *module_names)
{
    for (int k = 0; k < t->lora.n_base_tensors; k++)
        if (is_adapted(t, spec, module_names, k) != (t->tensors[k].adapter >= 0))
            return 0;
    return 1;
}

void lora_merge(const struct param_table *t, double alpha, float *params)
{
    const double scale = alpha / t->lora.r;
    const int r = t->lora.r;
    for (int k = 0; k < t->lora.n_base_tensors; k++) {
        const struct param_tensor *w = &t->tensors[k];
        if (w->adapter < 0)
            continue;
        const float *a = params + t->tensors[w->adapter].offset;     /* [r, cols] */
        const float *b = params + t->tensors[w->adapter + 1].offset; /* [rows, r] */
        float *out = params + w->offset;
        for (size_t o = 0; o < (size_t)w->rows; o++)
            for (size_t i = 0; i < (size_t)w->cols; i++) {
                double sum = 0.0;
                for (int j = 0; j < r; j++)
                    sum += (double)b[o * (size_t)r + (size_t)j] *
                           (double)a[(size_t)j * (size_t)w->cols + i];
                out[o * (size_t)w->cols + i] =
                    (float)((double)out[o * (size_t)w->cols + i] + scale * sum);
            }
    }
}
