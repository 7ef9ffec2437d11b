/* tests/test_peft.c — fine-tuning checkpoints in and out in PEFT's
 * format, through the binary under mpirun on the micro models: export
 * --adapter writes PEFT's names, shapes and adapter_config.json; --merge
 * gives the model whose evaluation is the adapted checkpoint's; lora.
 * init_from reads an exported adapter back bit for bit and refuses bad
 * folders on every rank alike; a checkpoint of an adapted run keeps only
 * what trains (its base named by file and checksum, or by seed), resumes
 * exactly at another world size and stage, and is refused when its base
 * file changed. The files are read with the formats' own readers where
 * the test checks their content, and compared byte for byte where it
 * checks a round trip. */
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "../common/json.h"
#include "../formats/safetensors.h"
#include "testutil.h"

#define STEPS 8
#define HALF  4

#define LORA                                                                                       \
    "--set lora.enabled=true --set lora.r=8 --set lora.lora_alpha=16 "                             \
    "--set optimizer.params.lr=2e-2 "
#define LLAMA                                                                                      \
    "--set model.family=llama --set model.n_head=4 --set model.n_kv_head=2 "                       \
    "--set model.intermediate_size=64 "
#define ALL_LINEAR "--set lora.target_modules=all-linear "
#define SGD                                                                                        \
    "--set optimizer.type=SGD --set optimizer.params.lr=0.5 --set optimizer.params.betas=null "    \
    "--set optimizer.params.eps=null --set optimizer.params.momentum=0 "

static const char *hf_gpt2(void)
{
    return testutil_source_path("tests/data/hf_gpt2_micro.safetensors");
}

/* Trains micro.yaml at np ranks; fails the test with the log otherwise. */
static void train(const char *dir, const char *name, int np, const char *extra)
{
    ck_assert_msg(testutil_train_micro(dir, name, np, extra) == 0, "%s failed:\n%s", name,
                  testutil_slurp(testutil_path_in(dir, testutil_fmt("%s.log", name))));
}

/* `zerotrain export ARGS`; its log in dir/name.log. Returns the exit status. */
static int export_cmd(const char *dir, const char *name, const char *args)
{
    return testutil_run(testutil_path_in(dir, testutil_fmt("%s.log", name)), "%s export %s",
                        testutil_binary(), args);
}

static void must_export(const char *dir, const char *name, const char *args)
{
    ck_assert_msg(export_cmd(dir, name, args) == 0, "export %s failed:\n%s", args,
                  testutil_slurp(testutil_path_in(dir, testutil_fmt("%s.log", name))));
}

/* `zerotrain eval` of micro.yaml at 2 ranks; log in dir/name.log, metrics
 * in dir/name.json. Returns the exit status. */
static int eval_cmd(const char *dir, const char *name, const char *extra)
{
    return testutil_run(testutil_path_in(dir, testutil_fmt("%s.log", name)),
                        "mpirun --oversubscribe -np 2 %s eval %s --quiet --set run.output_dir=%s/e "
                        "--metrics %s/%s.json %s",
                        testutil_binary(), testutil_source_path("tests/data/micro.yaml"), dir, dir,
                        name, extra);
}

static double eval_loss(const char *dir, const char *name, const char *extra)
{
    ck_assert_msg(eval_cmd(dir, name, extra) == 0, "eval %s failed:\n%s", extra,
                  testutil_slurp(testutil_path_in(dir, testutil_fmt("%s.log", name))));
    const char *json = testutil_slurp(testutil_fmt("%s/%s.json", dir, name));
    const char *at = strstr(json, "\"val_loss\": ");
    double loss = NAN;
    ck_assert_msg(at && sscanf(at + 12, "%lf", &loss) == 1, "%s", json);
    return loss;
}

static long file_size(const char *path)
{
    struct stat sb;
    ck_assert_msg(stat(path, &sb) == 0, "%s missing", path);
    return (long)sb.st_size;
}

/* Bytes of the checkpoint's shard files (every rank's). */
static long shard_bytes(const char *step_dir, int world)
{
    long total = 0;
    for (int r = 0; r < world; r++)
        total += file_size(testutil_fmt("%s/rank-%05d.bin", step_dir, r));
    return total;
}

static int same_bytes(const char *a, const char *b)
{
    size_t na, nb;
    unsigned char *x = testutil_read_file(a, &na), *y = testutil_read_file(b, &nb);
    int same = na == nb && memcmp(x, y, na) == 0;
    free(x);
    free(y);
    return same;
}

/* The parsed adapter_config.json of an adapter folder (json_free it). */
/* dir/name parsed into *root. */
static void read_json(const char *dir, const char *name, struct json_value *root)
{
    size_t n;
    const char *path = testutil_path_in(dir, name);
    char *text = (char *)testutil_read_file(path, &n);
    const struct json_source src = {path, NULL, ZT_ERR_DATA, 8};
    ck_assert_msg(json_parse(&src, text, n, root) == ZT_OK, "%s", zt_error_message());
    free(text);
}

static void read_config(const char *dir, struct json_value *root)
{
    read_json(dir, "adapter_config.json", root);
}

static const struct json_value *member(const struct json_value *root, const char *key,
                                       enum json_type type)
{
    const struct json_value *v = json_object_get(root, key, NULL);
    ck_assert_msg(v && v->type == type, "adapter_config.json: %s missing or not %s", key,
                  json_type_name(type));
    return v;
}

