/* tests/test_generate_torch.c — `zerotrain generate`'s greedy decoding
 * against PyTorch's, token for token. A GPT-2 and a Llama with grouped-query
 * attention are trained briefly on a repeated sentence without
 * checkpoint.dir, so that each run leaves its weights in
 * <output_dir>/final as an exported folder; generate reads that folder, and
 * scripts/reference/hf_greedy.py builds the model from the same folder's
 * config.json and safetensors alone and decodes greedily in float64. The
 * 64 new ids must be equal, and the smallest margin between PyTorch's top
 * two logits must not be a near tie (else equal ids would prove nothing
 * and unequal ones would be rounding). Skipped (77) without
 * /usr/bin/python3 and torch. */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../common/json.h"
#include "testutil.h"

#define NEW_TOKENS 64

static const char sentence[] = "the quick brown fox jumps over the lazy dog. ";
static const char prompt[] = "the quick brown";

/* Trains `model` (a YAML flow mapping) on the sentence into dir/name,
 * without checkpoint.dir: its final weights land in dir/name/final. */
static void train(const char *dir, const char *name, const char *model)
{
    testutil_write_repeated(testutil_path_in(dir, "text.txt"), sentence, 300);
    const char *yaml = testutil_fmt("model: %s\n"
                                    "data: {train: %s/text.txt, val_fraction: 0.05}\n"
                                    "run: {steps: 120, seed: 5, output_dir: %s/%s}\n"
                                    "train_micro_batch_size_per_gpu: 4\n"
                                    "optimizer: {type: AdamW, params: {lr: 3.0e-3, "
                                    "weight_decay: 0.0}}\n",
                                    model, dir, dir, name);
    const char *config = testutil_path_in(dir, testutil_fmt("%s.yaml", name));
    testutil_write_file(config, yaml, strlen(yaml));
    const char *log = testutil_path_in(dir, testutil_fmt("%s.log", name));
    ck_assert_msg(testutil_run(log, "mpirun -np 1 %s train %s --quiet --no-progress",
                               testutil_binary(), config) == 0,
                  "%s", testutil_slurp(log));
    ck_assert_msg(strstr(testutil_slurp(log), testutil_fmt("saved in %s/%s/final", dir, name)),
                  "%s", testutil_slurp(log));
}

/* The "ids" array of the JSON line in `path` into ids[cap]; returns the count. */
static int read_ids(const char *path, int *ids, int cap, double *min_margin)
{
    struct json_value v;
    testutil_load_json(path, &v);
    const struct json_value *a = json_object_get(&v, "ids", NULL);
    ck_assert_msg(a && a->type == JSON_ARRAY && (int)a->n <= cap, "%s: %s", path,
                  testutil_slurp(path));
    for (size_t i = 0; i < a->n; i++)
        ids[i] = (int)a->items[i].magnitude;
    const struct json_value *m = min_margin ? json_object_get(&v, "min_margin", NULL) : NULL;
    if (min_margin)
        *min_margin = m ? m->real : -1;
    const int n = (int)a->n;
    json_free(&v);
    return n;
}

static void compare_with_pytorch(const char *tag, const char *model)
{
    const char *dir = testutil_tmpdir(tag);
    train(dir, "run", model);
    const char *final = testutil_path_in(dir, "run/final");
    ck_assert_msg(
        testutil_run(testutil_path_in(dir, "gen.log"),
                     "(%s generate %s --prompt '%s' --max-new-tokens %d --json > %s/gen.json)",
                     testutil_binary(), final, prompt, NEW_TOKENS, dir) == 0,
        "%s", testutil_slurp(testutil_path_in(dir, "gen.log")));
    char ids_text[256] = "";
    for (size_t i = 0; i < strlen(prompt); i++) /* the byte tokenizer: ids are the bytes */
        snprintf(ids_text + strlen(ids_text), sizeof ids_text - strlen(ids_text), "%s%d",
                 i ? "," : "", (unsigned char)prompt[i]);
    const char *plog = testutil_path_in(dir, "torch.log");
    ck_assert_msg(testutil_run(plog, "(/usr/bin/python3 %s %s %s %d > %s/torch.json)",
                               testutil_source_path("scripts/reference/hf_greedy.py"), final,
                               ids_text, NEW_TOKENS, dir) == 0,
                  "%s", testutil_slurp(plog));
    int ours[NEW_TOKENS + 1], theirs[NEW_TOKENS + 1];
    double margin;
    const int n = read_ids(testutil_path_in(dir, "gen.json"), ours, NEW_TOKENS + 1, NULL);
    const int m = read_ids(testutil_path_in(dir, "torch.json"), theirs, NEW_TOKENS + 1, &margin);
    ck_assert_int_eq(n, NEW_TOKENS);
    ck_assert_int_eq(m, NEW_TOKENS);
    ck_assert_msg(margin > 1e-3,
                  "%s: PyTorch's top two logits are %g apart at one step: a near tie, greedy "
                  "decoding is not comparable there",
                  tag, margin);
    for (int i = 0; i < NEW_TOKENS; i++)
        ck_assert_msg(ours[i] == theirs[i], "%s: new token %d: zerotrain %d, PyTorch %d", tag, i,
                      ours[i], theirs[i]);
}

START_TEST(gpt2_greedy_equals_pytorch)
{
    compare_with_pytorch("gentorch-gpt2", "{vocab_size: 256, block_size: 80, n_layer: 2, "
                                          "n_head: 2, n_embd: 64}");
}
END_TEST

START_TEST(llama_gqa_greedy_equals_pytorch)
{
    compare_with_pytorch("gentorch-llama", "{family: llama, vocab_size: 256, block_size: 80, "
                                           "n_layer: 2, n_head: 4, n_kv_head: 2, n_embd: 64, "
                                           "intermediate_size: 128}");
}
END_TEST

int main(void)
{
    if (system("/usr/bin/python3 -c 'import torch' >/dev/null 2>&1") != 0) {
        fprintf(stderr, "test_generate_torch: skipped: no /usr/bin/python3 with torch to decode "
                        "with\n");
        return 77;
    }
    Suite *s = suite_create("generate_torch");
    TCase *tc = tcase_create("core");
    tcase_set_timeout(tc, 600);
    tcase_add_test(tc, gpt2_greedy_equals_pytorch);
    tcase_add_test(tc, llama_gqa_greedy_equals_pytorch);
    suite_add_tcase(s, tc);
    return testutil_run_suite(s, 0);
}
