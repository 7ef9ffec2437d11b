/* cli/generate.c — see generate.h.
 *
 * Where the weights come from: a folder named on the command line, which
 * is a checkpoint (a step folder or a checkpoint.dir), an exported model
 * folder (config.json and Hugging Face weights, as save_pretrained and
 * `zerotrain export` write it) or a PEFT adapter folder (adapter_config.json,
 * whose base_model_name_or_path is a model file or folder); else a CONFIG,
 * whose checkpoint.dir's latest checkpoint, else model.init_from, is taken.
 * Adapters are merged in (lora_merge), which gives the adapted model's
 * outputs exactly as PEFT's merge_and_unload does. The tokenizer is the
 * run's: data.tokenizer of the CONFIG or of the configuration a checkpoint
 * keeps in its meta.json, or the tokenizer files of an exported folder.
 *
 * Each prompt is encoded (with --chat, first rendered through the chat
 * template with its generation prompt), run through the model in one step
 * (the prefill), then one token per step until --max-new-tokens, the
 * tokenizer's end-of-text token or the template's end of turn. Draws use
 * counter (prompt index << 32) + step of rng_key(seed, "generate"), so a
 * seed gives the same text every time.
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
#include "../coordinator/run_export.h"
#include "../data/data.h"
#include "../formats/checkpoint.h"
#include "../formats/hf_weights.h"
#include "../formats/peft_adapter.h"
#include "../worker/infer.h"
#include "../worker/lora.h"
#include "../worker/ops.h"
#include "../worker/sampling.h"

const char generate_help[] =
    "usage: zerotrain generate CONFIG|CKPT_DIR|MODEL_DIR [--prompt TEXT | --file JSONL]\n"
    "                          [--max-new-tokens N] [--temperature T] [--top-k K] [--top-p P]\n"
    "                          [--seed S] [--json] [--chat] [--chat-template NAME]\n"
    "                          [--set key.path=value]...\n"
    "Continues a prompt with a trained model, one token per step over a key/value cache, and\n"
    "prints the prompt and its continuation, decoded with the run's tokenizer. The weights are\n"
    "those of the folder named: a checkpoint (a step-NNNNNNNN folder, or a checkpoint.dir whose\n"
    "`latest` names one), an exported model folder (config.json and safetensors, as\n"
    "`zerotrain export` and save_pretrained write it, with its tokenizer files) or a PEFT\n"
    "adapter folder (on the model its base_model_name_or_path names); else those of CONFIG:\n"
    "the latest checkpoint of its checkpoint.dir, else its model.init_from (Hugging Face\n"
    "weights, an exported file or folder). LoRA adapters are merged in. No mpirun: one\n"
    "process on the CPU, in fp32; under mpirun with more than one rank it refuses.\n"
    "  --prompt TEXT          the prompt (default: empty, which starts from the tokenizer's\n"
    "                         begin- or end-of-text token)\n"
    "  --file JSONL           one prompt per line, {\"prompt\": TEXT} (or with --chat\n"
    "                         {\"messages\": [{\"role\", \"content\"}, ...]}); prints one JSON\n"
    "                         line each\n"
    "  --max-new-tokens N     tokens generated after the prompt (default 64); stops earlier at\n"
    "                         the tokenizer's end-of-text token or at block_size positions\n"
    "  --temperature T        0 (default): greedy, the most likely token each step; > 0: draw\n"
    "                         from softmax(logits / T)\n"
    "  --top-k K              draw among the K most likely tokens only (default 0: all)\n"
    "  --top-p P              draw among the fewest most likely tokens whose probability\n"
    "                         reaches P (default 1: all)\n"
    "  --seed S               the draws' seed (default 1234): the same seed, the same text\n"
    "  --json                 print {\"prompt\", \"completion\", \"ids\", ...} as one JSON line\n"
    "  --chat                 the prompt is the user's message: rendered through the chat\n"
    "                         template as apply_chat_template(add_generation_prompt=True) does,\n"
    "                         generation stops at the template's end of turn, and the reply\n"
    "                         alone is printed. The template is data.chat_template, else the\n"
    "                         one the tokenizer_config.json's chat_template is\n"
    "  --chat-template NAME   --chat with template NAME (llama3, chatml, llama2, mistral)\n"
    "  --set key.path=value   override a key of CONFIG (repeatable)\n"
    "Speeds go to stderr: prefill and decode tokens/s.\n";

#define MAX_SETS 64

struct gen_options {
    const char *source, *prompt, *file, *chat_template;
    int max_new, top_k, json, have_prompt, chat;
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
    char where[4200];                /* where the weights came from, for the source line */
    char chat_template[32];          /* the run's data.chat_template, "" when unset */
    const struct chat_template *tpl; /* --chat's; NULL without */
    int32_t end_of_turn;             /* tpl's end of turn as an id; -1 without */
};