/* ---- export --adapter ---- */

/* What every adapter_config.json says, whatever the model. */
static void check_common_config(const struct json_value *c)
{
    ck_assert_str_eq(member(c, "peft_type", JSON_STRING)->str, "LORA");
    ck_assert_str_eq(member(c, "task_type", JSON_STRING)->str, "CAUSAL_LM");
    ck_assert_uint_eq(member(c, "r", JSON_INT)->magnitude, 8);
    ck_assert_uint_eq(member(c, "lora_alpha", JSON_INT)->magnitude, 16);
    ck_assert(member(c, "lora_dropout", JSON_REAL)->real == 0.0);
    ck_assert_str_eq(member(c, "bias", JSON_STRING)->str, "none");
    ck_assert(member(c, "inference_mode", JSON_BOOL)->boolean);
    ck_assert(member(c, "init_lora_weights", JSON_BOOL)->boolean);
    member(c, "modules_to_save", JSON_NULL);
}

/* GPT-2 from the Hugging Face micro file: c_attn's Conv1D adapters under
 * PEFT's names, A [r, in] and B [out, r] untransposed, F32 (or BF16 with
 * --dtype), metadata {"format": "pt"}; the config names the base file
 * and fan_in_fan_out. */
START_TEST(adapter_export_is_peft_format)
{
    const char *dir = testutil_tmpdir("peft-adapter");
    train(dir, "run", 2,
          testutil_fmt(LORA "--set run.steps=2 --set model.init_from=%s --set checkpoint.dir=%s/ck",
                       hf_gpt2(), dir));
    must_export(dir, "x", testutil_fmt("%s/ck --adapter --out %s/ad", dir, dir));
    struct safetensors *st;
    ck_assert_int_eq(safetensors_open(testutil_fmt("%s/ad/adapter_model.safetensors", dir), &st),
                     ZT_OK);
    ck_assert_int_eq(safetensors_count(st), 4);
    ck_assert_str_eq(safetensors_metadata(st, "format"), "pt");
    for (int l = 0; l < 2; l++) {
        const char *stem = testutil_fmt("base_model.model.transformer.h.%d.attn.c_attn", l);
        const struct safetensors_tensor *a =
            safetensors_find(st, testutil_fmt("%s.lora_A.weight", stem));
        const struct safetensors_tensor *b =
            safetensors_find(st, testutil_fmt("%s.lora_B.weight", stem));
        ck_assert_msg(a && b, "layer %d: adapters missing", l);
        ck_assert(a->dtype == ZT_F32 && a->ndim == 2 && a->shape[0] == 8 && a->shape[1] == 32);
        ck_assert(b->dtype == ZT_F32 && b->ndim == 2 && b->shape[0] == 96 && b->shape[1] == 8);
    }
    safetensors_close(st);

    struct json_value c;
    read_config(testutil_fmt("%s/ad", dir), &c);
    check_common_config(&c);
    const struct json_value *targets = member(&c, "target_modules", JSON_ARRAY);
    ck_assert_int_eq(targets->n, 1);
    ck_assert_str_eq(targets->items[0].str, "c_attn");
    ck_assert(member(&c, "fan_in_fan_out", JSON_BOOL)->boolean);
    ck_assert_str_eq(member(&c, "base_model_name_or_path", JSON_STRING)->str, hf_gpt2());
    json_free(&c);

    must_export(dir, "bf16", testutil_fmt("%s/ck --adapter --dtype bf16 --out %s/ad16", dir, dir));
    ck_assert_int_eq(safetensors_open(testutil_fmt("%s/ad16/adapter_model.safetensors", dir), &st),
                     ZT_OK);
    ck_assert(safetensors_tensor_at(st, 0)->dtype == ZT_BF16);
    safetensors_close(st);
}
END_TEST

/* Llama with a random base: every linear layer's adapters (q_proj [32,
 * 32], k_proj and v_proj [16, 32] with 2 of 4 heads for keys and values,
 * o_proj, the MLP's at 64), nn.Linear's layout (fan_in_fan_out false), no
 * base file (null); all-linear listed as the layers' names, which
 * lora.init_from takes for all-linear. */
