/* tests/test_generate.c — `zerotrain generate` through the binary: a model
 * trained on a short sentence repeated continues it, from its CONFIG, its
 * checkpoint, its exported folder and a LoRA run's final adapter folder
 * alike; greedy and seeded sampling repeat; --file gives one JSON line per
 * prompt; on the ranks of a tensor-parallel layout (GPT-2, and a Llama
 * with grouped-query heads) it gives the one process's tokens; exported
 * folders carry the run's chat template and GPT-2's tokenizer_config.json;
 * what it cannot do is refused with exit 2 and a message naming the
 * problem, on every rank. */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../common/json.h"
#include "testutil.h"

static const char sentence[] = "the quick brown fox jumps over the lazy dog. ";

static char dir[512];

/* Trains the model once: a GPT-2 on the byte tokenizer, the sentence
 * repeated, into dir/ck. */
static void train_once(void)
{
    if (dir[0])
        return;
    snprintf(dir, sizeof dir, "%s", testutil_tmpdir("generate"));
    testutil_write_repeated(testutil_path_in(dir, "text.txt"), sentence, 300);
    const char *yaml =
        testutil_fmt("model: {vocab_size: 256, block_size: 64, n_layer: 2, n_head: 2, n_embd: 64}\n"
                     "data: {train: %s/text.txt, val_fraction: 0.05, seq_len: 64}\n"
                     "run: {steps: 150, seed: 3, output_dir: %s/run}\n"
                     "checkpoint: {dir: %s/ck}\n"
                     "train_micro_batch_size_per_gpu: 4\n"
                     "optimizer: {type: AdamW, params: {lr: 3.0e-3, weight_decay: 0.0}}\n",
                     dir, dir, dir);
    testutil_write_file(testutil_path_in(dir, "gen.yaml"), yaml, strlen(yaml));
    ck_assert_msg(testutil_run(testutil_path_in(dir, "train.log"),
                               "mpirun -np 1 %s train %s/gen.yaml --quiet --no-progress",
                               testutil_binary(), dir) == 0,
                  "%s", testutil_slurp(testutil_path_in(dir, "train.log")));
}

/* `zerotrain generate ARGS`, stdout in dir/name.out, stderr in dir/name.log. */
static int generate(const char *name, const char *args)
{
    return testutil_run(testutil_path_in(dir, testutil_fmt("%s.log", name)),
                        "(%s generate %s > %s/%s.out)", testutil_binary(), args, dir, name);
}

static char *output(const char *name, const char *ext)
{
    char *t = strdup(testutil_slurp(testutil_fmt("%s/%s.%s", dir, name, ext)));
    ck_assert(t != NULL);
    return t;
}

START_TEST(continues_the_training_text)
{
    train_once();
    ck_assert_int_eq(generate("config", testutil_fmt("%s/gen.yaml --prompt 'the quick brown' "
                                                     "--max-new-tokens 40",
                                                     dir)),
                     0);
    char *out = output("config", "out"), *log = output("config", "log");
    ck_assert_msg(strncmp(out, "the quick brown fox jumps over the lazy dog. the quick ", 55) == 0,
                  "%s", out);
    ck_assert_int_eq((int)strlen(out), (int)strlen("the quick brown") + 40 + 1);
    ck_assert_msg(strstr(log, testutil_fmt("generate: checkpoint %s/ck/step-00000150", dir)) &&
                      strstr(log, "greedy") && strstr(log, "decode 39 tokens at"),
                  "%s", log);
    /* the checkpoint alone gives the same text: its config names the tokenizer */
    ck_assert_int_eq(generate("ckpt", testutil_fmt("%s/ck --prompt 'the quick brown' "
                                                   "--max-new-tokens 40",
                                                   dir)),
                     0);
    char *again = output("ckpt", "out");
    ck_assert_str_eq(again, out);
    free(out), free(log), free(again);
}
END_TEST

