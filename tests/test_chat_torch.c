/* tests/test_chat_torch.c — a Llama-3-shaped model fine-tuned with LoRA on
 * chat JSONL under ZeRO 3 at two ranks, against PyTorch.
 *
 * scripts/reference/llama3_chat.py writes the model (Llama 3's vocabulary
 * of 128,256, grouped-query attention, rope_theta 500000; small dims) and
 * the folder gets Llama 3's tokenizer.json and tokenizer_config.json (the
 * reference vocabulary scripts/tokenizers.sh fetches). The same script
 * renders the conversations as Llama 3 Instruct's template is published,
 * taking the special ids from tokenizer.json and every text between them
 * from `zerotrain tokenize`, and marks the assistant's content and
 * <|eot_id|>. That rendering must be, token for token, the ids and the loss
 * mask zerotrain's JSONL reader (data/chat.c through jsonl_load) lays out
 * for training. zerotrain then trains LoRA adapters (all linear layers)
 * for a few steps, each step on every conversation, exports the merged
 * model, and evaluates it; PyTorch computes the assistant-only loss of the
 * exported folder on the same tokens and mask, which must be zerotrain's
 * within 1e-3 (relative), as must the first step's loss (adapters still
 * zero) be PyTorch's loss of the initial folder. Skipped (77) without
 * /usr/bin/python3 and torch. */
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../common/json.h"
#include "../data/data.h"
#include "testutil.h"

enum { SEQ = 96, STEPS = 6, CONVERSATIONS = 4 };

static const char chat[] =
    "{\"messages\": [{\"role\": \"system\", \"content\": \"You answer briefly.\"}, "
    "{\"role\": \"user\", \"content\": \"What is the capital of France?\"}, "
    "{\"role\": \"assistant\", \"content\": \"Paris.\"}]}\n"
    "{\"messages\": [{\"role\": \"user\", \"content\": \"Count to five.\"}, "
    "{\"role\": \"assistant\", \"content\": \" 1, 2, 3, 4, 5 \"}, "
    "{\"role\": \"user\", \"content\": \"Now backwards.\"}, "
    "{\"role\": \"assistant\", \"content\": \"5, 4, 3, 2, 1\"}]}\n"
    "{\"messages\": [{\"role\": \"user\", \"content\": \"Say hello in Japanese.\"}, "
    "{\"role\": \"assistant\", \"content\": \"\\u3053\\u3093\\u306b\\u3061\\u306f "
    "(konnichiwa)\"}]}\n"
    "{\"messages\": [{\"role\": \"system\", \"content\": \"Code only.\"}, "
    "{\"role\": \"user\", \"content\": \"A C loop over i < n\"}, "
    "{\"role\": \"assistant\", \"content\": \"for (int i = 0; i < n; i++) {\\n    "
    "f(i);\\n}\"}]}\n";

static const char *script(void)
{
    return testutil_source_path("scripts/reference/llama3_chat.py");
}

/* Copies Llama 3's tokenizer files into folder. */
static void copy_tokenizer(const char *folder)
{
    const char *from = testutil_tokenizer_dir("llama3", "tokenizer.json");
    static const char *const files[] = {"tokenizer.json", "tokenizer_config.json"};
    for (int i = 0; i < 2; i++) {
        size_t n;
        unsigned char *bytes = testutil_read_file(testutil_path_in(from, files[i]), &n);
        testutil_write_file(testutil_path_in(folder, files[i]), bytes, n);
        free(bytes);
    }
}

/* zerotrain's training layout of the conversations (no packing: window e
 * holds conversation e) against the script's rendering, token by token:
 * the ids, and the mask on every target of the conversation (its first
 * token is only ever the target of the window before, masked). Returns
 * the tokens compared; *counted gets how many count in the loss. */