/* ---- the options --------------------------------------------------------- */

/* The options that take a value; numbers are checked against [lo, hi]
 * (whole: an integer), the others (lo > hi) taken as text. */
enum gen_value {
    V_PROMPT,
    V_FILE,
    V_MAX_NEW,
    V_TEMPERATURE,
    V_TOP_K,
    V_TOP_P,
    V_SEED,
    V_SET,
    V_CHAT_TEMPLATE
};

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
    [V_CHAT_TEMPLATE] = {"--chat-template", 1, 0, 0},
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
    case V_CHAT_TEMPLATE:
        o->chat_template = val, o->chat = 1;
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
        return o->chat = 1, ZT_OK;
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
            return zt_error_set(ZT_ERR_USAGE, "unexpected argument '%s': one CONFIG or folder",
                                argv[i]);
    }
    if (!o->source)
        return zt_error_set(ZT_ERR_USAGE,
                            "generate needs CONFIG or a folder (see zerotrain help generate)");
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

static zt_status load_checkpoint(const char *path, struct gen_model *g, int with_tokenizer)
{
    char step_dir[4096];
    struct ckpt_meta meta;
    ZT_TRY(ckpt_resolve(path, step_dir, sizeof step_dir));
    ZT_TRY(run_checkpoint_read_model(step_dir, &meta, &g->table, &g->params));
    struct run_tokenizer_ref ref;
    zt_status st = ZT_OK;
    if (with_tokenizer)
        st = run_export_tokenizer_of(step_dir, meta.config_yaml ? meta.config_yaml : "", &ref);
    if (with_tokenizer && st == ZT_OK) {
        st = tokenizer_open(ref.name, ref.dir[0] ? ref.dir : NULL, &g->tok);
        snprintf(g->chat_template, sizeof g->chat_template, "%s", ref.chat_template);
    }
    if (g->table.lora.r > 0)
        lora_merge(&g->table, meta.lora.alpha, g->params);
    snprintf(g->where, sizeof g->where, "checkpoint %s (step %lld%s)", step_dir,
             (long long)meta.step, g->table.lora.r > 0 ? ", adapters merged in" : "");
    ckpt_meta_free(&meta);
    return st;
}

/* The folder a model file or folder lies in (its config.json's). */
static void folder_of(const char *path, char *dir, size_t n)
{
    struct stat sb;
    const char *slash = strrchr(path, '/');
    if (stat(path, &sb) == 0 && S_ISDIR(sb.st_mode))
        snprintf(dir, n, "%s", path);
    else if (slash)
        snprintf(dir, n, "%.*s", slash == path ? 1 : (int)(slash - path), path);
    else
        snprintf(dir, n, ".");
}

/* The tokenizer whose files lie in the first of dirs that holds one, else
 * the byte tokenizer. */
static zt_status open_folder_tokenizer(const char *const *dirs, int n, struct tokenizer **out)
{
    for (int i = 0; i < n; i++)
        if (dirs[i] && tokenizer_detect(dirs[i]))
            return tokenizer_open(NULL, dirs[i], out);
    return tokenizer_open("bytes", NULL, out);
}

/* The base weights of `model` (a file, an index or a folder, config.json
 * beside it) into g->params[0 .. the base's parameters), for t. */