START_TEST(sampling_repeats_with_its_seed)
{
    train_once();
    const char *args = testutil_fmt("%s/ck --prompt 'the ' --max-new-tokens 40 --temperature 1.5 "
                                    "--top-k 20 --top-p 0.95 --seed 11 --json",
                                    dir);
    ck_assert_int_eq(generate("s1", args), 0);
    ck_assert_int_eq(generate("s2", args), 0);
    char *a = output("s1", "out"), *b = output("s2", "out");
    ck_assert_str_eq(a, b);
    ck_assert_msg(strstr(a, "{\"prompt\": \"the \", \"completion\": ") == a, "%s", a);
    ck_assert_msg(strstr(a, "\"prompt_tokens\": 4, \"new_tokens\": 40, \"ids\": ["), "%s", a);
    free(a), free(b);
}
END_TEST

START_TEST(prompts_from_a_file)
{
    train_once();
    const char *jsonl = "{\"prompt\": \"the lazy \"}\n\n{\"prompt\": \"fox \"}\n";
    testutil_write_file(testutil_path_in(dir, "prompts.jsonl"), jsonl, strlen(jsonl));
    ck_assert_int_eq(generate("file", testutil_fmt("%s/ck --file %s/prompts.jsonl "
                                                   "--max-new-tokens 8",
                                                   dir, dir)),
                     0);
    char *out = output("file", "out");
    ck_assert_msg(testutil_count(out, "\n") == 2 &&
                      strstr(out, "{\"prompt\": \"the lazy \", \"completion\": \"dog. the\"") &&
                      strstr(out, "{\"prompt\": \"fox \", \"completion\": \"jumps ov\""),
                  "%s", out);
    free(out);
    const char *bad = "{\"text\": \"x\"}\n";
    testutil_write_file(testutil_path_in(dir, "bad.jsonl"), bad, strlen(bad));
    ck_assert_int_eq(generate("badfile", testutil_fmt("%s/ck --file %s/bad.jsonl", dir, dir)), 2);
    char *log = output("badfile", "log");
    ck_assert_msg(strstr(log, "bad.jsonl:1: expected an object with a string \"prompt\""), "%s",
                  log);
    free(log);
}
END_TEST

/* A LoRA checkpoint generates with its adapters merged in: adapters
 * trained on another text change the base's continuation, and give the
 * same text as the checkpoint's export --merge named in model.init_from. */