START_TEST(llama_adapter_export)
{
    const char *dir = testutil_tmpdir("peft-llama");
    train(dir, "run", 2,
          testutil_fmt(LORA LLAMA ALL_LINEAR "--set run.steps=2 --set checkpoint.dir=%s/ck", dir));
    must_export(dir, "x", testutil_fmt("%s/ck --adapter --out %s/ad", dir, dir));
    struct safetensors *st;
    ck_assert_int_eq(safetensors_open(testutil_fmt("%s/ad/adapter_model.safetensors", dir), &st),
                     ZT_OK);
    ck_assert_int_eq(safetensors_count(st), 2 * 7 * 2);
    const struct safetensors_tensor *t =
        safetensors_find(st, "base_model.model.model.layers.1.self_attn.k_proj.lora_B.weight");
    ck_assert(t && t->shape[0] == 16 && t->shape[1] == 8);
    t = safetensors_find(st, "base_model.model.model.layers.0.mlp.down_proj.lora_A.weight");
    ck_assert(t && t->shape[0] == 8 && t->shape[1] == 64);
    safetensors_close(st);
    struct json_value c;
    read_config(testutil_fmt("%s/ad", dir), &c);
    check_common_config(&c);
    /* all-linear as PEFT saves it: the adapted layers' names */
    const struct json_value *targets = member(&c, "target_modules", JSON_ARRAY);
    static const char *const linear[] = {"q_proj",    "k_proj",  "v_proj",   "o_proj",
                                         "gate_proj", "up_proj", "down_proj"};
    ck_assert_int_eq(targets->n, 7);
    for (int i = 0; i < 7; i++)
        ck_assert_str_eq(targets->items[i].str, linear[i]);
    ck_assert(!member(&c, "fan_in_fan_out", JSON_BOOL)->boolean);
    member(&c, "base_model_name_or_path", JSON_NULL);
    json_free(&c);
    /* read back with the config's all-linear: the same modules, the same model */
    const double want =
        eval_loss(dir, "ckpt", testutil_fmt(LORA LLAMA ALL_LINEAR "--checkpoint %s/ck", dir));
    const double got = eval_loss(
        dir, "folder", testutil_fmt(LORA LLAMA ALL_LINEAR "--set lora.init_from=%s/ad", dir));
    ck_assert_msg(got == want, "lora.init_from evaluates %.9g, the checkpoint %.9g", got, want);
}
END_TEST

/* Every tensor of safetensors file `want_path` is in `got_path` with its
 * shape and its values within tol (relative, or absolute below 1); the
 * files hold as many tensors. */
static void same_tensors(const char *want_path, const char *got_path, double tol)
{
    struct safetensors *want, *got;
    ck_assert_int_eq(safetensors_open(want_path, &want), ZT_OK);
    ck_assert_int_eq(safetensors_open(got_path, &got), ZT_OK);
    ck_assert_int_eq(safetensors_count(want), safetensors_count(got));
    for (int i = 0; i < safetensors_count(want); i++) {
        const struct safetensors_tensor *w = safetensors_tensor_at(want, i);
        const struct safetensors_tensor *g = safetensors_find(got, w->name);
        ck_assert_msg(g && g->ndim == w->ndim, "%s: missing or of another rank", w->name);
        for (int d = 0; d < w->ndim; d++)
            ck_assert_msg(g->shape[d] == w->shape[d], "%s: dimension %d is %llu, not %llu", w->name,
                          d, (unsigned long long)g->shape[d], (unsigned long long)w->shape[d]);
        const uint64_t n = safetensors_tensor_numel(w);
        float *x = malloc(n * sizeof *x), *y = malloc(n * sizeof *y);
        ck_assert(x && y);
        ck_assert_int_eq(safetensors_read_f32(want, w, 0, n, x), ZT_OK);
        ck_assert_int_eq(safetensors_read_f32(got, g, 0, n, y), ZT_OK);
        for (uint64_t j = 0; j < n; j++)
            ck_assert_msg(fabs((double)y[j] - x[j]) <= tol * fmax(1.0, fabs((double)x[j])),
                          "%s[%llu]: %.9g, the one-rank run's %.9g", w->name, (unsigned long long)j,
                          (double)y[j], (double)x[j]);
        free(x);
        free(y);
    }
    safetensors_close(want);
    safetensors_close(got);
}

/* Llama's every linear layer adapted and trained at T=2, its adapters cut
 * over the two ranks: export --adapter writes whole tensors, PEFT's, the
 * one-rank run's names, shapes and values (within 1e-5), and so does
 * --merge. Plain SGD: AdamW's first steps move an element by about lr
 * whatever its gradient's size, so the fp32 rounding of a near-zero
 * gradient, which the slices' sums order otherwise, shows as lr-sized
 * differences there (measured 2.5e-5 at lr 2e-2); SGD moves each element
 * by its gradient, which is what the slices must get right. */
START_TEST(tensor_parallel_adapters_export_whole)
{
    const char *dir = testutil_tmpdir("peft-tp");
    static const struct {
        const char *name;
        int np, T;
    } runs[] = {{"one", 1, 1}, {"t2", 2, 2}};
    for (int i = 0; i < 2; i++) {
        train(dir, runs[i].name, runs[i].np,
              testutil_fmt(LORA LLAMA ALL_LINEAR SGD "--set run.steps=4 "
                                                     "--set tensor_parallel.size=%d "
                                                     "--set gradient_accumulation_steps=2 "
                                                     "--set checkpoint.dir=%s/%s-ck",
                           runs[i].T, dir, runs[i].name));
        must_export(dir, testutil_fmt("%s-adapter", runs[i].name),
                    testutil_fmt("%s/%s-ck --adapter --out %s/%s-ad", dir, runs[i].name, dir,
                                 runs[i].name));
        must_export(dir, testutil_fmt("%s-merge", runs[i].name),
                    testutil_fmt("%s/%s-ck --merge --out %s/%s-m.safetensors", dir, runs[i].name,
                                 dir, runs[i].name));
    }
    same_tensors(testutil_fmt("%s/one-ad/adapter_model.safetensors", dir),
                 testutil_fmt("%s/t2-ad/adapter_model.safetensors", dir), 1e-5);
    same_tensors(testutil_fmt("%s/one-m.safetensors", dir),
                 testutil_fmt("%s/t2-m.safetensors", dir), 1e-5);
}
END_TEST