static zt_status read_base(const char *model, const struct param_table *t, float *params)
{
    struct hf_weights_reader *r;
    const struct param_table base = param_table_base(t);
    ZT_TRY(hf_weights_open(model, &base, &r));
    const zt_status st = hf_weights_read(r, 0, base.n_params, params);
    hf_weights_close(r);
    return st;
}

/* The table of the model whose config.json lies in `dir`, with adapters
 * when `spec` is given, and room for its parameters. */
static zt_status build_from_config(const char *dir, const struct lora_spec *spec,
                                   struct gen_model *g)
{
    char config[4200];
    struct zt_kvlist shape;
    snprintf(config, sizeof config, "%s/config.json", dir);
    ZT_TRY(config_hf_model_shape(config, &shape));
    ZT_TRY(session_table_build(&shape, spec, &g->table));
    g->params = malloc((g->table.n_params ? g->table.n_params : 1) * sizeof(float));
    if (!g->params)
        return zt_error_set(ZT_ERR_NOMEM, "cannot allocate %zu parameters", g->table.n_params);
    return ZT_OK;
}

/* An exported model folder: config.json, the weights, the tokenizer files. */
static zt_status load_model_folder(const char *dir, struct gen_model *g)
{
    ZT_TRY(build_from_config(dir, NULL, g));
    ZT_TRY(read_base(dir, &g->table, g->params));
    const char *dirs[] = {dir};
    ZT_TRY(open_folder_tokenizer(dirs, 1, &g->tok));
    snprintf(g->where, sizeof g->where, "model folder %s", dir);
    return ZT_OK;
}

/* A PEFT adapter folder on the base its adapter_config.json names. */
static zt_status load_adapter_folder(const char *dir, struct gen_model *g)
{
    struct peft_adapter_config pc;
    struct peft_adapter_reader *r = NULL;
    char base_dir[4096];
    ZT_TRY(peft_adapter_read_config(dir, &pc));
    zt_status st = ZT_OK;
    if (!pc.base)
        st = zt_error_set(ZT_ERR_USAGE,
                          "%s/" PEFT_ADAPTER_CONFIG ": base_model_name_or_path is null: the "
                          "adapters were trained on a base drawn from a seed, which only their "
                          "checkpoint has (export it with --merge)",
                          dir);
    if (st == ZT_OK) {
        folder_of(pc.base, base_dir, sizeof base_dir);
        st = build_from_config(base_dir, &pc.spec, g);
    }
    if (st == ZT_OK)
        st = read_base(pc.base, &g->table, g->params);
    if (st == ZT_OK)
        st = peft_adapter_open(dir, &g->table, &pc.spec, &r);
    if (st == ZT_OK)
        st = peft_adapter_read(r, g->table.lora.n_base_params, g->table.n_params,
                               g->params + g->table.lora.n_base_params);
    peft_adapter_close(r);
    if (st == ZT_OK) {
        const char *dirs[] = {dir, base_dir};
        st = open_folder_tokenizer(dirs, 2, &g->tok);
        lora_merge(&g->table, pc.spec.alpha, g->params);
        snprintf(g->where, sizeof g->where, "adapter folder %s on %s (adapters merged in)", dir,
                 pc.base);
    }
    peft_adapter_config_free(&pc);
    return st;
}

/* What a named folder is, by the file that says so. */
static zt_status load_folder(const char *dir, struct gen_model *g)
{
    char probe[4200];
    struct stat sb;
    snprintf(probe, sizeof probe, "%s/config.json", dir);
    if (stat(probe, &sb) == 0)
        return load_model_folder(dir, g);
    snprintf(probe, sizeof probe, "%s/" PEFT_ADAPTER_CONFIG, dir);
    if (stat(probe, &sb) == 0)
        return load_adapter_folder(dir, g);
    return load_checkpoint(dir, g, 1);
}

static zt_status load_init_from(const struct zt_config *c, struct gen_model *g)
{
    struct zt_kvlist shape;
    config_model_shape(c, &shape);
    ZT_TRY(param_table_build(&shape, &g->table));
    g->params = malloc(g->table.n_params * sizeof(float));
    if (!g->params)
        return zt_error_set(ZT_ERR_NOMEM, "cannot allocate %zu parameters", g->table.n_params);
    snprintf(g->where, sizeof g->where, "model.init_from %s", c->model.init_from);
    return read_base(c->model.init_from, &g->table, g->params);
}