START_TEST(lora_checkpoint_equals_its_merged_export)
{
    train_once();
    testutil_write_repeated(testutil_path_in(dir, "other.txt"), "a b c d e f g h i j k l m n o p. ",
                            300);
    ck_assert_int_eq(testutil_run(testutil_path_in(dir, "base.log"),
                                  "%s export %s/ck --out %s/base.safetensors", testutil_binary(),
                                  dir, dir),
                     0);
    ck_assert_int_eq(
        testutil_run(testutil_path_in(dir, "lora.log"),
                     "mpirun -np 1 %s train %s/gen.yaml --quiet --no-progress --set "
                     "lora.enabled=true --set lora.r=8 --set lora.target_modules=all-linear "
                     "--set run.steps=40 --set optimizer.params.lr=1e-2 --set "
                     "model.init_from=%s/base.safetensors --set data.train=%s/other.txt --set "
                     "checkpoint.dir=%s/lck --set run.output_dir=%s/lrun",
                     testutil_binary(), dir, dir, dir, dir, dir),
        0);
    ck_assert_int_eq(testutil_run(testutil_path_in(dir, "merge.log"),
                                  "%s export %s/lck --merge --out %s/merged.safetensors",
                                  testutil_binary(), dir, dir),
                     0);
    const char *from = "%s/gen.yaml --set checkpoint.dir=null --set model.init_from=%s/%s "
                       "--prompt 'the ' --max-new-tokens 30";
    ck_assert_int_eq(
        generate("lora", testutil_fmt("%s/lck --prompt 'the ' --max-new-tokens 30", dir)), 0);
    ck_assert_int_eq(generate("merged", testutil_fmt(from, dir, dir, "merged.safetensors")), 0);
    ck_assert_int_eq(generate("base", testutil_fmt(from, dir, dir, "base.safetensors")), 0);
    char *a = output("lora", "out"), *b = output("merged", "out"), *base = output("base", "out");
    char *log = output("lora", "log");
    ck_assert_str_eq(a, b);
    ck_assert_int_eq((int)strlen(a), 4 + 30 + 1);
    ck_assert_msg(strncmp(base, "the quick brown fox", 19) == 0, "%s", base);
    ck_assert_msg(strcmp(a, base) != 0, "the adapters changed nothing: %s", a);
    ck_assert_msg(strstr(log, "(step 40, adapters merged in)"), "%s", log);
    free(a), free(b), free(base), free(log);

    /* the same run without checkpoint.dir leaves its adapters in
     * output_dir/final, PEFT's folder on the base file, which generates
     * the same text */
    ck_assert_int_eq(
        testutil_run(testutil_path_in(dir, "lfinal.log"),
                     "mpirun -np 1 %s train %s/gen.yaml --quiet --no-progress --set "
                     "lora.enabled=true --set lora.r=8 --set lora.target_modules=all-linear "
                     "--set run.steps=40 --set optimizer.params.lr=1e-2 --set "
                     "model.init_from=%s/base.safetensors --set data.train=%s/other.txt --set "
                     "checkpoint.dir=null --set run.output_dir=%s/lfinal",
                     testutil_binary(), dir, dir, dir, dir),
        0);
    log = output("lfinal", "log");
    ck_assert_msg(strstr(log, testutil_fmt("step 40: the final adapters (no checkpoint.dir) saved "
                                           "in %s/lfinal/final\n",
                                           dir)),
                  "%s", log);
    free(log);
    for (const char *const *f =
             (const char *const[]){"adapter_config.json", "adapter_model.safetensors",
                                   "generation_config.json", NULL};
         *f; f++)
        ck_assert_msg(access(testutil_fmt("%s/lfinal/final/%s", dir, *f), R_OK) == 0, "no %s", *f);
    ck_assert_msg(access(testutil_fmt("%s/lfinal/final.checkpoint", dir), F_OK) != 0,
                  "the final checkpoint was left behind");
    ck_assert_int_eq(
        generate("lfinal",
                 testutil_fmt("%s/lfinal/final --prompt 'the ' --max-new-tokens 30", dir)),
        0);
    char *c = output("lfinal", "out"), *d = output("lora", "out");
    ck_assert_str_eq(c, d);
    log = output("lfinal", "log");
    ck_assert_msg(strstr(log, testutil_fmt("generate: adapter folder %s/lfinal/final on "
                                           "%s/base.safetensors (adapters merged in)",
                                           dir, dir)),
                  "%s", log);
    free(c), free(d), free(log);
}
END_TEST

/* export --out DIR writes a model folder (weights, config.json,
 * generation_config.json) that generate reads alone, giving the
 * checkpoint's text; a second export there needs --force. */