/* Plain export of an adapted checkpoint, and --adapter of one without
 * adapters, say what to ask for instead (exit 2). */
START_TEST(export_asks_for_what_fits)
{
    const char *dir = testutil_tmpdir("peft-usage");
    train(dir, "lora", 1, testutil_fmt(LORA "--set run.steps=1 --set checkpoint.dir=%s/a", dir));
    train(dir, "full", 1, testutil_fmt("--set run.steps=1 --set checkpoint.dir=%s/f", dir));
    ck_assert_int_eq(export_cmd(dir, "plain", testutil_fmt("%s/a --out %s/m.st", dir, dir)), 2);
    const char *log = testutil_slurp(testutil_path_in(dir, "plain.log"));
    ck_assert_msg(strstr(log, "holds LoRA adapters (r 8)") && strstr(log, "export --merge") &&
                      strstr(log, "export --adapter"),
                  "%s", log);
    ck_assert_int_eq(export_cmd(dir, "noad", testutil_fmt("%s/f --adapter --out %s/ad", dir, dir)),
                     2);
    log = testutil_slurp(testutil_path_in(dir, "noad.log"));
    ck_assert_msg(strstr(log, "holds no LoRA adapters"), "%s", log);
    ck_assert_int_eq(
        export_cmd(dir, "both", testutil_fmt("%s/a --merge --adapter --out %s/x", dir, dir)), 2);
}
END_TEST

/* ---- export --merge ---- */

/* The merged model, evaluated as a plain model (`plain`: the model's
 * keys without init_from), gives the adapted checkpoint's validation loss. */
static const char *merged_evaluates_the_same(const char *tag, const char *model, const char *lora,
                                             const char *plain)
{
    const char *dir = testutil_tmpdir(tag);
    train(dir, "run", 2,
          testutil_fmt("%s%s--set run.steps=6 --set checkpoint.dir=%s/ck", model, lora, dir));
    const double adapted =
        eval_loss(dir, "adapted", testutil_fmt("%s%s--checkpoint %s/ck", model, lora, dir));
    must_export(dir, "merge", testutil_fmt("%s/ck --merge --out %s/merged.safetensors", dir, dir));
    const double merged = eval_loss(
        dir, "merged", testutil_fmt("%s--set model.init_from=%s/merged.safetensors", plain, dir));
    ck_assert_msg(fabs(merged - adapted) <= 1e-5, "%s: merged %.9g, adapted %.9g", tag, merged,
                  adapted);
    return dir;
}

/* scripts/reference/peft_merge.py (PyTorch, float64) merges the exported
 * adapter into the base file as PEFT does; the merged export must agree.
 * Without /usr/bin/python3 and torch there is nothing to compare with. */
static void python_merges_alike(const char *dir)
{
    const char *log = testutil_path_in(dir, "python.log");
    if (testutil_run(log, "/usr/bin/python3 -c 'import torch'") != 0) {
        fprintf(stderr, "test_peft: no /usr/bin/python3 with torch: the PyTorch merge is not "
                        "compared\n");
        return;
    }
    must_export(dir, "adapter", testutil_fmt("%s/ck --adapter --out %s/ad", dir, dir));
    ck_assert_msg(testutil_run(log,
                               "/usr/bin/python3 %s --base %s --adapter %s/ad --merged "
                               "%s/merged.safetensors",
                               testutil_source_path("scripts/reference/peft_merge.py"), hf_gpt2(),
                               dir, dir) == 0,
                  "%s", testutil_slurp(log));
}

/* A merged export into a folder that does not exist yet, as
 * save_pretrained: the folder is made, config.json written beside the
 * weights, and a loader that knows only config.json and Hugging Face's
 * architectures (scripts/reference/hf_folder_loss.py, PyTorch) computes
 * the loss zerotrain's eval gives the folder, within 1e-4. Without
 * /usr/bin/python3 and torch only the files are checked. */
static void export_loads_from_its_folder(const char *tag, const char *model, const char *plain,
                                         const char *architecture)
{
    enum { WINDOWS = 6, T = 32 };
    const char *dir = testutil_tmpdir(tag);
    train(dir, "run", 2,
          testutil_fmt("%s" LORA "--set run.steps=3 --set checkpoint.dir=%s/ck", model, dir));
    must_export(dir, "merge",
                testutil_fmt("%s/ck --merge --out %s/out/hf/model.safetensors", dir, dir));
    struct json_value c;
    read_json(testutil_fmt("%s/out/hf", dir), "config.json", &c);
    const struct json_value *arch = member(&c, "architectures", JSON_ARRAY);
    ck_assert_int_eq(arch->n, 1);
    ck_assert_str_eq(arch->items[0].str, architecture);
    ck_assert_str_eq(member(&c, "torch_dtype", JSON_STRING)->str, "float32");
    json_free(&c);

    const char *val = testutil_path_in(dir, "val.txt");
    ck_assert_int_eq(testutil_run(testutil_path_in(dir, "val.log"),
                                  "(head -c %d /usr/share/common-licenses/GPL-3 > %s)",
                                  WINDOWS * T + 1, val),
                     0);
    const double ours = eval_loss(
        dir, "ours",
        testutil_fmt("%s--set model.init_from=%s/out/hf --set data.val=%s --set run.eval_batches=0",
                     plain, dir, val));
    const double theirs = testutil_torch_folder_loss(testutil_path_in(dir, "python.log"),
                                                     testutil_fmt("%s/out/hf", dir), val, T);
    if (isnan(theirs))
        return;
    ck_assert_msg(fabs(theirs - ours) <= 1e-4, "%s: PyTorch %.9f, zerotrain %.9f", tag, theirs,
                  ours);
}