static zt_status load_config(const struct gen_options *o, struct gen_model *g)
{
    struct zt_config c;
    char step_dir[4096];
    int found = 0;
    ZT_TRY(config_load(o->source, o->sets, o->n_sets, &c));
    zt_status st = tokenizer_open(c.data.tokenizer, c.data.tokenizer_dir, &g->tok);
    snprintf(g->chat_template, sizeof g->chat_template, "%s",
             c.data.chat_template ? c.data.chat_template : "");
    if (st == ZT_OK && c.checkpoint.dir)
        st = ckpt_find_latest(c.checkpoint.dir, step_dir, sizeof step_dir, &found);
    if (st == ZT_OK && found)
        st = load_checkpoint(step_dir, g, 0);
    else if (st == ZT_OK && c.model.init_from && c.lora.enabled && c.lora.init_from)
        st = zt_error_set(ZT_ERR_UNSUPPORTED,
                          "%s: lora.init_from: generate reads adapters from a checkpoint or "
                          "from their folder: zerotrain generate %s",
                          o->source, c.lora.init_from);
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
        ZT_TRY(load_folder(o->source, g));
    else
        ZT_TRY(load_config(o, g));
    g->base = param_table_base(&g->table);
    g->base.quant.enabled = 0; /* the weights read are fp32 whatever the base was stored as */
    return ZT_OK;
}

/* --chat: the template (--chat-template, else the run's data.chat_template,
 * else the one the tokenizer's config names) and its end of turn as an id. */
static zt_status resolve_chat(const struct gen_options *o, struct gen_model *g)
{
    char names[128];
    g->end_of_turn = -1;
    if (!o->chat)
        return ZT_OK;
    chat_template_names(names, sizeof names);
    const char *name = o->chat_template      ? o->chat_template
                       : g->chat_template[0] ? g->chat_template
                                             : NULL;
    const char *from = o->chat_template ? "--chat-template" : "data.chat_template";
    if (!name && tokenizer_chat_template(g->tok)) {
        name = chat_template_detect(tokenizer_chat_template(g->tok));
        from = "the tokenizer's chat_template";
    }
    if (!name)
        return zt_error_set(ZT_ERR_USAGE,
                            "--chat: no chat template: data.chat_template is not set and tokenizer "
                            "%s names none that is built in; name one with --chat-template (%s)",
                            tokenizer_name(g->tok), names);
    if (!(g->tpl = chat_template_find(name)))
        return zt_error_set(ZT_ERR_USAGE, "%s: unknown chat template '%s' (known: %s)", from, name,
                            names);
    ZT_TRY(chat_template_check(g->tpl, g->tok, from));
    const char *end = chat_template_end_of_turn(g->tpl);
    struct token_buffer ids = {0};
    zt_status st = tokenizer_encode(g->tok, (const unsigned char *)end, strlen(end), &ids);
    if (st == ZT_OK && ids.n == 1)
        g->end_of_turn = ids.tokens[0];
    else if (st == ZT_OK)
        st = zt_error_set(ZT_ERR_CONFIG,
                          "%s: template %s ends a turn with %s, which tokenizer %s "
                          "does not have as one token",
                          from, name, end, tokenizer_name(g->tok));
    token_buffer_free(&ids);
    return st;
}

/* The text a prompt is generated from: as given, or with --chat the
 * conversation rendered with the generation prompt (a plain prompt is the
 * user's one message). Owned by the caller. */
