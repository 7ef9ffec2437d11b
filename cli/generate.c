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
 *
 * Under mpirun the world is one tensor-parallel group (Megatron's
 * layout): every rank reads the whole weights, keeps its slice
 * (param_table_tp_slice) and frees the rest, and worker/infer.c computes
 * with the slices over the group's collectives. Each step ends with the
 * whole row of logits on every rank, bit-identical (one allgather of the
 * ranks' vocabulary slices), so every rank draws the same token from the
 * same seed and counter and stops at the same step, without a message
 * per token; rank 0 alone prints. Pipeline stages and data-parallel
 * replicas have nothing to do in a decode, so a world other than T ranks
 * is refused.
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
#include "../comm/comm.h"
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
#include "../worker/tensor_parallel.h"

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
    "weights, an exported file or folder). LoRA adapters are merged in. On the CPU, in fp32:\n"
    "one process, or under `mpirun -np T` the T ranks of a tensor-parallel layout, each\n"
    "holding a slice of every layer (T from --set tensor_parallel.size=T, else from CONFIG or\n"
    "the checkpoint's run; T must divide the heads, the key/value heads and the MLP width).\n"
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
    "  --set key.path=value   override a key of CONFIG (repeatable); on a folder, only\n"
    "                         tensor_parallel.size\n"
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
    const char *chat_from;           /* where chat_template was named */
    const struct chat_template *tpl; /* --chat's; NULL without */
    int32_t end_of_turn;             /* tpl's end of turn as an id; -1 without */
    /* The layout the source names (CONFIG's, the checkpoint's; 1 and 1
     * for a folder), and where that was said, for the world's check. */
    int tp_named, pp_named;
    char layout_from[64];
    /* Under tensor parallelism: this rank's slice of base, whose weights
     * replace params (then the slice's alone). */
    struct param_table slice;
    int sliced;
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

/* --set tensor_parallel.size=T's T (the last one given), 0 when not
 * given. On a folder no other key has a meaning: refused. */
static zt_status tp_of_sets(const struct gen_options *o, int is_config, int *tp)
{
    static const char key[] = "tensor_parallel.size=";
    double v = 0;
    *tp = 0;
    for (int i = 0; i < o->n_sets; i++) {
        const char *a = o->sets[i].assignment;
        if (strncmp(a, key, sizeof key - 1) != 0) {
            if (is_config)
                continue;
            return zt_error_set(ZT_ERR_USAGE,
                                "--set %s: %s is a folder, whose weights take no configuration: "
                                "only --set tensor_parallel.size=T applies",
                                a, o->source);
        }
        char *end;
        v = strtod(a + sizeof key - 1, &end);
        if (end == a + sizeof key - 1 || *end != '\0' || !(v >= 1 && v <= 4096) ||
            v != (double)(int)v)
            return zt_error_set(ZT_ERR_USAGE, "--set %s: expected a whole number in [1, 4096]", a);
        *tp = (int)v;
    }
    return ZT_OK;
}

/* The ranks started with this process, as the launcher says before MPI
 * is started (1 without mpirun): generate starts MPI only under several. */
static int launched_ranks(void)
{
    static const char *const vars[] = {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE"};
    for (size_t i = 0; i < sizeof vars / sizeof vars[0]; i++) {
        const char *v = getenv(vars[i]);
        if (v && atoi(v) > 1)
            return atoi(v);
    }
    return 1;
}

/* The tensor-parallel size T generation runs at on `world` ranks: --set
 * tensor_parallel.size, else under mpirun the layout the source names.
 * One process generates with the whole model whatever layout trained it;
 * several must be exactly the T ranks of one tensor-parallel group. The
 * same on every rank: a refusal is every rank's. */
static zt_status choose_tp(const struct gen_options *o, const struct gen_model *g, int world,
                           int *tp)
{
    struct stat sb;
    int set;
    const int is_config = stat(o->source, &sb) == 0 && !S_ISDIR(sb.st_mode);
    ZT_TRY(tp_of_sets(o, is_config, &set));
    const int T = set > 0 ? set : world > 1 ? g->tp_named : 1;
    const char *from = set > 0 ? "--set tensor_parallel.size" : g->layout_from;
    char stages[224] = "";
    if (g->pp_named > 1)
        snprintf(stages, sizeof stages,
                 "; %s also names %d pipeline stages, which generate does not run (it reads the "
                 "weights whole)",
                 g->layout_from, g->pp_named);
    *tp = T;
    if (world == 1 && T > 1)
        return zt_error_set(ZT_ERR_USAGE,
                            "%s is %d: generate runs the %d slices on %d ranks, and this is one "
                            "process: run it under mpirun -np %d",
                            from, T, T, T, T);
    if (world > T)
        return zt_error_set(ZT_ERR_USAGE,
                            "generate runs one tensor-parallel group, each rank a slice of every "
                            "layer: the world has %d ranks and tensor_parallel.size is %d (%s); "
                            "data-parallel replicas and pipeline stages have nothing to "
                            "generate%s: run mpirun -np %d, or pass --set "
                            "tensor_parallel.size=%d",
                            world, T, from, stages, T, world);
    if (world < T)
        return zt_error_set(ZT_ERR_USAGE,
                            "tensor_parallel.size is %d (%s): generate needs %d ranks, the world "
                            "has %d: run mpirun -np %d",
                            T, from, T, world, T);
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
    g->tp_named = meta.layout.tp;
    g->pp_named = meta.layout.pp;
    snprintf(g->layout_from, sizeof g->layout_from, "the checkpoint's layout");
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

/* The chat template a folder's tokenizer_config.json names, as the run's. */
static zt_status folder_chat_template(const char *dir, struct gen_model *g)
{
    g->chat_from = "tokenizer_config.json's " TOKENIZER_CONFIG_CHAT_KEY;
    return tokenizer_config_chat(dir, g->chat_template, sizeof g->chat_template);
}

/* An exported model folder: config.json, the weights, the tokenizer files. */
static zt_status load_model_folder(const char *dir, struct gen_model *g)
{
    ZT_TRY(build_from_config(dir, NULL, g));
    ZT_TRY(read_base(dir, &g->table, g->params));
    const char *dirs[] = {dir};
    ZT_TRY(open_folder_tokenizer(dirs, 1, &g->tok));
    ZT_TRY(folder_chat_template(dir, g));
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
    }
    if (st == ZT_OK)
        st = folder_chat_template(dir, g);
    if (st == ZT_OK) {
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
    g->tp_named = c.tensor_parallel.size; /* CONFIG's, not the checkpoint's: it is what was named */
    g->pp_named = c.pipeline.stages;
    snprintf(g->layout_from, sizeof g->layout_from, "%s", "CONFIG");
    config_free(&c);
    return st;
}

static zt_status gen_model_load(const struct gen_options *o, struct gen_model *g)
{
    struct stat sb;
    g->tp_named = g->pp_named = 1;
    snprintf(g->layout_from, sizeof g->layout_from, "the folder");
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
    const char *from = o->chat_template ? "--chat-template"
                       : g->chat_from   ? g->chat_from
                                        : "data.chat_template";
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

/* Keeps rank `rank`'s slice of T of the model (its vocabulary padded to a
 * multiple of T: the padding's logits are never looked at) and frees the
 * rest of the weights. */
static zt_status gen_model_slice(struct gen_model *g, int T, int rank)
{
    const int V = param_table_vocab(&g->base);
    ZT_TRY(param_table_tp_slice(&g->base, T, rank, (V + T - 1) / T * T, &g->slice));
    g->sliced = 1;
    float *part = malloc((g->slice.n_params ? g->slice.n_params : 1) * sizeof *part);
    if (!part)
        return zt_error_set(ZT_ERR_NOMEM, "cannot allocate the slice's %zu parameters",
                            g->slice.n_params);
    param_table_tp_take(&g->slice, g->params, part);
    free(g->params);
    g->params = part;
    return ZT_OK;
}

/* The table generation runs: the slice, else the whole base. */
static const struct param_table *gen_model_table(const struct gen_model *g)
{
    return g->sliced ? &g->slice : &g->base;
}

static void gen_model_free(struct gen_model *g)
{
    if (g->sliced)
        param_table_free(&g->slice);
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

static zt_status group_sum(void *ctx, float *buf, size_t n)
{
    return comm_allreduce(ctx, buf, n, ZT_F32, COMM_OP_SUM);
}

static zt_status group_gather(void *ctx, const float *in, float *out, size_t n)
{
    return comm_allgather(ctx, in, out, n, ZT_F32);
}

/* Every prompt through one model and its cache; `group` is the
 * tensor-parallel group of a slice (NULL: the whole model). out and err
 * are NULL on the ranks that do not print. */
static zt_status generate_all(const struct gen_options *o, const struct gen_model *g,
                              struct comm *group, char **prompts, size_t n, FILE *out, FILE *err)
{
    struct infer_model *im;
    const struct ops_backend *ops; /* the CPU's, keeping its GEMM kernels between steps */
    const struct infer_tp tp = {group, group_sum, group_gather};
    ZT_TRY(ops_cpu_open(&ops));
    zt_status opened = infer_open(gen_model_table(g), g->params, ops, &tp, &im);
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
        if (st == ZT_OK && out)
            st = print_result(g, o, &r, prompts[i], out);
        prefill_s += r.prefill_s;
        decode_s += r.decode_s;
        prefill_n += r.n_prompt;
        decode_n +=
            r.n > r.n_prompt + 1 ? r.n - r.n_prompt - 1 : 0; /* the first is the prefill's */
    }
    if (out)
        fflush(out);
    if (st == ZT_OK && err && r.n == (size_t)infer_max_positions(im))
        fprintf(err, "generate: stopped at the model's %d positions (block_size)\n",
                infer_max_positions(im));
    if (st == ZT_OK && err)
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

/* The prompts to generate from: --file's, or the one --prompt gives. */
static zt_status gen_prompts(const struct gen_options *o, const struct gen_model *g,
                             char ***prompts, size_t *n)
{
    if (o->file)
        return read_prompts(g, o->file, prompts, n);
    *n = 0;
    if (!(*prompts = calloc(1, sizeof **prompts)))
        return zt_error_set(ZT_ERR_NOMEM, "out of memory");
    *n = 1;
    return prompt_text(g, o->prompt, NULL, "--prompt", &(*prompts)[0]);
}

/* Everything before the first token, on every rank alike: the weights,
 * the layout (and this rank's slice), the chat template, the prompts. */
static zt_status prepare(const struct gen_options *o, int world, int rank, struct gen_model *g,
                         int *tp, char ***prompts, size_t *n)
{
    ZT_TRY(gen_model_load(o, g));
    ZT_TRY(choose_tp(o, g, world, tp));
    if (*tp > 1)
        ZT_TRY(gen_model_slice(g, *tp, rank));
    ZT_TRY(resolve_chat(o, g));
    return gen_prompts(o, g, prompts, n);
}

/* Generation on this rank of the tensor-parallel group of tp ranks (the
 * world; 1: one process), after every rank prepared. Rank 0 prints. */
static zt_status generate_on_ranks(const struct gen_options *o, const struct gen_model *g, int tp,
                                   int rank, char **prompts, size_t n, FILE *out, FILE *err)
{
    struct comm *group = NULL;
    char ranks[48] = "";
    if (tp > 1) { /* the whole world, its collectives on the host */
        const struct comm_config cfg = {.backend = "mpi"};
        ZT_TRY(comm_create(&cfg, &group));
        comm_set_name(group, "tensor");
        snprintf(ranks, sizeof ranks, ", %d tensor-parallel ranks", tp);
    }
    if (rank == 0)
        fprintf(err, "generate: %s, %s, tokenizer %s%s%s, %s%s\n", g->where, g->base.family->name,
                tokenizer_name(g->tok), g->tpl ? ", chat template " : "",
                g->tpl ? chat_template_name(g->tpl) : "",
                o->temperature > 0 ? "sampling" : "greedy", ranks);
    const zt_status st =
        generate_all(o, g, group, prompts, n, rank == 0 ? out : NULL, rank == 0 ? err : NULL);
    comm_destroy(group);
    return st;
}

/* Runs generation on this rank of `world`; *print_here says whether this
 * rank prints the error returned (the lowest that found one). Under
 * several ranks each phase ends agreed, so that none waits alone. */
static zt_status run(const struct gen_options *o, int world, FILE *out, FILE *err, int *print_here)
{
    struct gen_model g = {0};
    char **prompts = NULL;
    size_t n = 0;
    int tp = 1;
    const int rank = world > 1 ? comm_world_rank() : 0;
    zt_status st = prepare(o, world, rank, &g, &tp, &prompts, &n);
    *print_here = 1;
    if (world > 1)
        st = comm_world_agree(st, print_here);
    if (st == ZT_OK) {
        st = generate_on_ranks(o, &g, tp, rank, prompts, n, out, err);
        if (world > 1)
            st = comm_world_agree(st, print_here);
    }
    free_prompts(prompts, n);
    gen_model_free(&g);
    return st;
}

int generate_command(int argc, char **argv, FILE *out, FILE *err)
{
    struct gen_options o;
    int print_here = 1;
    zt_status st = launched_ranks() > 1 ? comm_runtime_init(NULL, NULL) : ZT_OK;
    const int mpi = st == ZT_OK && launched_ranks() > 1;
    const int world = mpi ? comm_world_size() : 1;
    if (st == ZT_OK)
        st = parse_args(argc, argv, &o);
    if (st == ZT_OK)
        st = run(&o, world, out, err, &print_here);
    else
        print_here = world == 1 || comm_world_rank() == 0; /* a usage error: every rank's */
    if (st != ZT_OK && print_here) {
        fprintf(err, "zerotrain: error: %s\n",
                zt_error_message()[0] ? zt_error_message() : zt_status_desc(st));
        fflush(err);
    }
    if (mpi)
        comm_runtime_finalize();
    return zt_status_exit_code(st);
}