START_TEST(export_is_a_pretrained_folder_gpt2)
{
    export_loads_from_its_folder("peft-folder-gpt2",
                                 testutil_fmt("--set model.init_from=%s ", hf_gpt2()), "",
                                 "GPT2LMHeadModel");
}
END_TEST

START_TEST(export_is_a_pretrained_folder_llama)
{
    export_loads_from_its_folder("peft-folder-llama", LLAMA ALL_LINEAR, LLAMA, "LlamaForCausalLM");
}
END_TEST

/* Whether f has bits a bf16 rounding would drop. */
static int below_bf16(float f)
{
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return (u & 0xffffu) != 0;
}

/* A bf16 QLoRA run merged and exported as fp32: the tensors the run never
 * changed (embeddings, norms, biases) are the base file's values, bit for
 * bit, not their bf16 roundings. */
START_TEST(a_merge_keeps_untouched_tensors_exact)
{
    const char *dir = testutil_tmpdir("peft-exact");
    train(dir, "run", 2,
          testutil_fmt("--set model.init_from=%s " LORA
                       "--set lora.target_modules=all-linear --set bf16.enabled=true "
                       "--set quantization.load_in_4bit=true "
                       "--set quantization.bnb_4bit_compute_dtype=bf16 --set run.steps=2 "
                       "--set checkpoint.dir=%s/ck",
                       hf_gpt2(), dir));
    must_export(dir, "merge", testutil_fmt("%s/ck --merge --out %s/m.safetensors", dir, dir));
    struct safetensors *base, *merged;
    ck_assert_int_eq(safetensors_open(hf_gpt2(), &base), ZT_OK);
    ck_assert_int_eq(safetensors_open(testutil_fmt("%s/m.safetensors", dir), &merged), ZT_OK);
    int compared = 0, rounded = 0;
    for (int i = 0; i < safetensors_count(merged); i++) {
        const struct safetensors_tensor *m = safetensors_tensor_at(merged, i);
        const char *name = m->name;
        if (strstr(name, ".weight") && (strstr(name, "attn.c_") || strstr(name, "mlp.c_")))
            continue; /* adapted: merged */
        const struct safetensors_tensor *b = safetensors_find(base, name);
        if (!b)
            b = safetensors_find(base, testutil_fmt("transformer.%s", name));
        ck_assert_msg(b != NULL, "%s: not in the base", name);
        const uint64_t n = safetensors_tensor_numel(m);
        float *x = malloc(n * sizeof *x), *y = malloc(n * sizeof *y);
        ck_assert(x && y && safetensors_tensor_numel(b) == n);
        ck_assert_int_eq(safetensors_read_f32(merged, m, 0, n, x), ZT_OK);
        ck_assert_int_eq(safetensors_read_f32(base, b, 0, n, y), ZT_OK);
        ck_assert_msg(memcmp(x, y, n * sizeof *x) == 0, "%s differs from the base", name);
        for (uint64_t j = 0; j < n; j++) /* not vacuous: bf16 would have rounded these */
            rounded += below_bf16(y[j]);
        compared++;
        free(x);
        free(y);
    }
    safetensors_close(base);
    safetensors_close(merged);
    ck_assert_msg(compared >= 6 && rounded > 0, "%d tensors compared, %d values below bf16",
                  compared, rounded);
}
END_TEST

START_TEST(merge_gives_the_adapted_loss_gpt2)
{
    char dir[1024];
    snprintf(dir, sizeof dir, "%s",
             merged_evaluates_the_same(
                 "peft-merge-gpt2", testutil_fmt("--set model.init_from=%s ", hf_gpt2()),
                 LORA "--set 'lora.target_modules=[c_attn, c_proj, c_fc]' ", ""));
    python_merges_alike(dir);
}
END_TEST

START_TEST(merge_gives_the_adapted_loss_llama)
{
    merged_evaluates_the_same("peft-merge-llama", LLAMA, LORA ALL_LINEAR, LLAMA);
}
END_TEST

/* QLoRA: the merged export carries the base as the run computed with it,
 * dequantised from its 4-bit codes (NF4, double quantisation, bf16
 * compute), so it evaluates as the adapted checkpoint does. */
START_TEST(merge_of_a_4bit_base_gives_the_adapted_loss)
{
    merged_evaluates_the_same(
        "peft-merge-qlora", testutil_fmt("--set model.init_from=%s ", hf_gpt2()),
        LORA "--set lora.target_modules=all-linear --set quantization.load_in_4bit=true "
             "--set quantization.bnb_4bit_use_double_quant=true "
             "--set quantization.bnb_4bit_compute_dtype=bf16 ",
        "");
}
END_TEST

/* ---- lora.init_from ---- */

/* An exported adapter read back with lora.init_from: the evaluation is
 * the checkpoint's, and a step that cannot move anything (a learning rate
 * that rounds to zero) exports the same bytes again. */