START_TEST(an_exported_folder_generates_alone)
{
    train_once();
    const char *args = "--prompt 'the lazy ' --max-new-tokens 20";
    ck_assert_int_eq(testutil_run(testutil_path_in(dir, "folder.log"),
                                  "%s export %s/ck --out %s/hf", testutil_binary(), dir, dir),
                     0);
    for (const char *const *f = (const char *const[]){"config.json", "generation_config.json",
                                                      "model.safetensors", NULL};
         *f; f++)
        ck_assert_msg(access(testutil_fmt("%s/hf/%s", dir, *f), R_OK) == 0, "no %s", *f);
    ck_assert_int_eq(generate("hf", testutil_fmt("%s/hf %s", dir, args)), 0);
    ck_assert_int_eq(generate("hfck", testutil_fmt("%s/ck %s", dir, args)), 0);
    char *a = output("hf", "out"), *b = output("hfck", "out"), *log = output("hf", "log");
    ck_assert_str_eq(a, b);
    ck_assert_msg(
        strstr(log, testutil_fmt("generate: model folder %s/hf, gpt2, tokenizer bytes", dir)), "%s",
        log);
    free(a), free(b), free(log);
    const int again = testutil_run(testutil_path_in(dir, "again.log"),
                                   "%s export %s/ck --out %s/hf", testutil_binary(), dir, dir);
    char *refused = output("again", "log");
    ck_assert_msg(again == 2 && strstr(refused, testutil_fmt("%s/hf: already holds an export (%s/"
                                                             "hf/config.json): name another "
                                                             "folder, or pass --force",
                                                             dir, dir)),
                  "exit %d: %s", again, refused);
    free(refused);
    ck_assert_int_eq(testutil_run(testutil_path_in(dir, "force.log"),
                                  "%s export %s/ck --out %s/hf --force", testutil_binary(), dir,
                                  dir),
                     0);
}
END_TEST

/* --chat end to end: a Llama 3-shaped model on Llama 3's tokenizer, trained
 * one step on chat data without checkpoint.dir, leaves a final folder with
 * the tokenizer's files and generation_config.json; generate renders the
 * prompt with the assistant's header after it. Needs the reference
 * vocabulary (scripts/tokenizers.sh llama3); without it, says so. */