static size_t compare_masks(const char *folder, const char *chat_path, const char *rendered,
                            size_t *counted)
{
    struct tokenizer *tok;
    ck_assert_msg(tokenizer_open(NULL, folder, &tok) == ZT_OK, "%s", zt_error_message());
    const struct jsonl_options opt = {
        .tokenizer = tok, .packing = 0, .seq_len = SEQ, .chat_template = "llama3"};
    struct token_buffer data = {0};
    ck_assert_msg(jsonl_load(&chat_path, 1, &opt, &data, NULL) == ZT_OK, "%s", zt_error_message());
    ck_assert_ptr_nonnull(data.mask);
    ck_assert_uint_eq(data.n, (size_t)CONVERSATIONS * SEQ + 1);
    size_t len;
    char *text = (char *)testutil_read_file(rendered, &len);
    text[len] = '\0';
    size_t compared = 0, line_at = 0;
    *counted = 0;
    for (int e = 0; e < CONVERSATIONS; e++) {
        const char *end = strchr(text + line_at, '\n');
        ck_assert_ptr_nonnull(end);
        struct json_value v;
        const struct json_source src = {rendered, NULL, ZT_ERR_DATA, 2};
        ck_assert(json_parse(&src, text + line_at, (size_t)(end - text - line_at), &v) == ZT_OK);
        const struct json_value *ids = json_object_get(&v, "ids", NULL),
                                *mask = json_object_get(&v, "mask", NULL);
        ck_assert(ids && mask && ids->n == mask->n && ids->n <= SEQ);
        const size_t at = (size_t)e * SEQ;
        for (size_t k = 0; k < SEQ; k++) {
            const int pad = k >= ids->n;
            ck_assert_msg(pad || data.tokens[at + k] == (int32_t)ids->items[k].magnitude,
                          "conversation %d token %zu: zerotrain %d, the template %lld", e, k,
                          data.tokens[at + k], (long long)ids->items[k].magnitude);
            const int want = !pad && k > 0 && mask->items[k].magnitude == 1;
            ck_assert_msg(data.mask[at + k] == want,
                          "conversation %d token %zu (id %d): zerotrain's mask %d, the "
                          "template's %d",
                          e, k, data.tokens[at + k], data.mask[at + k], want);
            compared += !pad;
            *counted += want;
        }
        json_free(&v);
        line_at = (size_t)(end - text) + 1;
    }
    free(text);
    token_buffer_free(&data);
    tokenizer_close(tok);
    return compared;
}

static double torch_loss(const char *dir, const char *folder, const char *rendered, const char *tag)
{
    const char *log = testutil_path_in(dir, testutil_fmt("torch-%s.log", tag));
    ck_assert_msg(testutil_run(log, "/usr/bin/python3 %s loss %s %s", script(), folder, rendered) ==
                      0,
                  "%s", testutil_slurp(log));
    double loss = NAN;
    ck_assert_msg(sscanf(testutil_slurp(log), "loss %lf", &loss) == 1, "%s", testutil_slurp(log));
    return loss;
}

/* The val_loss `zerotrain eval` gives the weights in folder at two ranks. */
static double eval_loss(const char *dir, const char *config, const char *folder,
                        const char *chat_path)
{
    const char *log = testutil_path_in(dir, "eval.log");
    ck_assert_msg(testutil_run(log,
                               "mpirun --oversubscribe -np 2 %s eval %s --quiet "
                               "--metrics %s/eval.json --set model.init_from=%s "
                               "--set data.val=%s --set run.eval_batches=0",
                               testutil_binary(), config, dir, folder, chat_path) == 0,
                  "%s", testutil_slurp(log));
    return testutil_val_loss(testutil_path_in(dir, "eval.json"));
}

