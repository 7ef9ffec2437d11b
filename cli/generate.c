/* cli/generate.c — see generate.h.
 *
 * Where the weights come from, in this order: a checkpoint named on the
 * command line (a step folder or a checkpoint.dir), else the CONFIG's
 * checkpoint.dir's latest checkpoint, else its model.init_from (Hugging
 * Face weights: a file, an index, or an exported folder). A checkpoint's
 * LoRA adapters are merged in (lora_merge), which gives the adapted
 * model's outputs exactly as PEFT's merge_and_unload does. The tokenizer
 * is the run's: data.tokenizer of the CONFIG, or of the configuration a
 * checkpoint keeps in its meta.json.
 *
 * Each prompt is encoded, run through the model in one step (the prefill),
 * then one token per step until --max-new-tokens or the tokenizer's
 * end-of-text token. Draws use counter (prompt index << 32) + step of
 * rng_key(seed, "generate"), so a seed gives the same text every time.
 */
#include "generate.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "../common/clock.h"
#include "../common/fileio.h"
#include "../common/json.h"
#include "../common/rng.h"
#include "../config/config.h"
#include "../config/yaml_tree.h"
#include "../coordinator/run_checkpoint.h"
#include "../data/data.h"
#include "../formats/checkpoint.h"
#include "../formats/hf_weights.h"
#include "../worker/infer.h"
#include "../worker/lora.h"
#include "../worker/ops.h"
#include "../worker/sampling.h"

const char generate_help[] =
    "usage: zerotrain generate CONFIG|CKPT_DIR [--prompt TEXT | --file JSONL]\n"
    "                          [--max-new-tokens N] [--temperature T] [--top-k K] [--top-p P]\n"
    "                          [--seed S] [--json] [--set key.path=value]...\n"
    "Continues a prompt with a trained model, one token per step over a key/value cache, and\n"
    "prints the prompt and its continuation, decoded with the run's tokenizer. The weights are\n"
    "CKPT_DIR's (a step-NNNNNNNN folder, or a checkpoint.dir whose `latest` names one), else\n"
    "the latest checkpoint of CONFIG's checkpoint.dir, else CONFIG's model.init_from (Hugging\n"
    "Face weights, an exported file or folder); LoRA adapters are merged in. No mpirun: one\n"
    "process on the CPU, in fp32; under mpirun with more than one rank it refuses.\n"
    "  --prompt TEXT          the prompt (default: empty, which starts from the tokenizer's\n"
    "                         begin- or end-of-text token)\n"
    "  --file JSONL           one prompt per line, {\"prompt\": TEXT}; prints one JSON line each\n"
    "  --max-new-tokens N     tokens generated after the prompt (default 64); stops earlier at\n"
    "                         the tokenizer's end-of-text token or at block_size positions\n"
    "  --temperature T        0 (default): greedy, the most likely token each step; > 0: draw\n"
    "                         from softmax(logits / T)\n"
    "  --top-k K              draw among the K most likely tokens only (default 0: all)\n"
    "  --top-p P              draw among the fewest most likely tokens whose probability\n"
    "                         reaches P (default 1: all)\n"
    "  --seed S               the draws' seed (default 1234): the same seed, the same text\n"
    "  --json                 print {\"prompt\", \"completion\", \"ids\", ...} as one JSON line\n"
    "  --chat                 refused for now (no chat template yet): format the prompt yourself\n"
    "  --set key.path=value   override a key of CONFIG (repeatable)\n"
    "Speeds go to stderr: prefill and decode tokens/s.\n";

#define MAX_SETS 64

struct gen_options {
    const char *source, *prompt, *file;
    int max_new, top_k, json, have_prompt;
    double temperature, top_p;
    uint64_t seed;
    struct config_override sets[MAX_SETS];
    int n_sets;
};

/* What generation runs on: the model, its weights and the tokenizer. */
struct gen_model {
    struct param_table table; /* as read: may hold adapters */
    struct param_table base;  /* the model generation runs (adapters merged in) */
    float *params;
    struct tokenizer *tok;
    char where[4200]; /* where the weights came from, for the source line */
};

/* ---- the options --------------------------------------------------------- */

/* The options that take a value; numbers are checked against [lo, hi]
 * (whole: an integer), the others (lo > hi) taken as text. */