START_TEST(chat_renders_the_generation_prompt)
{
    const char *env = getenv("ZT_TOKENIZERS_DIR"), *home = getenv("HOME");
    const char *vocab = testutil_fmt(
        "%s/llama3",
        env && env[0] ? env : testutil_fmt("%s/.cache/zerotrain/tokenizers", home ? home : ""));
    if (access(testutil_path_in(vocab, "tokenizer.json"), R_OK) != 0) {
        fprintf(stderr,
                "test_generate: no %s/tokenizer.json (scripts/tokenizers.sh llama3): "
                "--chat is not run end to end\n",
                vocab);
        return;
    }
    const char *cdir = testutil_tmpdir("generate-chat");
    testutil_write_repeated(testutil_path_in(cdir, "chat.jsonl"),
                            "{\"messages\": [{\"role\": \"user\", \"content\": \"Hi\"}, "
                            "{\"role\": \"assistant\", \"content\": \"Hello there\"}]}\n",
                            8);
    const char *yaml = testutil_fmt(
        "model: {family: llama, vocab_size: 128256, block_size: 32, n_layer: 1, n_head: 2, "
        "n_kv_head: 1, n_embd: 16, intermediate_size: 32}\n"
        "data: {format: jsonl, train: %s/chat.jsonl, val_fraction: 0, tokenizer: hf, "
        "tokenizer_dir: %s, chat_template: llama3}\n"
        "run: {steps: 1, output_dir: %s/run}\n"
        "train_micro_batch_size_per_gpu: 2\n",
        cdir, vocab, cdir);
    testutil_write_file(testutil_path_in(cdir, "chat.yaml"), yaml, strlen(yaml));
    const char *log = testutil_path_in(cdir, "train.log");
    ck_assert_msg(testutil_run(log, "mpirun -np 1 %s train %s/chat.yaml --quiet --no-progress",
                               testutil_binary(), cdir) == 0,
                  "%s", testutil_slurp(log));
    ck_assert_str_eq(testutil_slurp(testutil_path_in(cdir, "run/final/generation_config.json")),
                     "{\"bos_token_id\": 128000, \"eos_token_id\": 128001}\n");
    ck_assert_int_eq(access(testutil_path_in(cdir, "run/final/tokenizer.json"), R_OK), 0);
    ck_assert_int_eq(access(testutil_path_in(cdir, "run/final/tokenizer_config.json"), R_OK), 0);
    const char *out = testutil_path_in(cdir, "gen.out"), *glog = testutil_path_in(cdir, "gen.log");
    ck_assert_msg(testutil_run(glog,
                               "(%s generate %s/run/final --chat-template llama3 --prompt Hi "
                               "--max-new-tokens 3 --json > %s)",
                               testutil_binary(), cdir, out) == 0,
                  "%s", testutil_slurp(glog));
    ck_assert_msg(strstr(testutil_slurp(glog), "tokenizer hf, chat template llama3"), "%s",
                  testutil_slurp(glog));
    ck_assert_msg(
        strstr(testutil_slurp(out),
               "{\"prompt\": \"<|begin_of_text|><|start_header_id|>user<|end_header_id|>"
               "\\n\\nHi<|eot_id|><|start_header_id|>assistant<|end_header_id|>\\n\\n\", "),
        "%s", testutil_slurp(out));
    char *named = strdup(testutil_slurp(out));
    /* the run's data.chat_template is in the folder's tokenizer_config.json
     * (Jinja for Hugging Face, the name for generate): --chat alone takes it */
    struct json_value config;
    testutil_load_json(testutil_path_in(cdir, "run/final/tokenizer_config.json"), &config);
    const struct json_value *jinja = json_object_get(&config, "chat_template", NULL);
    const struct json_value *key = json_object_get(&config, "zerotrain_chat_template", NULL);
    ck_assert_msg(jinja && jinja->type == JSON_STRING && key && key->type == JSON_STRING &&
                      strcmp(key->str, "llama3") == 0 &&
                      strstr(jinja->str, "<|start_header_id|>") &&
                      json_object_get(&config, "bos_token", NULL),
                  "%s", testutil_slurp(testutil_path_in(cdir, "run/final/tokenizer_config.json")));
    json_free(&config);
    ck_assert_msg(testutil_run(glog,
                               "(%s generate %s/run/final --chat --prompt Hi --max-new-tokens 3 "
                               "--json > %s)",
                               testutil_binary(), cdir, out) == 0,
                  "%s", testutil_slurp(glog));
    ck_assert_msg(strstr(testutil_slurp(glog), "tokenizer hf, chat template llama3"), "%s",
                  testutil_slurp(glog));
    ck_assert_str_eq(testutil_slurp(out), named);
    free(named);
}
END_TEST

/* `mpirun -np NP zerotrain generate ARGS`, each rank's exit status
 * written to dir/name.log as "rank exit N" after the run's own stderr. */
static int generate_np(const char *name, int np, const char *args)
{
    return testutil_run(testutil_path_in(dir, testutil_fmt("%s.log", name)),
                        "(mpirun --oversubscribe -np %d sh -c \"%s generate %s; echo rank exit "
                        "\\$? >&2\" > %s/%s.out)",
                        np, testutil_binary(), args, dir, name);
}

/* The greedy JSON lines of `args` on 1 process and on NP ranks at
 * tensor_parallel.size NP (`set`: whether to name it with --set) agree
 * token for token; NP ranks print once. */
static void check_tensor_parallel(const char *tag, int np, const char *args, int set)
{
    const char *one = testutil_fmt("%s-1", tag), *many = testutil_fmt("%s-%d", tag, np);
    ck_assert_msg(generate(one, args) == 0, "%s", output(one, "log"));
    ck_assert_msg(generate_np(many, np,
                              testutil_fmt("%s%s", args,
                                           set ? testutil_fmt(" --set tensor_parallel.size=%d", np)
                                               : "")) == 0,
                  "%s", output(many, "log"));
    char *a = output(one, "out"), *b = output(many, "out"), *log = output(many, "log");
    ck_assert_msg(strcmp(a, b) == 0, "%s: 1 process:\n%s%d ranks:\n%s", tag, a, np, b);
    ck_assert_msg(strstr(a, "\"new_tokens\": 24"), "%s", a);
    ck_assert_msg(strstr(log, testutil_fmt(", %d tensor-parallel ranks\n", np)) &&
                      testutil_count(log, "generate: ") == 2 &&
                      testutil_count(log, "rank exit 0") == np,
                  "%s", log);
    free(a), free(b), free(log);
}