START_TEST(lora_chat_zero3_matches_pytorch)
{
    const char *dir = testutil_tmpdir("chat-torch");
    char model[512], chat_path[512], rendered[512], config[512], eval_config[512];
    snprintf(model, sizeof model, "%s", testutil_path_in(dir, "llama3-small"));
    snprintf(chat_path, sizeof chat_path, "%s", testutil_path_in(dir, "chat.jsonl"));
    snprintf(rendered, sizeof rendered, "%s", testutil_path_in(dir, "rendered.jsonl"));
    snprintf(config, sizeof config, "%s", testutil_path_in(dir, "chat.yaml"));
    snprintf(eval_config, sizeof eval_config, "%s", testutil_path_in(dir, "eval.yaml"));
    ck_assert_msg(testutil_run(testutil_path_in(dir, "init.log"), "/usr/bin/python3 %s init %s",
                               script(), model) == 0,
                  "%s", testutil_slurp(testutil_path_in(dir, "init.log")));
    copy_tokenizer(model);
    testutil_write_file(chat_path, chat, strlen(chat));
    const char *rlog = testutil_path_in(dir, "render.log");
    ck_assert_msg(testutil_run(rlog, "(/usr/bin/python3 %s render %s %s %s > %s)", script(), model,
                               testutil_binary(), chat_path, rendered) == 0,
                  "%s", testutil_slurp(rlog));
    size_t counted;
    const size_t compared = compare_masks(model, chat_path, rendered, &counted);
    printf("mask: %zu tokens of %d conversations compared with the template, %zu counted, "
           "none differs\n",
           compared, CONVERSATIONS, counted);

    /* eval.yaml: the model and the data; chat.yaml adds the adapters */
    const char *base = testutil_fmt(
        "model: {hf_config: %s/config.json, init_from: %s}\n"
        "data: {train: %s, format: jsonl, val_fraction: 0, seq_len: %d, packing: false, "
        "tokenizer: hf, tokenizer_dir: %s, chat_template: llama3}\n"
        "run: {steps: %d, seed: 7, eval_interval: 0, output_dir: %s/run}\n"
        "train_micro_batch_size_per_gpu: %d\n"
        "gradient_accumulation_steps: 1\n"
        "zero_optimization: {stage: 3}\n",
        model, model, chat_path, SEQ, model, STEPS, dir, CONVERSATIONS / 2);
    testutil_write_file(eval_config, base, strlen(base));
    const char *yaml =
        testutil_fmt("%s"
                     "lora: {enabled: true, r: 4, lora_alpha: 8, target_modules: all-linear}\n"
                     "checkpoint: {dir: %s/ck, every: %d}\n"
                     "optimizer: {type: AdamW, params: {lr: 5.0e-2, weight_decay: 0}}\n",
                     base, dir, STEPS);
    testutil_write_file(config, yaml, strlen(yaml));
    const char *log = testutil_path_in(dir, "train.log");
    ck_assert_msg(testutil_run(log,
                               "mpirun --oversubscribe -np 2 %s train %s --quiet --no-progress "
                               "--metrics %s/train.jsonl",
                               testutil_binary(), config, dir) == 0,
                  "%s", testutil_slurp(log));
    double losses[STEPS];
    ck_assert_int_eq(testutil_read_losses(testutil_path_in(dir, "train.jsonl"), losses, STEPS),
                     STEPS);
    ck_assert_msg(losses[STEPS - 1] < losses[0] - 0.05, "loss did not fall: %g -> %g", losses[0],
                  losses[STEPS - 1]);
    const double initial = torch_loss(dir, model, rendered, "initial");
    printf("step 1: zerotrain %.9f, PyTorch on the initial folder %.9f\n", losses[0], initial);
    ck_assert_msg(fabs(losses[0] - initial) <= 1e-3 * initial, "step 1 %.9f, PyTorch %.9f",
                  losses[0], initial);

    const char *merged = testutil_path_in(dir, "merged");
    const char *xlog = testutil_path_in(dir, "export.log");
    ck_assert_msg(
        testutil_run(xlog, "%s export %s/ck --merge --out %s", testutil_binary(), dir, merged) == 0,
        "%s", testutil_slurp(xlog));
    const double ours = eval_loss(dir, eval_config, merged, chat_path);
    const double theirs = torch_loss(dir, merged, rendered, "merged");
    printf("merged after %d steps: zerotrain eval %.9f, PyTorch %.9f (%.2e)\n", STEPS, ours, theirs,
           fabs(ours - theirs) / theirs);
    ck_assert_msg(fabs(ours - theirs) <= 1e-3 * theirs, "zerotrain %.9f, PyTorch %.9f", ours,
                  theirs);
    ck_assert_msg(theirs < initial - 0.1, "the merged model's loss %g is not below the initial %g",
                  theirs, initial);
}
END_TEST

int main(void)
{
    if (system("/usr/bin/python3 -c 'import torch' >/dev/null 2>&1") != 0) {
        fprintf(stderr, "test_chat_torch: skipped: no /usr/bin/python3 with torch\n");
        return 77;
    }
    Suite *s = suite_create("chat_torch");
    TCase *tc = testutil_tcase(s, "chat", 900);
    tcase_add_test(tc, lora_chat_zero3_matches_pytorch);
    return testutil_run_suite(s, 0);
}