enum gen_value { V_PROMPT, V_FILE, V_MAX_NEW, V_TEMPERATURE, V_TOP_K, V_TOP_P, V_SEED, V_SET };

static const struct {
    const char *name;
    double lo, hi;
    int whole;
} value_options[] = {
    [V_PROMPT] = {"--prompt", 1, 0, 0},
    [V_FILE] = {"--file", 1, 0, 0},
    [V_MAX_NEW] = {"--max-new-tokens", 0, 1e8, 1},
    [V_TEMPERATURE] = {"--temperature", 0, 1e6, 0},
    [V_TOP_K] = {"--top-k", 0, 1e9, 1},
    [V_TOP_P] = {"--top-p", 1e-9, 1, 0},
    [V_SEED] = {"--seed", 0, 9007199254740992.0, 1}, /* 2^53: exact in a double */
    [V_SET] = {"--set", 1, 0, 0},
};

static zt_status number_of(int k, const char *text, double *out)
{
    char *end;
    const double v = strtod(text, &end), lo = value_options[k].lo, hi = value_options[k].hi;
    if (end == text || *end != '\0' || !(v >= lo && v <= hi) ||
        (value_options[k].whole && v != (double)(int64_t)v))
        return zt_error_set(ZT_ERR_USAGE, "%s %s: expected %s in [%g, %g]", value_options[k].name,
                            text, value_options[k].whole ? "a whole number" : "a number", lo, hi);
    *out = v;
    return ZT_OK;
}

static zt_status set_value(int k, const char *val, struct gen_options *o)
{
    double v = 0;
    if (value_options[k].lo <= value_options[k].hi)
        ZT_TRY(number_of(k, val, &v));
    switch ((enum gen_value)k) {
    case V_PROMPT:
        o->prompt = val, o->have_prompt = 1;
        break;
    case V_FILE:
        o->file = val;
        break;
    case V_MAX_NEW:
        o->max_new = (int)v;
        break;
    case V_TEMPERATURE:
        o->temperature = v;
        break;
    case V_TOP_K:
        o->top_k = (int)v;
        break;
    case V_TOP_P:
        o->top_p = v;
        break;
    case V_SEED:
        o->seed = (uint64_t)v;
        break;
    case V_SET:
        if (o->n_sets == MAX_SETS)
            return zt_error_set(ZT_ERR_USAGE, "too many --set options (at most %d)", MAX_SETS);
        o->sets[o->n_sets++].assignment = val;
        break;
    }
    return ZT_OK;
}

/* Reads option argv[*i] (with its value); ZT_ERR_USAGE names what is wrong. */
static zt_status parse_option(int argc, char **argv, int *i, struct gen_options *o)
{
    const char *arg = argv[*i];
    if (strcmp(arg, "--json") == 0)
        return o->json = 1, ZT_OK;
    if (strcmp(arg, "--chat") == 0)
        return zt_error_set(ZT_ERR_USAGE,
                            "--chat: no chat template is available yet; pass the prompt already "
                            "formatted as the model was trained on it");
    for (size_t k = 0; k < sizeof value_options / sizeof value_options[0]; k++) {
        if (strcmp(arg, value_options[k].name) != 0)
            continue;
        if (*i + 1 >= argc)
            return zt_error_set(ZT_ERR_USAGE, "%s needs a value (see zerotrain help generate)",
                                arg);
        return set_value((int)k, argv[++*i], o);
    }
    return zt_error_set(ZT_ERR_USAGE, "'%s': unknown option (see zerotrain help generate)", arg);
}

static zt_status parse_args(int argc, char **argv, struct gen_options *o)
{
    *o = (struct gen_options){.max_new = 64, .top_p = 1.0, .seed = 1234};
    for (int i = 0; i < argc; i++) {
        if (argv[i][0] == '-' && argv[i][1] != '\0')
            ZT_TRY(parse_option(argc, argv, &i, o));
        else if (!o->source)
            o->source = argv[i];
        else
            return zt_error_set(ZT_ERR_USAGE, "unexpected argument '%s': one CONFIG or CKPT_DIR",
                                argv[i]);
    }
    if (!o->source)
        return zt_error_set(ZT_ERR_USAGE,
                            "generate needs CONFIG or CKPT_DIR (see zerotrain help generate)");
    if (o->have_prompt && o->file)
        return zt_error_set(ZT_ERR_USAGE, "--prompt and --file exclude each other");
    return ZT_OK;
}