/* Greedy decoding on the ranks of a tensor-parallel layout gives the
 * tokens of one process: GPT-2 from a checkpoint and from an exported
 * folder at T = 2; a Llama with grouped-query heads trained at T = 2,
 * from its checkpoint (whose layout names T) and its exported folder, at
 * T = 2 and 4. (The logits agree within 1e-5: tests/test_infer_tp.c.) */
START_TEST(tensor_parallel_ranks_generate_as_one)
{
    train_once();
    const char *prompt = "--prompt 'the quick ' --max-new-tokens 24 --json";
    check_tensor_parallel("tp-gpt2-ck", 2, testutil_fmt("%s/ck %s", dir, prompt), 1);
    ck_assert_int_eq(testutil_run(testutil_path_in(dir, "tp-export.log"),
                                  "%s export %s/ck --out %s/tp-hf", testutil_binary(), dir, dir),
                     0);
    check_tensor_parallel("tp-gpt2-hf", 2, testutil_fmt("%s/tp-hf %s", dir, prompt), 1);

    const char *yaml = testutil_fmt(
        "model: {family: llama, vocab_size: 256, block_size: 64, n_layer: 2, n_head: 8, "
        "n_kv_head: 4, n_embd: 64, intermediate_size: 128}\n"
        "data: {train: %s/text.txt, val_fraction: 0.05, seq_len: 64}\n"
        "run: {steps: 100, seed: 3, output_dir: %s/lrun-tp}\n"
        "checkpoint: {dir: %s/lck-tp}\n"
        "tensor_parallel: {size: 2}\n"
        "train_micro_batch_size_per_gpu: 4\n"
        "optimizer: {type: AdamW, params: {lr: 3.0e-3, weight_decay: 0.0}}\n",
        dir, dir, dir);
    testutil_write_file(testutil_path_in(dir, "llama-tp.yaml"), yaml, strlen(yaml));
    ck_assert_msg(testutil_run(testutil_path_in(dir, "llama-tp.log"),
                               "mpirun --oversubscribe -np 2 %s train %s/llama-tp.yaml --quiet "
                               "--no-progress",
                               testutil_binary(), dir) == 0,
                  "%s", testutil_slurp(testutil_path_in(dir, "llama-tp.log")));
    check_tensor_parallel("tp-llama-ck", 2, testutil_fmt("%s/lck-tp %s", dir, prompt), 0);
    check_tensor_parallel("tp-llama-ck4", 4, testutil_fmt("%s/lck-tp %s", dir, prompt), 1);
    ck_assert_int_eq(testutil_run(testutil_path_in(dir, "tp-lexport.log"),
                                  "%s export %s/lck-tp --out %s/tp-lhf", testutil_binary(), dir,
                                  dir),
                     0);
    check_tensor_parallel("tp-llama-hf", 2, testutil_fmt("%s/tp-lhf %s", dir, prompt), 1);
    /* the continuation is the training text's, not noise */
    char *text = output("tp-llama-hf-2", "out");
    ck_assert_msg(strstr(text, "\"completion\": \"brown fox jumps over the\""), "%s", text);
    free(text);
}
END_TEST