START_TEST(adapters_round_trip_through_lora_init_from)
{
    const char *dir = testutil_tmpdir("peft-init-from");
    const char *base = testutil_fmt("--set model.init_from=%s ", hf_gpt2());
    train(dir, "run", 2,
          testutil_fmt("%s" LORA "--set run.steps=3 --set checkpoint.dir=%s/ck", base, dir));
    must_export(dir, "x1", testutil_fmt("%s/ck --adapter --out %s/ad1", dir, dir));
    const double want =
        eval_loss(dir, "ckpt", testutil_fmt("%s" LORA "--checkpoint %s/ck", base, dir));
    const double got =
        eval_loss(dir, "folder", testutil_fmt("%s" LORA "--set lora.init_from=%s/ad1", base, dir));
    ck_assert_msg(got == want, "lora.init_from evaluates %.9g, the checkpoint %.9g", got, want);
    const char *log = testutil_slurp(testutil_path_in(dir, "folder.log"));
    ck_assert_msg(strstr(log, testutil_fmt("; adapters from %s/ad1 (lora.init_from)", dir)), "%s",
                  log);

    train(dir, "again", 2,
          testutil_fmt("%s" LORA "--set lora.init_from=%s/ad1 --set run.steps=1 "
                       "--set optimizer.params.lr=1e-300 --set checkpoint.dir=%s/ck2",
                       base, dir, dir));
    must_export(dir, "x2", testutil_fmt("%s/ck2 --adapter --out %s/ad2", dir, dir));
    ck_assert(same_bytes(testutil_fmt("%s/ad1/adapter_model.safetensors", dir),
                         testutil_fmt("%s/ad2/adapter_model.safetensors", dir)));
    ck_assert(same_bytes(testutil_fmt("%s/ad1/adapter_config.json", dir),
                         testutil_fmt("%s/ad2/adapter_config.json", dir)));
}
END_TEST

/* adapter_model.safetensors of dir/from without its tensor `drop`, into
 * dir/to beside the same config. */
static void copy_without(const char *dir, const char *from, const char *to, const char *drop)
{
    struct safetensors *in;
    struct safetensors_writer *w;
    ck_assert_int_eq(mkdir(testutil_fmt("%s/%s", dir, to), 0755), 0);
    ck_assert_int_eq(
        safetensors_open(testutil_fmt("%s/%s/adapter_model.safetensors", dir, from), &in), ZT_OK);
    ck_assert_int_eq(
        safetensors_writer_open(testutil_fmt("%s/%s/adapter_model.safetensors", dir, to), &w),
        ZT_OK);
    for (int i = 0; i < safetensors_count(in); i++) {
        const struct safetensors_tensor *t = safetensors_tensor_at(in, i);
        if (strcmp(t->name, drop) != 0)
            ck_assert_int_eq(safetensors_writer_add(w, t->name, t->dtype, t->ndim, t->shape),
                             ZT_OK);
    }
    ck_assert_int_eq(safetensors_writer_begin_data(w), ZT_OK);
    for (int i = 0; i < safetensors_count(in); i++) {
        const struct safetensors_tensor *t = safetensors_tensor_at(in, i);
        const uint64_t n = safetensors_tensor_numel(t);
        float *v = malloc(n * sizeof *v);
        ck_assert_int_eq(safetensors_read_f32(in, t, 0, n, v), ZT_OK);
        if (strcmp(t->name, drop) != 0)
            ck_assert_int_eq(safetensors_writer_write_f32(w, v, n), ZT_OK);
        free(v);
    }
    ck_assert_int_eq(safetensors_writer_finish(w), ZT_OK);
    safetensors_close(in);
    size_t n;
    unsigned char *cfg =
        testutil_read_file(testutil_fmt("%s/%s/adapter_config.json", dir, from), &n);
    testutil_write_file(testutil_fmt("%s/%s/adapter_config.json", dir, to), cfg, n);
    free(cfg);
}

/* A training run at 2 ranks from the adapter folder dir/name fails with
 * exit 2 and `want` in its log, printed once. */
static void refused(const char *dir, const char *folder, const char *extra, const char *want)
{
    const char *name = testutil_fmt("bad-%s", folder);
    const int rc = testutil_train_micro(
        dir, name, 2,
        testutil_fmt(LORA "--set run.steps=1 --set lora.init_from=%s/%s %s", dir, folder, extra));
    const char *log = testutil_slurp(testutil_path_in(dir, testutil_fmt("%s.log", name)));
    ck_assert_msg(rc == 2, "%s: exit %d:\n%s", folder, rc, log);
    ck_assert_msg(testutil_count(log, want) == 1, "%s: want once '%s':\n%s", folder, want, log);
    ck_assert_msg(testutil_count(log, "zerotrain: error:") == 1, "%s: one error line:\n%s", folder,
                  log);
}