static zt_status prompt_text(const struct gen_model *g, const char *prompt,
                             const struct json_value *messages, const char *where, char **out)
{
    size_t len;
    if (!g->tpl) {
        *out = strdup(prompt ? prompt : "");
        return *out ? ZT_OK : zt_error_set(ZT_ERR_NOMEM, "out of memory");
    }
    if (messages)
        return chat_render_prompt(g->tpl, messages, where, out, &len);
    char *keys[2] = {"role", "content"};
    struct json_value fields[2] = {{.type = JSON_STRING, .str = "user"},
                                   {.type = JSON_STRING, .str = (char *)(prompt ? prompt : "")}};
    const struct json_value message = {.type = JSON_OBJECT, .n = 2, .items = fields, .keys = keys};
    const struct json_value one = {
        .type = JSON_ARRAY, .n = 1, .items = (struct json_value *)&message};
    return chat_render_prompt(g->tpl, &one, where, out, &len);
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
    int stopped; /* the last id is the end-of-text or end-of-turn token */
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
    r->stopped = 0;
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
        r->stopped = next == eot || next == g->end_of_turn;
        if (r->stopped || step + 1 == o->max_new || r->n == (size_t)infer_max_positions(im))
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
    /* the stop token ends the text, it is not part of it (the ids keep it) */
    ZT_TRY(tokenizer_decode(g->tok, r->ids + r->n_prompt, r->n - r->n_prompt - (size_t)r->stopped,
                            &bytes, &len));
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
    if (!o->json && !o->file) { /* a chat's reply alone: the prompt is the template's text */
        fprintf(out, "%s%s\n", g->tpl ? "" : prompt, text);
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

/* One line of --file: {"prompt": TEXT}, or with --chat {"messages": [...]}
 * too, as the text generated from (prompt_text). */
static zt_status read_prompt_line(const struct gen_model *g, const char *where, const char *line,
                                  size_t len, char **out)
{
    const struct json_source src = {.path = where, .code = ZT_ERR_USAGE, .max_depth = 16};
    struct json_value v;
    ZT_TRY(json_parse(&src, line, len, &v));
    const struct json_value *pr = json_object_get(&v, "prompt", NULL);
    const struct json_value *msgs = g->tpl ? json_object_get(&v, "messages", NULL) : NULL;
    zt_status st = ZT_OK;
    if (v.type != JSON_OBJECT || (!msgs && (!pr || pr->type != JSON_STRING)))
        st = zt_error_set(ZT_ERR_USAGE, "%s: expected an object with a string \"prompt\"%s", where,
                          g->tpl ? " or \"messages\"" : "");
    if (st == ZT_OK)
        st = prompt_text(g, msgs ? NULL : pr->str, msgs, where, out);
    json_free(&v);
    return st;
}

/* The prompts of --file, one a line. */
static zt_status read_prompts(const struct gen_model *g, const char *path, char ***prompts,
                              size_t *n)
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
        char where[4200], *one = NULL;
        snprintf(where, sizeof where, "%s:%zu", path, line);
        st = read_prompt_line(g, where, p, (size_t)(end - p), &one);
        char **grown = st == ZT_OK ? realloc(*prompts, (*n + 1) * sizeof **prompts) : NULL;
        if (st == ZT_OK && !grown)
            st = zt_error_set(ZT_ERR_NOMEM, "cannot hold the prompts of %s", path);
        if (grown) {
            *prompts = grown;
            (*prompts)[(*n)++] = one;
        } else {
            free(one);
        }
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
    zt_status st = check_one_process();
    if (st == ZT_OK)
        st = gen_model_load(o, &g);
    if (st == ZT_OK)
        st = resolve_chat(o, &g);
    if (st == ZT_OK && o->file) {
        st = read_prompts(&g, o->file, &prompts, &n);
    } else if (st == ZT_OK) {
        prompts = calloc(1, sizeof *prompts);
        st = prompts ? prompt_text(&g, o->prompt, NULL, "--prompt", &prompts[0])
                     : zt_error_set(ZT_ERR_NOMEM, "out of memory");
        n = prompts ? 1 : 0;
    }
    if (st == ZT_OK) {
        fprintf(err, "generate: %s, %s, tokenizer %s%s%s, %s\n", g.where, g.base.family->name,
                tokenizer_name(g.tok), g.tpl ? ", chat template " : "",
                g.tpl ? chat_template_name(g.tpl) : "", o->temperature > 0 ? "sampling" : "greedy");
        st = generate_all(o, &g, prompts, n, out, err);
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