/* Layouts generate cannot run: exit 2 on every rank, the message once. */
START_TEST(tensor_parallel_refusals_are_every_ranks)
{
    train_once();
    const struct {
        int np;
        const char *args, *message;
    } cases[] = {
        {2, "%s/ck --prompt x",
         "the world has 2 ranks and tensor_parallel.size is 1 (the checkpoint's layout)"},
        {3, "%s/ck --prompt x --set tensor_parallel.size=2",
         "the world has 3 ranks and tensor_parallel.size is 2 (--set tensor_parallel.size)"},
        {4, "%s/gen.yaml --prompt x --set tensor_parallel.size=2 --set pipeline.stages=2",
         "CONFIG also names 2 pipeline stages, which generate does not run"},
        {2, "%s/ck --prompt x --set tensor_parallel.size=4",
         "tensor_parallel.size is 4 (--set tensor_parallel.size): generate needs 4 ranks, the "
         "world has 2"},
        {4, "%s/ck --prompt x --set tensor_parallel.size=4",
         "tensor_parallel.size 4 does not divide"},
        {2, "%s/ck --prompt x --set tensor_parallel.size=2 --set run.steps=3",
         "--set run.steps=3: "},
        {2, "%s/ck --prompt x --set tensor_parallel.size=two",
         "--set tensor_parallel.size=two: expected a whole number"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const char *name = testutil_fmt("tp-refused%zu", i);
        const int status = generate_np(name, cases[i].np, testutil_fmt(cases[i].args, dir));
        char *log = output(name, "log");
        ck_assert_msg(status == 0 && strstr(log, cases[i].message) &&
                          testutil_count(log, "zerotrain: error: ") == 1 &&
                          testutil_count(log, "rank exit 2") == cases[i].np,
                      "case %zu: exit %d: %s", i, status, log);
        free(log);
    }
    /* one process asked for slices */
    ck_assert_int_eq(generate("tp-one", testutil_fmt("%s/ck --prompt x --set "
                                                     "tensor_parallel.size=2",
                                                     dir)),
                     2);
    char *log = output("tp-one", "log");
    ck_assert_msg(strstr(log, "--set tensor_parallel.size is 2: generate runs the 2 slices on 2 "
                              "ranks, and this is one process: run it under mpirun -np 2"),
                  "%s", log);
    free(log);
}
END_TEST

/* A GPT-2 run on GPT-2's tokenizer leaves tokenizer_config.json and
 * special_tokens_map.json as save_pretrained writes them for GPT-2, which
 * transformers' AutoTokenizer loads where it is installed. */
START_TEST(gpt2_folder_has_its_tokenizer_config)
{
    const char *gdir = testutil_tmpdir("generate-gpt2tok");
    testutil_write_repeated(testutil_path_in(gdir, "text.txt"), sentence, 40);
    const char *yaml = testutil_fmt(
        "model: {vocab_size: 50257, block_size: 32, n_layer: 1, n_head: 2, n_embd: 16}\n"
        "data: {train: %s/text.txt, val_fraction: 0, seq_len: 32, tokenizer: gpt2, "
        "tokenizer_dir: %s}\n"
        "run: {steps: 1, output_dir: %s/run}\n"
        "train_micro_batch_size_per_gpu: 2\n",
        gdir, testutil_gpt2_vocab_dir(), gdir);
    testutil_write_file(testutil_path_in(gdir, "gpt2.yaml"), yaml, strlen(yaml));
    const char *log = testutil_path_in(gdir, "train.log");
    ck_assert_msg(testutil_run(log, "mpirun -np 1 %s train %s/gpt2.yaml --quiet --no-progress",
                               testutil_binary(), gdir) == 0,
                  "%s", testutil_slurp(log));
    const char *final = testutil_path_in(gdir, "run/final");
    /* the text itself is test_tokenizers' to check: here the run's length */
    struct json_value config;
    testutil_load_json(testutil_path_in(final, "tokenizer_config.json"), &config);
    const struct json_value *length = json_object_get(&config, "model_max_length", NULL);
    const struct json_value *cls = json_object_get(&config, "tokenizer_class", NULL);
    ck_assert_msg(length && length->type == JSON_INT && length->magnitude == 32 && cls &&
                      cls->type == JSON_STRING && strcmp(cls->str, "GPT2Tokenizer") == 0,
                  "%s", testutil_slurp(testutil_path_in(final, "tokenizer_config.json")));
    json_free(&config);
    ck_assert_int_eq(access(testutil_path_in(final, "special_tokens_map.json"), R_OK), 0);
    if (system("/usr/bin/python3 -c 'import transformers' >/dev/null 2>&1") != 0) {
        fprintf(stderr, "test_generate: no /usr/bin/python3 with transformers: the GPT-2 "
                        "tokenizer folder is not loaded with AutoTokenizer\n");
        return;
    }
    const char *plog = testutil_path_in(gdir, "hf.log");
    ck_assert_msg(testutil_run(plog,
                               "/usr/bin/python3 -c \"import sys, transformers; "
                               "t = transformers.AutoTokenizer.from_pretrained(sys.argv[1]); "
                               "assert t.eos_token == '<|endoftext|>' and t.model_max_length == "
                               "32, t; print(t('the quick').input_ids)\" %s",
                               final) == 0,
                  "%s", testutil_slurp(plog));
}
END_TEST

/* Each refusal: exit 2 and the message. */
START_TEST(refusals_name_the_problem)
{
    train_once();
    const struct {
        const char *args, *message;
        int exit_status; /* 2: usage or configuration; 1: a bad checkpoint */
    } cases[] = {
        {"%s/nowhere --prompt x", "nowhere: no such file or folder", 2},
        {"%s/run --prompt x", "neither a checkpoint", 1},
        {"%s/gen.yaml --set checkpoint.dir=%s/none --prompt x",
         "no weights to generate with: checkpoint.dir", 2},
        {"%s/ck --chat --prompt x", "--chat: no chat template", 2},
        {"%s/ck --chat-template nope --prompt x", "--chat-template: unknown chat template 'nope'",
         2},
        {"%s/ck --chat-template llama3 --prompt x",
         "template llama3 writes <|begin_of_text|>, which tokenizer bytes does not have as one "
         "token",
         2},
        {"%s/ck --prompt x --temperature -1", "--temperature -1: expected a number", 2},
        {"%s/ck --prompt x --max-new-tokens 2.5", "--max-new-tokens 2.5: expected a whole number",
         2},
        {"%s/ck --prompt x --frobnicate", "'--frobnicate': unknown option", 2},
        {"%s/ck --prompt x --file y", "--prompt and --file exclude each other", 2},
        {"%s/ck --max-new-tokens 2 --prompt "
         "0123456789012345678901234567890123456789012345678901234567890123456789",
         "the prompt is 70 tokens: the model holds 64 positions", 2},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const char *name = testutil_fmt("refused%zu", i);
        const int status = generate(name, testutil_fmt(cases[i].args, dir, dir));
        char *log = output(name, "log");
        ck_assert_msg(status == cases[i].exit_status && strstr(log, cases[i].message),
                      "case %zu: exit %d: %s", i, status, log);
        free(log);
    }
}
END_TEST

static Suite *generate_suite(void)
{
    Suite *s = suite_create("generate");
    TCase *tc = tcase_create("core");
    tcase_set_timeout(tc, 600);
    tcase_add_test(tc, continues_the_training_text);
    tcase_add_test(tc, sampling_repeats_with_its_seed);
    tcase_add_test(tc, prompts_from_a_file);
    tcase_add_test(tc, lora_checkpoint_equals_its_merged_export);
    tcase_add_test(tc, an_exported_folder_generates_alone);
    tcase_add_test(tc, chat_renders_the_generation_prompt);
    tcase_add_test(tc, gpt2_folder_has_its_tokenizer_config);
    tcase_add_test(tc, refusals_name_the_problem);
    tcase_add_test(tc, tensor_parallel_ranks_generate_as_one);
    tcase_add_test(tc, tensor_parallel_refusals_are_every_ranks);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    return testutil_run_suite(generate_suite(), 0);
}