START_TEST(bad_adapter_folders_are_refused)
{
    const char *dir = testutil_tmpdir("peft-bad");
    train(dir, "run", 1, testutil_fmt(LORA "--set run.steps=1 --set checkpoint.dir=%s/ck", dir));
    must_export(dir, "x", testutil_fmt("%s/ck --adapter --out %s/good", dir, dir));
    refused(dir, "none", "", testutil_fmt("lora.init_from: %s/none: no such folder", dir));
    ck_assert_int_eq(mkdir(testutil_fmt("%s/empty", dir), 0755), 0);
    refused(dir, "empty", "",
            testutil_fmt("lora.init_from: %s/empty: no adapter_config.json in it", dir));
    refused(dir, "good", "--set lora.r=4",
            testutil_fmt("lora.init_from: %s/good/adapter_config.json: r is 8, but the config says "
                         "lora.r 4",
                         dir));
    refused(dir, "good", "--set lora.lora_alpha=32",
            "adapter_config.json: lora_alpha is 16, but the config says lora.lora_alpha 32");
    const int rc =
        testutil_train_micro(dir, "off", 1, testutil_fmt("--set lora.init_from=%s/good", dir));
    ck_assert_msg(rc == 2 && strstr(testutil_slurp(testutil_path_in(dir, "off.log")),
                                    "lora.init_from: names adapters, but lora.enabled is false"),
                  "exit %d", rc);
    const char *gone = "base_model.model.transformer.h.1.attn.c_attn.lora_B.weight";
    copy_without(dir, "good", "short", gone);
    refused(dir, "short", "",
            testutil_fmt("lora.init_from: %s/short/adapter_model.safetensors: tensor %s is "
                         "missing (expected shape [96, 8])",
                         dir, gone));
}
END_TEST

/* ---- small checkpoints ---- */

/* The layout of the straight run and the first half: 2 ranks under stage
 * 3, the global batch 4 x 2 sequences; the second half resumes at 4 ranks
 * under stage 2. */
#define TWO  "--set zero_optimization.stage=3 --set gradient_accumulation_steps=2 "
#define FOUR "--set zero_optimization.stage=2 --set gradient_accumulation_steps=1 "

/* Whether a loss of the resumed half is the straight run's, within
 * rounding. Not bit for bit: at 4 ranks each rank's weight gradients are
 * one product, at 2 ranks the second micro step's product is added into
 * the first's, and where a GEMM kernel blocks the sum over rows that
 * addition falls between blocks. Which kernel runs follows the CPU (4e-8
 * apart on one whose OpenBLAS took its generic kernel). The first half,
 * same layout, stays exact. */
static int same_loss(double got, double want)
{
    return fabs(got - want) <= 1e-6 * fabs(want);
}

/* Straight, then half, a checkpoint, and the rest from it at another
 * world size and stage: the losses of the first half are the straight
 * run's bit for bit, those of the second within rounding (same_loss).
 * Returns the checkpoint's step folder. */
static const char *resumes_exactly(const char *dir, const char *model)
{
    double straight[STEPS], first[HALF], second[HALF];
    const char *ck = testutil_fmt("--set checkpoint.dir=%s/ck", dir);
    testutil_train_micro_losses(dir, "straight", 2,
                                testutil_fmt("%s" LORA TWO "--set run.steps=%d", model, STEPS),
                                straight, STEPS);
    testutil_train_micro_losses(
        dir, "first", 2, testutil_fmt("%s" LORA TWO "--set run.steps=%d %s", model, HALF, ck),
        first, HALF);
    testutil_train_micro_losses(
        dir, "second", 4, testutil_fmt("%s" LORA FOUR "--set run.steps=%d %s", model, STEPS, ck),
        second, HALF);
    for (int i = 0; i < HALF; i++) {
        ck_assert_msg(first[i] == straight[i], "step %d: %.17g vs %.17g", i + 1, first[i],
                      straight[i]);
        ck_assert_msg(same_loss(second[i], straight[HALF + i]),
                      "step %d after resuming at 4 ranks: %.17g vs %.17g", HALF + 1 + i, second[i],
                      straight[HALF + i]);
    }
    return testutil_fmt("%s/ck/step-%08d", dir, HALF);
}

/* The base from model.init_from: meta.json names the file with its
 * checksum and size; the shards hold the adapters and their AdamW moments
 * only, a fraction of a full checkpoint of the same model. */
START_TEST(small_checkpoints_resume_exactly_file_base)
{
    const char *dir = testutil_tmpdir("peft-small");
    const char *model = testutil_fmt("--set model.init_from=%s ", hf_gpt2());
    char step[1024];
    snprintf(step, sizeof step, "%s", resumes_exactly(dir, model));
    const char *meta = testutil_slurp(testutil_fmt("%s/meta.json", step));
    ck_assert_msg(strstr(meta, "\"format_version\": 3,") &&
                      strstr(meta, testutil_fmt("\"base\": {\"path\": \"%s\", \"checksum\": \"0x",
                                                hf_gpt2())) &&
                      strstr(meta, "\"bytes\": 149832}"),
                  "%s", meta);
    const long small = shard_bytes(step, 2);
    train(
        dir, "full", 2,
        testutil_fmt("%s" TWO "--set run.steps=%d --set checkpoint.dir=%s/full", model, HALF, dir));
    const long full = shard_bytes(testutil_fmt("%s/full/step-%08d", dir, HALF), 2);
    /* adapters 2048 params x 12 bytes (weights, two moments) against the
     * model's 34688 x 12 */
    fprintf(stderr,
            "test_peft: micro GPT-2 checkpoint shards: %ld bytes with LoRA r 8 (base kept "
            "outside), %ld bytes full fine-tuning (%.1f%%)\n",
            small, full, 100.0 * (double)small / (double)full);
    ck_assert_msg(small * 10 < full, "small %ld bytes, full %ld", small, full);
}
END_TEST