/* Refuses a world of several ranks: each would generate the same text. */
static zt_status check_one_process(void)
{
    static const char *const vars[] = {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE"};
    for (size_t i = 0; i < sizeof vars / sizeof vars[0]; i++) {
        const char *v = getenv(vars[i]);
        if (v && atoi(v) > 1)
            return zt_error_set(ZT_ERR_USAGE,
                                "generate runs in one process, not %s ranks: run it without "
                                "mpirun (or with -np 1)",
                                v);
    }
    return ZT_OK;
}

/* ---- the weights --------------------------------------------------------- */

/* The tokenizer named by data.tokenizer and data.tokenizer_dir of a
 * checkpoint's configuration text. */
static zt_status open_tokenizer_of_yaml(const char *step_dir, const char *yaml,
                                        struct tokenizer **out)
{
    struct yaml_tree *tree;
    ZT_TRY(yaml_tree_load_string(step_dir, yaml, strlen(yaml), &tree));
    const struct yaml_tree_node *name = yaml_tree_lookup(tree, "data.tokenizer");
    const struct yaml_tree_node *dir = yaml_tree_lookup(tree, "data.tokenizer_dir");
    const char *n =
        name && name->kind == YAML_TREE_SCALAR && !yaml_tree_is_null(name) ? name->text : NULL;
    const char *d =
        dir && dir->kind == YAML_TREE_SCALAR && !yaml_tree_is_null(dir) ? dir->text : NULL;
    zt_status st = tokenizer_open(n ? n : "bytes", d, out);
    yaml_tree_free(tree);
    return st;
}

static zt_status load_checkpoint(const char *path, struct gen_model *g, int with_tokenizer)
{
    char step_dir[4096];
    struct ckpt_meta meta;
    ZT_TRY(ckpt_resolve(path, step_dir, sizeof step_dir));
    ZT_TRY(run_checkpoint_read_model(step_dir, &meta, &g->table, &g->params));
    zt_status st = ZT_OK;
    if (with_tokenizer)
        st = open_tokenizer_of_yaml(step_dir, meta.config_yaml ? meta.config_yaml : "", &g->tok);
    if (g->table.lora.r > 0)
        lora_merge(&g->table, meta.lora.alpha, g->params);
    snprintf(g->where, sizeof g->where, "checkpoint %s (step %lld%s)", step_dir,
             (long long)meta.step, g->table.lora.r > 0 ? ", adapters merged in" : "");
    ckpt_meta_free(&meta);
    return st;
}

static zt_status load_init_from(const struct zt_config *c, struct gen_model *g)
{
    struct zt_kvlist shape;
    struct hf_weights_reader *r;
    config_model_shape(c, &shape);
    ZT_TRY(param_table_build(&shape, &g->table));
    g->params = malloc(g->table.n_params * sizeof(float));
    if (!g->params)
        return zt_error_set(ZT_ERR_NOMEM, "cannot allocate %zu parameters", g->table.n_params);
    ZT_TRY(hf_weights_open(c->model.init_from, &g->table, &r));
    const zt_status st = hf_weights_read(r, 0, g->table.n_params, g->params);
    hf_weights_close(r);
    snprintf(g->where, sizeof g->where, "model.init_from %s", c->model.init_from);
    return st;
}

static zt_status load_config(const struct gen_options *o, struct gen_model *g)
{
    struct zt_config c;
    char step_dir[4096];
    int found = 0;
    ZT_TRY(config_load(o->source, o->sets, o->n_sets, &c));
    zt_status st = tokenizer_open(c.data.tokenizer, c.data.tokenizer_dir, &g->tok);
    if (st == ZT_OK && c.checkpoint.dir)
        st = ckpt_find_latest(c.checkpoint.dir, step_dir, sizeof step_dir, &found);
    if (st == ZT_OK && found)
        st = load_checkpoint(step_dir, g, 0);
    else if (st == ZT_OK && c.model.init_from && c.lora.enabled && c.lora.init_from)
        st = zt_error_set(ZT_ERR_UNSUPPORTED,
                          "%s: lora.init_from: generate reads adapters from a checkpoint; export "
                          "--merge the adapted model and name it in model.init_from",
                          o->source);
    else if (st == ZT_OK && c.model.init_from)
        st = load_init_from(&c, g);
    else if (st == ZT_OK)
        st = zt_error_set(ZT_ERR_CONFIG,
                          "%s: no weights to generate with: %s%s%s and model.init_from is not "
                          "set (train first, or name a checkpoint)",
                          o->source, c.checkpoint.dir ? "checkpoint.dir " : "no checkpoint.dir",
                          c.checkpoint.dir ? c.checkpoint.dir : "",
                          c.checkpoint.dir ? " holds no checkpoint" : "");
    config_free(&c);
    return st;
}

static zt_status gen_model_load(const struct gen_options *o, struct gen_model *g)
{
    struct stat sb;
    if (stat(o->source, &sb) != 0)
        return zt_error_set(ZT_ERR_USAGE,
                            "%s: no such file or folder (expected CONFIG or "
                            "CKPT_DIR)",
                            o->source);
    if (S_ISDIR(sb.st_mode))
        ZT_TRY(load_checkpoint(o->source, g, 1));
    else
        ZT_TRY(load_config(o, g));
    g->base = param_table_base(&g->table);
    g->base.quant.enabled = 0; /* the weights read are fp32 whatever the base was stored as */
    return ZT_OK;
}

static void gen_model_free(struct gen_model *g)
{
    param_table_free(&g->table);
    free(g->params);
    tokenizer_close(g->tok);
}

/* ---- generation ---------------------------------------------------------- */

/* One sequence's tokens and timings. */
struct gen_result {
    int32_t *ids; /* the prompt's, then the new ones: infer_max_positions entries */
    size_t n, n_prompt;
    double prefill_s, decode_s;
};

static zt_status encode_prompt(const struct gen_model *g, struct infer_model *im, const char *text,
                               struct gen_result *r)
{
    struct token_buffer enc = {0};
    zt_status st = tokenizer_encode(g->tok, (const unsigned char *)text, strlen(text), &enc);
    const int cap = infer_max_positions(im);
    if (st == ZT_OK && enc.n > (size_t)cap)
        st = zt_error_set(ZT_ERR_USAGE,
                          "the prompt is %zu tokens: the model holds %d positions (block_size)",
                          enc.n, cap);
    for (size_t i = 0; st == ZT_OK && i < enc.n; i++)
        if (enc.tokens[i] >= infer_vocab_size(im))
            st = zt_error_set(ZT_ERR_CONFIG,
                              "the prompt's token %zu (id %d of tokenizer %s) is outside the "
                              "model's vocabulary of %d: the tokenizer is not the model's",
                              i, enc.tokens[i], tokenizer_name(g->tok), infer_vocab_size(im));
    if (st == ZT_OK && enc.n > 0)
        memcpy(r->ids, enc.tokens, enc.n * sizeof(int32_t));
    r->n = enc.n;
    token_buffer_free(&enc);
    if (st == ZT_OK && r->n == 0) { /* an empty prompt starts from the start-of-text token */
        const int32_t bos = tokenizer_bos_id(g->tok), eot = tokenizer_eot_id(g->tok);
        const int32_t start = bos >= 0 ? bos : eot >= 0 ? eot : 0;
        r->ids[r->n++] = start < infer_vocab_size(im) ? start : 0;
    }
    r->n_prompt = r->n;
    return st;
}

static zt_status generate_one(const struct gen_model *g, struct infer_model *im,
                              const struct gen_options *o, const char *text, uint64_t index,
                              float *logits, int32_t *order, struct gen_result *r)
{
    const struct sampling s = {o->temperature, o->top_k, o->top_p};
    const uint64_t key = rng_key(o->seed, "generate");
    const int32_t eot = tokenizer_eot_id(g->tok);
    infer_reset(im);
    ZT_TRY(encode_prompt(g, im, text, r));
    double t0 = zt_now_seconds();
    ZT_TRY(infer_step(im, r->ids, (int)r->n, logits));
    r->prefill_s = zt_now_seconds() - t0;
    t0 = zt_now_seconds();
    for (int step = 0; step < o->max_new && r->n < (size_t)infer_max_positions(im); step++) {
        const int32_t next = sampling_pick(&s, logits, infer_vocab_size(im), key,
                                           (index << 32) + (uint64_t)step, order);
        r->ids[r->n++] = next;
        if (next == eot || step + 1 == o->max_new || r->n == (size_t)infer_max_positions(im))
            break;
        ZT_TRY(infer_step(im, &next, 1, logits));
    }
    r->decode_s = zt_now_seconds() - t0;
    return ZT_OK;
}

/* The new tokens' text as a C string; bytes a tokenizer cut inside a
 * character (not UTF-8) become '?', so that the text is valid JSON. */
static zt_status completion_text(const struct gen_model *g, const struct gen_result *r, char **out)
{
    unsigned char *bytes;
    size_t len;
    ZT_TRY(tokenizer_decode(g->tok, r->ids + r->n_prompt, r->n - r->n_prompt, &bytes, &len));
    char *z = malloc(len + 1);
    if (!z) {
        free(bytes);
        return zt_error_set(ZT_ERR_NOMEM, "cannot allocate the completion's text");
    }
    if (len)
        memcpy(z, bytes, len);
    z[len] = '\0';
    free(bytes);
    for (size_t i = json_utf8_check(z, len); i < len; i = json_utf8_check(z, len))
        z[i] = '?';
    *out = z;
    return ZT_OK;
}

/* Prints one result: the prompt and its continuation, or a JSON line. */
static zt_status print_result(const struct gen_model *g, const struct gen_options *o,
                              const struct gen_result *r, const char *prompt, FILE *out)
{
    char *text = NULL;
    ZT_TRY(completion_text(g, r, &text));
    if (!o->json && !o->file) {
        fprintf(out, "%s%s\n", prompt, text);
        free(text);
        return ZT_OK;
    }
    struct json_text j = {0};
    json_text_puts(&j, "{\"prompt\": ");
    json_text_string(&j, prompt, JSON_ESCAPE_SHORT);
    json_text_puts(&j, ", \"completion\": ");
    json_text_string(&j, text, JSON_ESCAPE_SHORT);
    json_text_printf(&j, ", \"prompt_tokens\": %zu, \"new_tokens\": %zu, \"ids\": [", r->n_prompt,
                     r->n - r->n_prompt);
    for (size_t i = r->n_prompt; i < r->n; i++)
        json_text_printf(&j, "%s%d", i > r->n_prompt ? ", " : "", r->ids[i]);
    json_text_puts(&j, "]}\n");
    free(text);
    if (j.oom) {
        free(j.p);
        return zt_error_set(ZT_ERR_NOMEM, "cannot build the JSON line");
    }
    fputs(j.p, out);
    free(j.p);
    return ZT_OK;
}

/* The prompts of --file: one JSON object per line with a string "prompt". */
static zt_status read_prompts(const char *path, char ***prompts, size_t *n)
{
    char *text;
    size_t len;
    *prompts = NULL;
    *n = 0;
    ZT_TRY(zt_read_small_file(path, (size_t)1 << 30, ZT_ERR_USAGE, &text, &len));
    zt_status st = ZT_OK;
    size_t line = 0;
    for (char *p = text, *end; st == ZT_OK && p < text + len; p = end + 1) {
        end = memchr(p, '\n', (size_t)(text + len - p));
        end = end ? end : text + len;
        line++;
        if (strspn(p, " \t\r") >= (size_t)(end - p))
            continue;
        char where[4200];
        snprintf(where, sizeof where, "%s:%zu", path, line);
        const struct json_source src = {.path = where, .code = ZT_ERR_USAGE, .max_depth = 16};
        struct json_value v;
        st = json_parse(&src, p, (size_t)(end - p), &v);
        const struct json_value *pr = st == ZT_OK ? json_object_get(&v, "prompt", NULL) : NULL;
        if (st == ZT_OK && (v.type != JSON_OBJECT || !pr || pr->type != JSON_STRING))
            st = zt_error_set(ZT_ERR_USAGE, "%s: expected an object with a string \"prompt\"",
                              where);
        char **grown = st == ZT_OK ? realloc(*prompts, (*n + 1) * sizeof **prompts) : NULL;
        if (st == ZT_OK && !grown)
            st = zt_error_set(ZT_ERR_NOMEM, "cannot hold the prompts of %s", path);
        if (grown) {
            *prompts = grown;
            (*prompts)[*n] = strdup(pr->str);
            st = (*prompts)[(*n)++] ? ZT_OK : zt_error_set(ZT_ERR_NOMEM, "out of memory");
        }
        json_free(&v);
    }
    free(text);
    return st;
}

static void free_prompts(char **prompts, size_t n)
{
    for (size_t i = 0; i < n; i++)
        free(prompts[i]);
    free(prompts);
}

/* Every prompt through one model and its cache. */
static zt_status generate_all(const struct gen_options *o, const struct gen_model *g,
                              char **prompts, size_t n, FILE *out, FILE *err)
{
    struct infer_model *im;
    const struct ops_backend *ops; /* the CPU's, keeping its GEMM kernels between steps */
    ZT_TRY(ops_cpu_open(&ops));
    zt_status opened = infer_open(&g->base, g->params, ops, &im);
    if (opened != ZT_OK) {
        ops_cpu_close(ops);
        return opened;
    }
    const int V = infer_vocab_size(im);
    float *logits = malloc((size_t)V * sizeof *logits);
    int32_t *order = malloc((size_t)V * sizeof *order);
    struct gen_result r = {.ids = malloc((size_t)infer_max_positions(im) * sizeof(int32_t))};
    zt_status st = logits && order && r.ids ? ZT_OK : zt_error_set(ZT_ERR_NOMEM, "out of memory");
    double prefill_s = 0, decode_s = 0;
    size_t prefill_n = 0, decode_n = 0;
    for (size_t i = 0; st == ZT_OK && i < n; i++) {
        st = generate_one(g, im, o, prompts[i], i, logits, order, &r);
        if (st == ZT_OK)
            st = print_result(g, o, &r, prompts[i], out);
        prefill_s += r.prefill_s;
        decode_s += r.decode_s;
        prefill_n += r.n_prompt;
        decode_n +=
            r.n > r.n_prompt + 1 ? r.n - r.n_prompt - 1 : 0; /* the first is the prefill's */
    }
    fflush(out);
    if (st == ZT_OK && r.n == (size_t)infer_max_positions(im))
        fprintf(err, "generate: stopped at the model's %d positions (block_size)\n",
                infer_max_positions(im));
    if (st == ZT_OK)
        fprintf(err,
                "generate: prefill %zu tokens at %.1f tokens/s, decode %zu tokens at %.1f "
                "tokens/s\n",
                prefill_n, prefill_s > 0 ? prefill_n / prefill_s : 0.0, decode_n,
                decode_s > 0 ? decode_n / decode_s : 0.0);
    free(r.ids);
    free(order);
    free(logits);
    infer_close(im);
    ops_cpu_close(ops);
    return st;
}

static zt_status run(const struct gen_options *o, FILE *out, FILE *err)
{
    struct gen_model g = {0};
    char **prompts = NULL;
    size_t n = 0;
    char *one[1] = {(char *)(o->prompt ? o->prompt : "")};
    zt_status st = check_one_process();
    if (st == ZT_OK && o->file)
        st = read_prompts(o->file, &prompts, &n);
    if (st == ZT_OK)
        st = gen_model_load(o, &g);
    if (st == ZT_OK) {
        fprintf(err, "generate: %s, %s, tokenizer %s, %s\n", g.where, g.base.family->name,
                tokenizer_name(g.tok), o->temperature > 0 ? "sampling" : "greedy");
        st = generate_all(o, &g, o->file ? prompts : one, o->file ? n : 1, out, err);
    }
    free_prompts(prompts, n);
    gen_model_free(&g);
    return st;
}

int generate_command(int argc, char **argv, FILE *out, FILE *err)
{
    struct gen_options o;
    zt_status st = parse_args(argc, argv, &o);
    if (st == ZT_OK)
        st = run(&o, out, err);
    if (st != ZT_OK) {
        fprintf(err, "zerotrain: error: %s\n",
                zt_error_message()[0] ? zt_error_message() : zt_status_desc(st));
        fflush(err);
    }
    return zt_status_exit_code(st);
}