/* A random base is drawn again from the seed ("base": {"init": "seed"}). */
START_TEST(small_checkpoints_resume_exactly_seed_base)
{
    const char *dir = testutil_tmpdir("peft-seed");
    const char *step = resumes_exactly(dir, LLAMA ALL_LINEAR);
    const char *meta = testutil_slurp(testutil_fmt("%s/meta.json", step));
    ck_assert_msg(strstr(meta, "\"base\": {\"init\": \"seed\", \"seed\": 42},"), "%s", meta);
    /* the GEMM kernel the run's products took, recorded */
    ck_assert_msg(strstr(meta, "\"gemm\": \"onednn ") || strstr(meta, "\"gemm\": \"openblas "),
                  "%s", meta);
}
END_TEST

/* A base file changed or removed after the checkpoint refuses resume,
 * eval and export, naming the file and both checksums. */
START_TEST(a_changed_base_is_refused)
{
    const char *dir = testutil_tmpdir("peft-changed");
    const char *copy = testutil_path_in(dir, "base.safetensors");
    size_t n;
    unsigned char *bytes = testutil_read_file(hf_gpt2(), &n);
    testutil_write_file(copy, bytes, n);
    const char *args =
        testutil_fmt("--set model.init_from=%s " LORA "--set checkpoint.dir=%s/ck", copy, dir);
    train(dir, "run", 2, testutil_fmt("%s --set run.steps=2", args));
    bytes[n - 5] ^= 1;
    testutil_write_file(copy, bytes, n);
    free(bytes);
    const char *want = testutil_fmt("the base weights %s have changed since the checkpoint was "
                                    "written: checksum 0x",
                                    copy);
    int rc = testutil_train_micro(dir, "resume", 2, testutil_fmt("%s --set run.steps=4", args));
    const char *log = testutil_slurp(testutil_path_in(dir, "resume.log"));
    ck_assert_msg(rc == 1 && testutil_count(log, want) == 1 && strstr(log, "the checkpoint's 0x"),
                  "exit %d:\n%s", rc, log);
    ck_assert_int_eq(eval_cmd(dir, "eval", testutil_fmt("%s --checkpoint %s/ck", LORA, dir)), 1);
    ck_assert_msg(strstr(testutil_slurp(testutil_path_in(dir, "eval.log")), want), "eval");
    ck_assert_int_eq(
        export_cmd(dir, "export", testutil_fmt("%s/ck --merge --out %s/m.st", dir, dir)), 1);
    ck_assert_msg(strstr(testutil_slurp(testutil_path_in(dir, "export.log")), want), "export");
    ck_assert_int_eq(remove(copy), 0);
    rc = testutil_train_micro(dir, "gone", 2, testutil_fmt("%s --set run.steps=4", args));
    log = testutil_slurp(testutil_path_in(dir, "gone.log"));
    ck_assert_msg(rc == 1 && strstr(log, testutil_fmt("its base weights %s (checksum 0x", copy)) &&
                      strstr(log, "no such file or directory"),
                  "exit %d:\n%s", rc, log);
}
END_TEST

/* Resuming with other lora settings names both values. */
START_TEST(other_lora_settings_are_refused_on_resume)
{
    const char *dir = testutil_tmpdir("peft-other");
    const char *ck = testutil_fmt("--set checkpoint.dir=%s/ck", dir);
    train(dir, "run", 1, testutil_fmt(LORA "--set run.steps=1 %s", ck));
    const int rc = testutil_train_micro(
        dir, "r4", 1, testutil_fmt(LORA "--set lora.r=4 --set run.steps=2 %s", ck));
    const char *log = testutil_slurp(testutil_path_in(dir, "r4.log"));
    ck_assert_msg(rc == 2 && strstr(log, "the checkpoint's adapters have lora.r 8, but the config "
                                         "says 4"),
                  "exit %d:\n%s", rc, log);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("peft");
    TCase *tc = testutil_tcase(s, "peft", 900);
    tcase_add_test(tc, adapter_export_is_peft_format);
    tcase_add_test(tc, llama_adapter_export);
    tcase_add_test(tc, tensor_parallel_adapters_export_whole);
    tcase_add_test(tc, export_asks_for_what_fits);
    tcase_add_test(tc, merge_gives_the_adapted_loss_gpt2);
    tcase_add_test(tc, export_is_a_pretrained_folder_gpt2);
    tcase_add_test(tc, export_is_a_pretrained_folder_llama);
    tcase_add_test(tc, a_merge_keeps_untouched_tensors_exact);
    tcase_add_test(tc, merge_gives_the_adapted_loss_llama);
    tcase_add_test(tc, merge_of_a_4bit_base_gives_the_adapted_loss);
    tcase_add_test(tc, adapters_round_trip_through_lora_init_from);
    tcase_add_test(tc, bad_adapter_folders_are_refused);
    tcase_add_test(tc, small_checkpoints_resume_exactly_file_base);
    tcase_add_test(tc, small_checkpoints_resume_exactly_seed_base);
    tcase_add_test(tc, a_changed_base_is_refused);
    tcase_add_test(tc, other_lora_settings_are_refused_on_resume);
    return testutil_run_suite(s, 0);
}
