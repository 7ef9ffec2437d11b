/* tests/test_config.c — the configuration loader: the YAML tree, defaults,
 * full YAML and DeepSpeed JSON files, overrides, the write/load round trip,
 * a table of bad configs with their exact messages and positions, and fault
 * loops (every byte prefix of a good file; failing each allocation).
 *
 * malloc, calloc and realloc are wrapped at link time (tests/config.cmake)
 * so that the allocation fault loop can fail the N-th one; the countdown is
 * off everywhere else.
 */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "../config/config.h"
#include "../config/yaml_tree.h"
#include "../worker/fp8_scaling.h"
#include "fault_alloc.h"
#include "testutil.h"

/* ---- allocation fault injection ------------------------------------------- */

/* ---- helpers ---------------------------------------------------------------- */

/* Check's assertions report every pass to the parent process, which is
 * slow in the fault loops; so the helpers and loops test with plain `if`
 * and only call into Check on a failure. */
static const char *write_file(const char *dir, const char *name, const char *text, size_t len)
{
    static char path[8][4096];
    static int slot;
    char *p = path[slot++ % 8];
    snprintf(p, 4096, "%s/%s", dir, name);
    FILE *f = fopen(p, "wb");
    if (!f || fwrite(text, 1, len, f) != len || fclose(f) != 0)
        ck_abort_msg("cannot write %s", p);
    return p;
}

static zt_status load_text(const char *text, const char *const *sets, int n_sets,
                           struct zt_config *cfg)
{
    struct config_override ov[8];
    ck_assert_int_le(n_sets, 8);
    for (int i = 0; i < n_sets; i++)
        ov[i].assignment = sets[i];
    const char *path = write_file(testutil_tmpdir("config"), "bad.yaml", text, strlen(text));
    return config_load(path, ov, n_sets, cfg);
}

static int is_zeroed(const struct zt_config *c)
{
    static const struct zt_config zero;
    return memcmp(c, &zero, sizeof zero) == 0;
}

static void assert_same_paths(char **a, int na, char **b, int nb)
{
    ck_assert_int_eq(na, nb);
    for (int i = 0; i < na; i++)
        ck_assert_str_eq(a[i], b[i]);
}

/* Field-by-field, so that a failure names the field. */
static void assert_same_config(const struct zt_config *a, const struct zt_config *b)
{
    ck_assert_int_eq(a->model.vocab_size, b->model.vocab_size);
    ck_assert_int_eq(a->model.block_size, b->model.block_size);
    ck_assert_int_eq(a->model.n_layer, b->model.n_layer);
    ck_assert_int_eq(a->model.n_head, b->model.n_head);
    ck_assert_int_eq(a->model.n_embd, b->model.n_embd);
    ck_assert_str_eq(a->model.family, b->model.family);
    ck_assert_int_eq(a->model.n_kv_head, b->model.n_kv_head);
    ck_assert_int_eq(a->model.intermediate_size, b->model.intermediate_size);
    ck_assert_double_eq(a->model.rope_theta, b->model.rope_theta);
    ck_assert_double_eq(a->model.rms_norm_eps, b->model.rms_norm_eps);
    ck_assert_int_eq(a->model.tie_word_embeddings, b->model.tie_word_embeddings);
    ck_assert_pstr_eq(a->model.hf_config, b->model.hf_config);
    ck_assert_pstr_eq(a->model.init_from, b->model.init_from);
    ck_assert_pstr_eq(a->run.resume, b->run.resume);
    ck_assert_pstr_eq(a->checkpoint.dir, b->checkpoint.dir);
    ck_assert_int_eq(a->checkpoint.every, b->checkpoint.every);
    ck_assert_int_eq(a->checkpoint.keep, b->checkpoint.keep);
    ck_assert_int_eq(a->csv_monitor.enabled, b->csv_monitor.enabled);
    ck_assert_str_eq(a->csv_monitor.output_path, b->csv_monitor.output_path);
    ck_assert_str_eq(a->csv_monitor.job_name, b->csv_monitor.job_name);
    assert_same_paths(a->data.train, a->data.n_train, b->data.train, b->data.n_train);
    assert_same_paths(a->data.val, a->data.n_val, b->data.val, b->data.n_val);
    ck_assert_double_eq(a->data.val_fraction, b->data.val_fraction);
    ck_assert_int_eq(a->data.seq_len, b->data.seq_len);
    ck_assert_int_eq(a->run.steps, b->run.steps);
    ck_assert_uint_eq(a->run.seed, b->run.seed);
    ck_assert_int_eq(a->run.eval_interval, b->run.eval_interval);
    ck_assert_int_eq(a->run.eval_batches, b->run.eval_batches);
    ck_assert_int_eq(a->run.on_nonfinite, b->run.on_nonfinite);
    ck_assert_int_eq(a->run.nonfinite_skip_limit, b->run.nonfinite_skip_limit);
    ck_assert_str_eq(a->run.output_dir, b->run.output_dir);
    ck_assert_str_eq(a->comm.backend, b->comm.backend);
    ck_assert_str_eq(a->comm.allreduce, b->comm.allreduce);
    ck_assert_int_eq(a->tensor_parallel.size, b->tensor_parallel.size);
    ck_assert_int_eq(a->tensor_parallel.sequence_parallel, b->tensor_parallel.sequence_parallel);
    ck_assert_int_eq(a->pipeline.stages, b->pipeline.stages);
    ck_assert_int_eq(a->pipeline.schedule, b->pipeline.schedule);
    ck_assert_int_eq(a->pipeline.partition_method, b->pipeline.partition_method);
    ck_assert_int_eq(a->train_micro_batch_size_per_gpu, b->train_micro_batch_size_per_gpu);
    ck_assert_int_eq(a->gradient_accumulation_steps, b->gradient_accumulation_steps);
    ck_assert_int_eq(a->train_batch_size, b->train_batch_size);
    ck_assert_double_eq(a->gradient_clipping, b->gradient_clipping);
    ck_assert_int_eq(a->steps_per_print, b->steps_per_print);
    ck_assert_str_eq(a->device, b->device);
    ck_assert_str_eq(a->optimizer.type, b->optimizer.type);
    ck_assert_double_eq(a->optimizer.lr, b->optimizer.lr);
    ck_assert_double_eq(a->optimizer.beta1, b->optimizer.beta1);
    ck_assert_double_eq(a->optimizer.beta2, b->optimizer.beta2);
    ck_assert_double_eq(a->optimizer.eps, b->optimizer.eps);
    ck_assert_double_eq(a->optimizer.weight_decay, b->optimizer.weight_decay);
    ck_assert_double_eq(a->optimizer.eps2, b->optimizer.eps2);
    ck_assert_double_eq(a->optimizer.momentum, b->optimizer.momentum);
    ck_assert_double_eq(a->optimizer.dampening, b->optimizer.dampening);
    ck_assert_int_eq(a->optimizer.nesterov, b->optimizer.nesterov);
    ck_assert_double_eq(a->optimizer.clip_threshold, b->optimizer.clip_threshold);
    ck_assert_double_eq(a->optimizer.decay_rate, b->optimizer.decay_rate);
    ck_assert_int_eq(a->optimizer.scale_parameter, b->optimizer.scale_parameter);
    ck_assert_int_eq(a->optimizer.relative_step, b->optimizer.relative_step);
    ck_assert_int_eq(a->optimizer.warmup_init, b->optimizer.warmup_init);
    ck_assert_int_eq(a->scheduler.type, b->scheduler.type);
    ck_assert_double_eq(a->scheduler.warmup_min_lr, b->scheduler.warmup_min_lr);
    ck_assert_double_eq(a->scheduler.warmup_max_lr, b->scheduler.warmup_max_lr);
    ck_assert_int_eq(a->scheduler.warmup_num_steps, b->scheduler.warmup_num_steps);
    ck_assert_int_eq(a->scheduler.warmup_type, b->scheduler.warmup_type);
    ck_assert_int_eq(a->scheduler.total_num_steps, b->scheduler.total_num_steps);
    ck_assert_double_eq(a->scheduler.warmup_min_ratio, b->scheduler.warmup_min_ratio);
    ck_assert_double_eq(a->scheduler.cos_min_ratio, b->scheduler.cos_min_ratio);
    ck_assert_int_eq(a->zero.stage, b->zero.stage);
    ck_assert_int_eq(a->zero.reduce_bucket_size, b->zero.reduce_bucket_size);
    ck_assert_int_eq(a->zero.stage3_prefetch_depth, b->zero.stage3_prefetch_depth);
    ck_assert_int_eq(a->fp16.enabled, b->fp16.enabled);
    ck_assert_int_eq(a->bf16.enabled, b->bf16.enabled);
    ck_assert_int_eq(a->activation_checkpointing.enabled, b->activation_checkpointing.enabled);
    ck_assert_int_eq(a->fp8.enabled, b->fp8.enabled);
    ck_assert_int_eq(a->fp8.format, b->fp8.format);
    ck_assert_int_eq(a->fp8.amax_history_len, b->fp8.amax_history_len);
    ck_assert_int_eq(a->fp8.amax_compute_algo, b->fp8.amax_compute_algo);
    ck_assert_int_eq(a->fp8.margin, b->fp8.margin);
}

/* Writes cfg, loads it back, checks equality; returns the text written. */
static char *round_trip(const struct zt_config *cfg, const char *dir)
{
    char path[4096], *text = NULL;
    size_t len = 0;
    snprintf(path, sizeof path, "%s/written.yaml", dir);
    FILE *f = fopen(path, "w");
    ck_assert_ptr_nonnull(f);
    ck_assert_int_eq(config_write_yaml(cfg, f), ZT_OK);
    ck_assert_int_eq(fclose(f), 0);
    struct zt_config back;
    zt_status s = config_load(path, NULL, 0, &back);
    ck_assert_msg(s == ZT_OK, "reloading the written config: %s", zt_error_message());
    assert_same_config(cfg, &back);
    FILE *m = open_memstream(&text, &len);
    ck_assert_int_eq(config_write_yaml(&back, m), ZT_OK);
    fclose(m);
    config_free(&back);
    return text;
}

/* ---- the YAML tree ------------------------------------------------------------ */

START_TEST(test_tree_positions_and_quoting)
{
    const char *y = "a:\n  b: [1, 'x']\n  c: ~\nd: \"null\"\n";
    struct yaml_tree *t = NULL;
    ck_assert_int_eq(yaml_tree_load_string("t.yaml", y, strlen(y), &t), ZT_OK);
    ck_assert_int_eq(t->root->kind, YAML_TREE_MAP);
    ck_assert_str_eq(t->root->keys[1]->text, "d");
    ck_assert_int_eq(t->root->keys[1]->line, 4);
    ck_assert_int_eq(t->root->keys[1]->col, 1);
    const struct yaml_tree_node *b = yaml_tree_lookup(t, "a.b");
    ck_assert_int_eq(b->kind, YAML_TREE_SEQUENCE);
    ck_assert_int_eq(b->line, 2);
    ck_assert_int_eq(b->col, 6);
    ck_assert_uint_eq(b->n, 2);
    ck_assert(!b->items[0]->quoted);
    ck_assert(b->items[1]->quoted);
    ck_assert_int_eq(b->items[1]->col, 10);
    char where[64];
    yaml_tree_where(b->items[1], where, sizeof where);
    ck_assert_str_eq(where, "t.yaml:2:10");
    ck_assert(yaml_tree_is_null(yaml_tree_lookup(t, "a.c")));
    ck_assert(!yaml_tree_is_null(yaml_tree_lookup(t, "d"))); /* quoted: a string */
    ck_assert_ptr_null(yaml_tree_lookup(t, "a.zz"));
    ck_assert_ptr_null(yaml_tree_lookup(t, "a.b.c"));
    yaml_tree_free(t);
}
END_TEST

START_TEST(test_tree_set_path)
{
    const char *y = "a:\n  b: 1\nn: ~\n";
    struct yaml_tree *t = NULL;
    ck_assert_int_eq(yaml_tree_load_string("t.yaml", y, strlen(y), &t), ZT_OK);
    ck_assert_int_eq(yaml_tree_set_path(t, "a.b=2"), ZT_OK);
    ck_assert_int_eq(yaml_tree_set_path(t, "a.c.d=[0.9, 0.95]"), ZT_OK);
    ck_assert_int_eq(yaml_tree_set_path(t, "n.x=true"), ZT_OK);
    ck_assert_int_eq(yaml_tree_set_path(t, "e=null"), ZT_OK);
    const struct yaml_tree_node *b = yaml_tree_lookup(t, "a.b");
    ck_assert_str_eq(b->text, "2");
    char where[64];
    yaml_tree_where(b, where, sizeof where);
    ck_assert_str_eq(where, "--set a.b=2");
    const struct yaml_tree_node *d = yaml_tree_lookup(t, "a.c.d");
    ck_assert_int_eq(d->kind, YAML_TREE_SEQUENCE);
    ck_assert_str_eq(d->items[1]->text, "0.95");
    ck_assert_str_eq(yaml_tree_lookup(t, "n.x")->text, "true");
    ck_assert(yaml_tree_is_null(yaml_tree_lookup(t, "e")));

    ck_assert_int_eq(yaml_tree_set_path(t, "a.b.z=1"), ZT_ERR_CONFIG);
    ck_assert_str_eq(zt_error_message(), "--set a.b.z=1: 'a.b' is '2', not a mapping");
    ck_assert_int_eq(yaml_tree_set_path(t, "a..b=1"), ZT_ERR_CONFIG);
    ck_assert_str_eq(zt_error_message(), "--set a..b=1: empty component in key path 'a..b'");
    ck_assert_int_eq(yaml_tree_set_path(t, "a.b"), ZT_ERR_CONFIG);
    ck_assert_str_eq(zt_error_message(), "--set a.b: expected key.path=value");
    ck_assert_int_eq(yaml_tree_set_path(t, "a.b={x: 1, x: 2}"), ZT_ERR_CONFIG);
    ck_assert_str_eq(zt_error_message(), "--set a.b={x: 1, x: 2}: duplicate key 'x'");
    /* "key=" is an empty shell variable far more often than a wish for null */
    ck_assert_int_eq(yaml_tree_set_path(t, "a.b="), ZT_ERR_CONFIG);
    ck_assert_str_eq(zt_error_message(),
                     "--set a.b=: empty value (give a value, or null to restore the default)");
    ck_assert_int_eq(yaml_tree_set_path(t, "a.b=  # nothing"), ZT_ERR_CONFIG);
    ck_assert_str_eq(yaml_tree_lookup(t, "a.b")->text, "2"); /* unchanged */
    yaml_tree_free(t);
}
END_TEST

START_TEST(test_tree_errors)
{
    static const struct {
        const char *yaml, *message;
    } cases[] = {
        {"a: 1\nb: [1,\n", "t.yaml:3:1: YAML syntax error: did not find expected node content "
                           "while parsing a flow node"},
        {"a: 1\na: 2\n", "t.yaml:2:1: duplicate key 'a' (lines 1 and 2)"},
        {"a: 1\n---\nb: 2\n", "t.yaml:3:1: a second YAML document; only one is allowed"},
        {"? [k]\n: 1\n", "t.yaml:1:3: mapping keys must be plain strings"},
        {"a: \"x\\0y\"\n", "t.yaml:1:4: string contains a NUL character"},
        {"a: \xc3\x28\n", "t.yaml:1:5: YAML syntax error: invalid trailing UTF-8 octet"},
        {"a: *nowhere\n", "t.yaml:1:4: undefined alias *nowhere"},
        {"a: &x [1, {b: *x}]\n", "t.yaml:1:15: alias *x refers to a node that contains it"},
        {"a: 1\nb: 2\nc: 3\nb: 4\na: 5\n", "t.yaml:4:1: duplicate key 'b' (lines 2 and 4)"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        struct yaml_tree *t = (struct yaml_tree *)&t; /* non-NULL: must be cleared */
        zt_status s = yaml_tree_load_string("t.yaml", cases[i].yaml, strlen(cases[i].yaml), &t);
        ck_assert_int_eq(s, ZT_ERR_CONFIG);
        ck_assert_ptr_null(t);
        ck_assert_msg(strstr(zt_error_message(), cases[i].message), "case %zu: got \"%s\"", i,
                      zt_error_message());
    }
}
END_TEST

START_TEST(test_tree_aliases_depth_and_bombs)
{
    const char *ok = "base: &b {lr: 1, eps: 2}\ncopy: *b\n";
    struct yaml_tree *t = NULL;
    ck_assert_int_eq(yaml_tree_load_string("t.yaml", ok, strlen(ok), &t), ZT_OK);
    ck_assert_str_eq(yaml_tree_lookup(t, "copy.eps")->text, "2");
    yaml_tree_free(t);

    /* 10^6 nodes after expansion from a few lines. */
    const char *bomb = "a: &a [1, 1, 1, 1, 1, 1, 1, 1, 1, 1]\n"
                       "b: &b [*a, *a, *a, *a, *a, *a, *a, *a, *a, *a]\n"
                       "c: &c [*b, *b, *b, *b, *b, *b, *b, *b, *b, *b]\n"
                       "d: &d [*c, *c, *c, *c, *c, *c, *c, *c, *c, *c]\n"
                       "e: &e [*d, *d, *d, *d, *d, *d, *d, *d, *d, *d]\n"
                       "f: &f [*e, *e, *e, *e, *e, *e, *e, *e, *e, *e]\n";
    ck_assert_int_eq(yaml_tree_load_string("t.yaml", bomb, strlen(bomb), &t), ZT_ERR_CONFIG);
    ck_assert_ptr_nonnull(strstr(zt_error_message(), "more than 100000 nodes"));

    char deep[401];
    memset(deep, '[', 200);
    memset(deep + 200, ']', 200);
    deep[400] = '\0';
    ck_assert_int_eq(yaml_tree_load_string("t.yaml", deep, 400, &t), ZT_ERR_CONFIG);
    ck_assert_str_eq(zt_error_message(), "t.yaml:1:66: nested deeper than 64 levels");
}
END_TEST

/* Text made of `n` copies of `unit` between `head` and `tail`. */
static char *repeat(const char *head, const char *unit, size_t n, const char *tail)
{
    size_t lh = strlen(head), lu = strlen(unit), lt = strlen(tail);
    char *text = malloc(lh + lu * n + lt + 1), *p = text;
    ck_assert_ptr_nonnull(text);
    memcpy(p, head, lh);
    p += lh;
    for (size_t i = 0; i < n; i++, p += lu)
        memcpy(p, unit, lu);
    memcpy(p, tail, lt + 1);
    return text;
}

/* Deep nesting, long alias chains, many anchors and wide maps are refused
 * (or loaded) in time linear in the input. Two checks: the work stops
 * where the limit is crossed, which each deep input proves by ending in a
 * syntax error that a reader of the whole text would report instead; and
 * the CPU time, a generous bound (loading the whole 100000-level document
 * first took 25-45 s per input, these take milliseconds). */
START_TEST(test_tree_hostile_input_is_refused_in_linear_time)
{
    enum { LEVELS = 100000 };
    static const struct {
        const char *head, *unit, *tail, *message;
    } deep[] = {
        {"", "[", "]] ]", "t.yaml:1:66: nested deeper than 64 levels"},
        {"", "{a: ", "1} }", "t.yaml:1:258: nested deeper than 64 levels"},
        {"", "- ", "1\n  ]", "t.yaml:1:131: nested deeper than 64 levels"},
    };
    clock_t start = clock();
    for (size_t i = 0; i < sizeof deep / sizeof deep[0]; i++) {
        char *text = repeat(deep[i].head, deep[i].unit, LEVELS, deep[i].tail);
        struct yaml_tree *t = NULL;
        zt_status s = yaml_tree_load_string("t.yaml", text, strlen(text), &t);
        free(text);
        ck_assert_int_eq(s, ZT_ERR_CONFIG);
        ck_assert_msg(strcmp(zt_error_message(), deep[i].message) == 0, "case %zu: got \"%s\"", i,
                      zt_error_message());
    }

    /* A chain of aliases, each list holding the previous one. */
    char *chain = malloc((size_t)LEVELS * 40), *p = chain;
    ck_assert_ptr_nonnull(chain);
    p += sprintf(p, "a0: &a0 [1]\n");
    for (int i = 1; i < LEVELS; i++)
        p += sprintf(p, "a%d: &a%d [*a%d]\n", i, i, i - 1);
    sprintf(p, "]");
    struct yaml_tree *t = NULL;
    ck_assert_int_eq(yaml_tree_load_string("t.yaml", chain, strlen(chain), &t), ZT_ERR_CONFIG);
    ck_assert_str_eq(zt_error_message(), "t.yaml:64:12: nested deeper than 64 levels");
    free(chain);

    /* 30000 anchors, then 30000 aliases of the last one; and a map of 40000
     * keys whose only duplicate is the last. Each alias costs one lookup,
     * each map one sort. */
    char *anchors = repeat("", "- &a 1\n", 30000, "");
    char *aliases = repeat(anchors, "- *a\n", 30000, "");
    ck_assert_int_eq(yaml_tree_load_string("t.yaml", aliases, strlen(aliases), &t), ZT_OK);
    ck_assert_uint_eq(t->root->n, 60000);
    yaml_tree_free(t);
    free(anchors);
    free(aliases);
    size_t keys = 40000, len = 0;
    char *map = malloc(keys * 16 + 16);
    ck_assert_ptr_nonnull(map);
    for (size_t i = 0; i < keys; i++)
        len += (size_t)sprintf(map + len, "k%zu: 1\n", i);
    sprintf(map + len, "k17: 2\n");
    ck_assert_int_eq(yaml_tree_load_string("t.yaml", map, strlen(map), &t), ZT_ERR_CONFIG);
    ck_assert_str_eq(zt_error_message(),
                     "t.yaml:40001:1: duplicate key 'k17' (lines 18 and 40001)");
    free(map);

    double seconds = (double)(clock() - start) / CLOCKS_PER_SEC;
    ck_assert_msg(seconds < 10.0, "hostile inputs took %.1f s of CPU", seconds);
}
END_TEST

START_TEST(test_tree_io_errors)
{
    const char *dir = testutil_tmpdir("config");
    char path[4096];
    snprintf(path, sizeof path, "%s/missing.yaml", dir);
    struct zt_config cfg;
    /* The path the user typed is wrong: a usage error, exit status 2. */
    zt_status s = config_load(path, NULL, 0, &cfg);
    ck_assert_int_eq(s, ZT_ERR_CONFIG);
    ck_assert_int_eq(zt_status_exit_code(s), 2);
    char expected[4200];
    snprintf(expected, sizeof expected,
             "cannot open the configuration file %s: No such file or directory", path);
    ck_assert_str_eq(zt_error_message(), expected);
    ck_assert(is_zeroed(&cfg));

    s = config_load(dir, NULL, 0, &cfg); /* a directory opens but cannot be read */
    ck_assert_int_eq(s, ZT_ERR_CONFIG);
    ck_assert_int_eq(zt_status_exit_code(s), 2);
    snprintf(expected, sizeof expected, "cannot read the configuration file %s: Is a directory",
             dir);
    ck_assert_str_eq(zt_error_message(), expected);
}
END_TEST

/* ---- good configs -------------------------------------------------------------- */

START_TEST(test_defaults)
{
    struct zt_config c;
    zt_status s = load_text("data:\n  train: tokens.bin\n", NULL, 0, &c);
    ck_assert_msg(s == ZT_OK, "%s", zt_error_message());
    ck_assert_ptr_nonnull(strstr(c.source, "/bad.yaml"));
    ck_assert_int_eq(c.model.vocab_size, 256);
    ck_assert_int_eq(c.model.block_size, 128);
    ck_assert_int_eq(c.model.n_layer, 4);
    ck_assert_int_eq(c.model.n_head, 4);
    ck_assert_int_eq(c.model.n_embd, 128);
    ck_assert_ptr_null(c.model.init_from);
    ck_assert_int_eq(c.data.n_train, 1);
    ck_assert_str_eq(c.data.train[0], "tokens.bin");
    ck_assert_ptr_null(c.data.val);
    ck_assert_int_eq(c.data.n_val, 0);
    ck_assert_double_eq(c.data.val_fraction, 0.1);
    ck_assert_int_eq(c.data.seq_len, 128);
    ck_assert_str_eq(c.data.format, "text");
    ck_assert_str_eq(c.data.tokenizer, "bytes");
    ck_assert_ptr_null(c.data.tokenizer_dir);
    ck_assert_int_eq(c.data.packing, 0);
    ck_assert_int_eq(c.run.steps, 100);
    ck_assert_uint_eq(c.run.seed, 1234);
    ck_assert_int_eq(c.run.eval_interval, 0);
    ck_assert_int_eq(c.run.eval_batches, 0);
    ck_assert_str_eq(c.run.output_dir, "runs/latest");
    ck_assert_str_eq(c.comm.backend, "auto");
    ck_assert_str_eq(c.comm.allreduce, "auto");
    ck_assert(c.comm.timeout_s == 600.0);
    ck_assert_int_eq(c.tensor_parallel.size, 1);
    ck_assert_int_eq(c.tensor_parallel.sequence_parallel, 0);
    ck_assert_int_eq(c.pipeline.stages, 1);
    ck_assert_int_eq(c.pipeline.schedule, PIPELINE_1F1B);
    ck_assert_int_eq(c.pipeline.partition_method, PIPELINE_PARTITION_PARAMETERS);
    ck_assert_int_eq(c.train_micro_batch_size_per_gpu, 1);
    ck_assert_int_eq(c.gradient_accumulation_steps, 1);
    ck_assert_int_eq(c.train_batch_size, 0);
    ck_assert_double_eq(c.gradient_clipping, 1.0);
    ck_assert_int_eq(c.steps_per_print, 10);
    ck_assert_str_eq(c.device, "auto");
    ck_assert_str_eq(c.optimizer.type, "AdamW");
    ck_assert_double_eq(c.optimizer.lr, 1e-3);
    ck_assert_double_eq(c.optimizer.beta1, 0.9);
    ck_assert_double_eq(c.optimizer.beta2, 0.999);
    ck_assert_double_eq(c.optimizer.eps, 1e-8);
    ck_assert_double_eq(c.optimizer.weight_decay, 0.01);
    ck_assert_int_eq(c.scheduler.type, ZT_SCHED_NONE);
    ck_assert_double_eq(c.scheduler.warmup_min_lr, 0.0);
    ck_assert_double_eq(c.scheduler.warmup_max_lr, 1e-3);
    ck_assert_int_eq(c.scheduler.warmup_num_steps, 1000);
    ck_assert_int_eq(c.scheduler.warmup_type, ZT_WARMUP_LOG);
    ck_assert_int_eq(c.scheduler.total_num_steps, 100);
    ck_assert_double_eq(c.scheduler.warmup_min_ratio, 0.0);
    ck_assert_double_eq(c.scheduler.cos_min_ratio, 1e-4);
    ck_assert_int_eq(c.zero.stage, 0);
    ck_assert_int_eq(c.zero.reduce_bucket_size, 500000000);
    ck_assert_int_eq(c.zero.stage3_prefetch_depth, 1);
    ck_assert_int_eq(c.zero.offload_optimizer.device, ZT_OFFLOAD_NONE);
    ck_assert_int_eq(c.zero.offload_optimizer.pin_memory, 0);
    ck_assert_int_eq(c.fp16.enabled, 0);
    ck_assert_int_eq(c.bf16.enabled, 0);
    ck_assert_int_eq(c.activation_checkpointing.enabled, 0);
    ck_assert_int_eq(c.fp8.enabled, 0);
    ck_assert_int_eq(c.fp8.format, FP8_RECIPE_HYBRID);
    ck_assert_int_eq(c.fp8.amax_history_len, 1024);
    ck_assert_int_eq(c.fp8.amax_compute_algo, FP8_AMAX_MAX);
    ck_assert_int_eq(c.fp8.margin, 0);
    config_free(&c);
    ck_assert(is_zeroed(&c));
}
END_TEST

/* The fp8 section takes Transformer Engine's names, in any case, and
 * writes them back in ours. */
START_TEST(test_fp8_keys)
{
    struct zt_config c;
    zt_status s = load_text("data: {train: x}\nbf16: {enabled: true}\nfp8:\n  enabled: true\n"
                            "  format: E4M3\n  amax_history_len: 16\n"
                            "  amax_compute_algo: most_recent\n  margin: 2\n",
                            NULL, 0, &c);
    ck_assert_msg(s == ZT_OK, "%s", zt_error_message());
    ck_assert_int_eq(c.fp8.enabled, 1);
    ck_assert_int_eq(c.fp8.format, FP8_RECIPE_E4M3);
    ck_assert_int_eq(c.fp8.amax_history_len, 16);
    ck_assert_int_eq(c.fp8.amax_compute_algo, FP8_AMAX_MOST_RECENT);
    ck_assert_int_eq(c.fp8.margin, 2);
    char *text = round_trip(&c, testutil_tmpdir("config"));
    ck_assert_ptr_nonnull(strstr(text, "format: e4m3"));
    ck_assert_ptr_nonnull(strstr(text, "amax_compute_algo: most_recent"));
    free(text);
    config_free(&c);
    const char *sets[] = {"fp8.format=HYBRID", "fp8.amax_compute_algo=Max"};
    s = load_text("data: {train: x}\nfp8: {enabled: true, format: e4m3}\n", sets, 2, &c);
    ck_assert_msg(s == ZT_OK, "%s", zt_error_message());
    ck_assert_int_eq(c.fp8.format, FP8_RECIPE_HYBRID);
    ck_assert_int_eq(c.fp8.amax_compute_algo, FP8_AMAX_MAX);
    config_free(&c);
}
END_TEST

START_TEST(test_dependent_defaults_follow_their_source)
{
    struct zt_config c;
    zt_status s = load_text("data: {train: x}\nmodel: {block_size: 32}\nrun: {steps: 7}\n"
                            "optimizer: {params: {lr: 0.02}}\nscheduler: {type: WarmupDecayLR}\n",
                            NULL, 0, &c);
    ck_assert_msg(s == ZT_OK, "%s", zt_error_message());
    ck_assert_int_eq(c.data.seq_len, 32);
    ck_assert_double_eq(c.scheduler.warmup_max_lr, 0.02);
    ck_assert_int_eq(c.scheduler.total_num_steps, 7);
    config_free(&c);
}
END_TEST

/* config_lr_schedule hands schedule_lr every scheduler parameter, kinds
 * and warmup types translated one for one. */
/* The betas default to the optimizer's own: Lion's [0.9, 0.99], the
 * Adam family's [0.9, 0.999]; given betas are kept whatever the type. */
START_TEST(test_betas_default_per_optimizer)
{
    static const struct {
        const char *optimizer, *type;
        double beta1, beta2;
    } cases[] = {
        {"{type: lion}", "Lion", 0.9, 0.99},
        {"{type: Adam}", "Adam", 0.9, 0.999},
        {"{type: AdamW}", "AdamW", 0.9, 0.999},
        {"{type: Lion, params: {betas: [0.95, 0.98]}}", "Lion", 0.95, 0.98},
    };
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        struct zt_config c;
        char text[256];
        snprintf(text, sizeof text, "data: {train: x}\noptimizer: %s\n", cases[k].optimizer);
        zt_status s = load_text(text, NULL, 0, &c);
        ck_assert_msg(s == ZT_OK, "%s", zt_error_message());
        ck_assert_str_eq(c.optimizer.type, cases[k].type);
        ck_assert_double_eq(c.optimizer.beta1, cases[k].beta1);
        ck_assert_double_eq(c.optimizer.beta2, cases[k].beta2);
        config_free(&c);
    }
}
END_TEST

START_TEST(test_lr_schedule_from_config)
{
    static const struct {
        const char *scheduler;
        enum lr_schedule_kind kind;
        enum lr_warmup_type warmup_type;
    } cases[] = {
        {"", LR_SCHED_NONE, LR_WARMUP_LOG},
        {"scheduler: {type: WarmupLR, params: {warmup_min_lr: 0.001, warmup_max_lr: 0.03, "
         "warmup_num_steps: 7}}",
         LR_SCHED_WARMUP_LR, LR_WARMUP_LOG},
        {"scheduler: {type: WarmupDecayLR, params: {warmup_min_lr: 0.001, warmup_max_lr: 0.03, "
         "warmup_num_steps: 7, warmup_type: linear, total_num_steps: 40}}",
         LR_SCHED_WARMUP_DECAY_LR, LR_WARMUP_LINEAR},
        {"scheduler: {type: WarmupCosineLR, params: {warmup_num_steps: 7, warmup_type: linear, "
         "total_num_steps: 40, warmup_min_ratio: 0.25, cos_min_ratio: 0.125}}",
         LR_SCHED_WARMUP_COSINE_LR, LR_WARMUP_LINEAR},
    };
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        struct zt_config c;
        char text[512];
        snprintf(text, sizeof text,
                 "data: {train: x}\nrun: {steps: 50}\noptimizer: {params: {lr: 0.02}}\n%s\n",
                 cases[k].scheduler);
        zt_status s = load_text(text, NULL, 0, &c);
        ck_assert_msg(s == ZT_OK, "%s", zt_error_message());
        struct lr_schedule l = config_lr_schedule(&c);
        ck_assert_int_eq(l.kind, cases[k].kind);
        ck_assert_int_eq(l.warmup_type, cases[k].warmup_type);
        ck_assert_double_eq(l.lr, 0.02);
        ck_assert_double_eq(l.warmup_min_lr, c.scheduler.warmup_min_lr);
        ck_assert_double_eq(l.warmup_max_lr, c.scheduler.warmup_max_lr);
        ck_assert_int_eq(l.warmup_num_steps, c.scheduler.warmup_num_steps);
        ck_assert_int_eq(l.total_num_steps, c.scheduler.total_num_steps);
        ck_assert_double_eq(l.warmup_min_ratio, c.scheduler.warmup_min_ratio);
        ck_assert_double_eq(l.cos_min_ratio, c.scheduler.cos_min_ratio);
        config_free(&c);
    }
}
END_TEST

START_TEST(test_full_yaml)
{
    struct zt_config c;
    zt_status s = config_load(testutil_source_path("tests/configs/full.yaml"), NULL, 0, &c);
    ck_assert_msg(s == ZT_OK, "%s", zt_error_message());
    ck_assert_int_eq(c.model.vocab_size, 512);
    ck_assert_int_eq(c.model.block_size, 64);
    ck_assert_int_eq(c.model.n_layer, 2);
    ck_assert_int_eq(c.model.n_head, 2);
    ck_assert_int_eq(c.model.n_embd, 32);
    ck_assert_ptr_null(c.model.init_from);
    ck_assert_int_eq(c.data.n_train, 2);
    ck_assert_str_eq(c.data.train[0], "corpus/a.txt");
    ck_assert_str_eq(c.data.train[1], "corpus/b dir/");
    ck_assert_int_eq(c.data.n_val, 1);
    ck_assert_str_eq(c.data.val[0], "corpus/val.bin");
    ck_assert_double_eq(c.data.val_fraction, 0.2);
    ck_assert_int_eq(c.data.seq_len, 48);
    ck_assert_int_eq(c.run.steps, 250);
    ck_assert_uint_eq(c.run.seed, UINT64_MAX);
    ck_assert_int_eq(c.run.eval_interval, 50);
    ck_assert_int_eq(c.run.eval_batches, 4);
    ck_assert_str_eq(c.run.output_dir, "runs/full: test #1");
    ck_assert_str_eq(c.comm.backend, "mpi");
    ck_assert_str_eq(c.comm.allreduce, "ring");
    ck_assert_int_eq(c.tensor_parallel.size, 2);
    ck_assert_int_eq(c.tensor_parallel.sequence_parallel, 1);
    ck_assert_int_eq(c.pipeline.stages, 2);
    ck_assert_int_eq(c.pipeline.schedule, PIPELINE_GPIPE);
    ck_assert_int_eq(c.pipeline.partition_method, PIPELINE_PARTITION_UNIFORM);
    ck_assert_int_eq(c.train_micro_batch_size_per_gpu, 3);
    ck_assert_int_eq(c.gradient_accumulation_steps, 5);
    ck_assert_int_eq(c.train_batch_size, 30);
    ck_assert_double_eq(c.gradient_clipping, 0.5);
    ck_assert_int_eq(c.steps_per_print, 7);
    ck_assert_str_eq(c.device, "cpu");
    ck_assert_str_eq(c.optimizer.type, "Adam"); /* "adam": DeepSpeed ignores case */
    ck_assert_double_eq(c.optimizer.lr, 6e-4);
    ck_assert_double_eq(c.optimizer.beta1, 0.85);
    ck_assert_double_eq(c.optimizer.beta2, 0.95);
    ck_assert_double_eq(c.optimizer.eps, 1e-6);
    ck_assert_double_eq(c.optimizer.weight_decay, 0.0);
    ck_assert_int_eq(c.scheduler.type, ZT_SCHED_WARMUP_COSINE_LR);
    ck_assert_int_eq(c.scheduler.warmup_num_steps, 20);
    ck_assert_int_eq(c.scheduler.warmup_type, ZT_WARMUP_LINEAR);
    ck_assert_int_eq(c.scheduler.total_num_steps, 200);
    ck_assert_double_eq(c.scheduler.warmup_min_ratio, 0.05);
    ck_assert_double_eq(c.scheduler.cos_min_ratio, 0.1);
    ck_assert_int_eq(c.zero.stage, 0);
    ck_assert_int_eq(c.zero.reduce_bucket_size, 25000000);
    ck_assert_int_eq(c.zero.stage3_prefetch_depth, 3);
    ck_assert_int_eq(c.zero.offload_optimizer.device, ZT_OFFLOAD_CPU);
    ck_assert_int_eq(c.zero.offload_optimizer.pin_memory, 1);
    ck_assert_int_eq(c.fp16.enabled, 0);
    ck_assert_int_eq(c.bf16.enabled, 0);
    ck_assert_int_eq(c.activation_checkpointing.enabled, 0);
    /* DeepSpeed's pipe_partitioned and grad_partitioned pass quietly */
    ck_assert_msg(c.ignored && !strstr(c.ignored, "pipeline"), "%s", c.ignored);
    /* 3 * 5 * D = 30 with D = 2 data-parallel ranks of 2 x 2 */
    ck_assert_int_eq(config_check_world(&c, 8), ZT_OK);
    ck_assert_int_eq(config_check_world(&c, 2), ZT_ERR_CONFIG);
    config_free(&c);
}
END_TEST

START_TEST(test_deepspeed_json)
{
    const char *path = testutil_source_path("tests/configs/deepspeed.json");
    struct zt_config c;
    /* A DeepSpeed file has no data section: alone it lacks only data.train. */
    ck_assert_int_eq(config_load(path, NULL, 0, &c), ZT_ERR_CONFIG);
    ck_assert_ptr_nonnull(strstr(zt_error_message(), "deepspeed.json: data.train: required"));
    struct config_override ov[] = {{"data.train=tokens.bin"}};
    zt_status s = config_load(path, ov, 1, &c);
    ck_assert_msg(s == ZT_OK, "%s", zt_error_message());
    ck_assert_int_eq(c.train_batch_size, 16);
    ck_assert_int_eq(c.train_micro_batch_size_per_gpu, 4);
    ck_assert_int_eq(c.gradient_accumulation_steps, 2);
    ck_assert_str_eq(c.optimizer.type, "AdamW");
    ck_assert_double_eq(c.optimizer.lr, 3e-4);
    ck_assert_double_eq(c.optimizer.beta1, 0.9);
    ck_assert_double_eq(c.optimizer.beta2, 0.95);
    ck_assert_double_eq(c.optimizer.eps, 1e-8);
    ck_assert_double_eq(c.optimizer.weight_decay, 0.1);
    ck_assert_int_eq(c.scheduler.type, ZT_SCHED_WARMUP_DECAY_LR);
    ck_assert_double_eq(c.scheduler.warmup_min_lr, 0.0);
    ck_assert_double_eq(c.scheduler.warmup_max_lr, 3e-4);
    ck_assert_int_eq(c.scheduler.warmup_num_steps, 100);
    ck_assert_int_eq(c.scheduler.total_num_steps, 1000);
    ck_assert_int_eq(c.scheduler.warmup_type, ZT_WARMUP_LINEAR);
    ck_assert_double_eq(c.gradient_clipping, 1.0);
    ck_assert_int_eq(c.zero.stage, 0);
    ck_assert_int_eq(c.zero.reduce_bucket_size, 500000000);
    ck_assert_int_eq(c.fp16.enabled, 0);
    ck_assert_int_eq(c.steps_per_print, 10);
    ck_assert_str_eq(c.data.train[0], "tokens.bin");
    /* overlap_comm, contiguous_gradients and the rest are zerotrain's
     * behaviour or off; only the allgather bucket asks for something */
    ck_assert_ptr_nonnull(c.ignored);
    ck_assert_msg(
        strstr(c.ignored, "does not act on 1 DeepSpeed setting and trains without it:\n") &&
            strstr(c.ignored, "deepspeed.json:30:30: zero_optimization."
                              "allgather_bucket_size (2e8): updated parameters are "
                              "allgathered one unit (a transformer block) at a time\n"),
        "%s", c.ignored);

    ck_assert_int_eq(config_check_world(&c, 2), ZT_OK);
    zt_status w = config_check_world(&c, 1);
    ck_assert_int_eq(w, ZT_ERR_CONFIG);
    ck_assert_int_eq(zt_status_exit_code(w), 2);
    ck_assert_ptr_nonnull(strstr(zt_error_message(),
                                 "train_batch_size: 16 must equal train_micro_batch_size_per_gpu "
                                 "(4) * gradient_accumulation_steps (2) * world size (1) = 8"));
    config_free(&c);
}
END_TEST

/* The number of lines of a config's start-up warning that name `key`. */
static int noted(const struct zt_config *c, const char *key)
{
    char needle[160];
    snprintf(needle, sizeof needle, ": %s ", key);
    int n = c->ignored ? testutil_count(c->ignored, needle) : 0;
    snprintf(needle, sizeof needle, ": %s:", key);
    return n + (c->ignored ? testutil_count(c->ignored, needle) : 0);
}

/* A realistic DeepSpeed ZeRO-3 file (monitors, offload, the stage-3 knobs)
 * loads as it is: what zerotrain has is honoured, what means "off" or is
 * zerotrain's behaviour anyway passes silently, and everything else is
 * listed, each key once, in the one warning. */
START_TEST(test_deepspeed_zero3_json)
{
    static const char *const listed[] = {
        "zero_optimization.sub_group_size",
        "zero_optimization.stage3_prefetch_bucket_size",
        "zero_optimization.stage3_param_persistence_threshold",
        "zero_optimization.stage3_max_live_parameters",
        "zero_optimization.stage3_max_reuse_distance",
        "zero_optimization.stage3_gather_16bit_weights_on_model_save",
        "flops_profiler",
        "tensorboard",
    };
    static const char *const silent[] = {
        "prescale_gradients",
        "gradient_predivide_factor",
        "wall_clock_breakdown",
        "memory_breakdown",
        "dump_state",
        "sparse_gradients",
        "zero_allow_untested_optimizer",
        "zero_force_ds_cpu_optimizer",
        "zero_optimization.offload_param",
        "zero_optimization.offload_optimizer", /* the schema's now */
        "zero_optimization.contiguous_gradients",
        "zero_optimization.reduce_scatter",
        "zero_optimization.allgather_partitions",
        "zero_optimization.round_robin_gradients",
        "zero_optimization.zero_quantized_weights",
        "zero_optimization.zero_quantized_gradients",
        "zero_optimization.zero_hpz_partition_size",
        "zero_optimization.ignore_unused_parameters",
        "activation_checkpointing.",
        "wandb",
        "csv_monitor",
        "comms_logger",
        "aio",
        "checkpoint.",
        "elasticity",
    };
    const char *path = testutil_source_path("tests/data/deepspeed_zero3.json");
    struct config_override ov[] = {{"data.train=tokens.bin"}};
    struct zt_config c;
    zt_status s = config_load(path, ov, 1, &c);
    ck_assert_msg(s == ZT_OK, "%s", zt_error_message());
    ck_assert_int_eq(c.zero.stage, 3);
    ck_assert_str_eq(c.data_types.grad_accum_dtype, "fp32"); /* honoured: fp32 gradients */
    ck_assert_int_eq(config_grad_accum_fp32(&c), 1);
    ck_assert_int_eq(c.zero.reduce_bucket_size, 500000000);
    ck_assert_int_eq(c.bf16.enabled, 1);
    ck_assert_int_eq(c.train_micro_batch_size_per_gpu, 4);
    ck_assert_double_eq(c.optimizer.lr, 2e-4);
    ck_assert_int_eq(c.scheduler.type, ZT_SCHED_WARMUP_DECAY_LR);
    ck_assert_ptr_nonnull(c.ignored);
    char heading[4300];
    snprintf(heading, sizeof heading,
             "%s: zerotrain does not act on 8 DeepSpeed settings and trains without them:\n", path);
    ck_assert_msg(strncmp(c.ignored, heading, strlen(heading)) == 0, "%s", c.ignored);
    ck_assert_int_eq(testutil_count(c.ignored, "\n"), 9);
    ck_assert_int_eq(c.zero.offload_optimizer.device, ZT_OFFLOAD_CPU);
    ck_assert_int_eq(c.zero.offload_optimizer.pin_memory, 1);
    for (size_t i = 0; i < sizeof listed / sizeof listed[0]; i++)
        ck_assert_msg(noted(&c, listed[i]) == 1, "%s not listed once:\n%s", listed[i], c.ignored);
    for (size_t i = 0; i < sizeof silent / sizeof silent[0]; i++)
        ck_assert_msg(!strstr(c.ignored, silent[i]), "%s listed:\n%s", silent[i], c.ignored);
    /* each line: position, key, the value that asks, what zerotrain does */
    ck_assert_msg(strstr(c.ignored, "deepspeed_zero3.json:87:18: tensorboard (enabled: true): "
                                    "metrics go to metrics.jsonl (--metrics FILE)\n"),
                  "%s", c.ignored);
    config_free(&c);
}
END_TEST

/* DeepSpeed's csv_monitor section: its defaults, its keys in YAML and in a
 * DeepSpeed JSON file, "" (DeepSpeed's default output_path) a value. */
START_TEST(test_csv_monitor_keys)
{
    struct zt_config c;
    zt_status s = load_text("data: {train: x}\n", NULL, 0, &c);
    ck_assert_msg(s == ZT_OK, "%s", zt_error_message());
    ck_assert_int_eq(c.csv_monitor.enabled, 0);
    ck_assert_str_eq(c.csv_monitor.output_path, "");
    ck_assert_str_eq(c.csv_monitor.job_name, "DeepSpeedJobName");
    config_free(&c);

    s = load_text("data: {train: x}\ncsv_monitor:\n  enabled: true\n  output_path: logs/csv\n",
                  (const char *const[]){"csv_monitor.job_name=run 7"}, 1, &c);
    ck_assert_msg(s == ZT_OK, "%s", zt_error_message());
    ck_assert_int_eq(c.csv_monitor.enabled, 1);
    ck_assert_str_eq(c.csv_monitor.output_path, "logs/csv");
    ck_assert_str_eq(c.csv_monitor.job_name, "run 7");
    ck_assert_ptr_null(c.ignored); /* acted on, so not in the warning */
    config_free(&c);

    s = load_text("{\"data\": {\"train\": \"x\"}, \"csv_monitor\": {\"enabled\": true, "
                  "\"output_path\": \"\", \"job_name\": \"\"}}\n",
                  NULL, 0, &c);
    ck_assert_msg(s == ZT_OK, "%s", zt_error_message());
    ck_assert_int_eq(c.csv_monitor.enabled, 1);
    ck_assert_str_eq(c.csv_monitor.output_path, "");
    ck_assert_str_eq(c.csv_monitor.job_name, "");
    config_free(&c);

    struct config_override ov[] = {{"data.train=tokens.bin"}};
    s = config_load(testutil_source_path("tests/data/deepspeed_zero3.json"), ov, 1, &c);
    ck_assert_msg(s == ZT_OK, "%s", zt_error_message());
    ck_assert_int_eq(c.csv_monitor.enabled, 0);
    ck_assert_str_eq(c.csv_monitor.output_path, "logs/csv");
    ck_assert_str_eq(c.csv_monitor.job_name, "gpt2_zero3");
    config_free(&c);
}
END_TEST

/* ZeRO-Offload's two keys in both spellings (YAML, and a DeepSpeed JSON
 * file), the defaults, an override, and the resolved YAML; and the
 * start-up note, which only the CPU gets. */
START_TEST(test_offload_optimizer_keys)
{
    struct zt_config c;
    zt_status s = load_text("data: {train: x}\n", NULL, 0, &c);
    ck_assert_msg(s == ZT_OK, "%s", zt_error_message());
    ck_assert_int_eq(c.zero.offload_optimizer.device, ZT_OFFLOAD_NONE);
    ck_assert_int_eq(c.zero.offload_optimizer.pin_memory, 0);
    ck_assert_ptr_null(config_offload_note(&c, 1));
    config_free(&c);

    s = load_text("data: {train: x}\nzero_optimization:\n  stage: 2\n  offload_optimizer:\n"
                  "    device: cpu\n    pin_memory: true\n",
                  NULL, 0, &c);
    ck_assert_msg(s == ZT_OK, "%s", zt_error_message());
    ck_assert_int_eq(c.zero.offload_optimizer.device, ZT_OFFLOAD_CPU);
    ck_assert_int_eq(c.zero.offload_optimizer.pin_memory, 1);
    ck_assert_ptr_null(c.ignored); /* acted on, so not in the warning */
    ck_assert_str_eq(config_offload_note(&c, 1),
                     "zero_optimization.offload_optimizer (device: cpu) changes nothing on device "
                     "cpu: the optimizer states already live in host memory");
    ck_assert_ptr_null(config_offload_note(&c, 0)); /* a GPU: the engine's to act on */
    char *yaml = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&yaml, &len);
    ck_assert_ptr_nonnull(f);
    ck_assert_int_eq(config_write_yaml(&c, f), ZT_OK);
    fclose(f);
    ck_assert_msg(strstr(yaml, "\n  offload_optimizer:  # ") &&
                      strstr(yaml, "\n    device: cpu  # ") &&
                      strstr(yaml, "\n    pin_memory: true  # "),
                  "%s", yaml);
    free(yaml);
    config_free(&c);

    s = load_text("{\"data\": {\"train\": \"x\"}, \"zero_optimization\": {\"stage\": 3, "
                  "\"offload_optimizer\": {\"device\": \"cpu\", \"pin_memory\": false}}}\n",
                  NULL, 0, &c);
    ck_assert_msg(s == ZT_OK, "%s", zt_error_message());
    ck_assert_int_eq(c.zero.offload_optimizer.device, ZT_OFFLOAD_CPU);
    ck_assert_int_eq(c.zero.offload_optimizer.pin_memory, 0);
    config_free(&c);

    s = load_text("data: {train: x}\nzero_optimization: {offload_optimizer: {device: cpu}}\n",
                  (const char *const[]){"zero_optimization.offload_optimizer.device=none"}, 1, &c);
    ck_assert_msg(s == ZT_OK, "%s", zt_error_message());
    ck_assert_int_eq(c.zero.offload_optimizer.device, ZT_OFFLOAD_NONE);
    ck_assert_ptr_null(config_offload_note(&c, 1));
    config_free(&c);

    /* ZeRO-Infinity's keys, DeepSpeed's names: the window's defaults, and
     * buffer_count said to do nothing without nvme */
    s = load_text("data: {train: x}\nzero_optimization: {offload_optimizer: {device: nvme, "
                  "nvme_path: /local_nvme}}\n",
                  NULL, 0, &c);
    ck_assert_msg(s == ZT_OK, "%s", zt_error_message());
    ck_assert_int_eq(c.zero.offload_optimizer.device, ZT_OFFLOAD_NVME);
    ck_assert_str_eq(c.zero.offload_optimizer.nvme_path, "/local_nvme");
    ck_assert_int_eq(c.zero.offload_optimizer.buffer_count, 4);
    ck_assert_int_eq(c.zero.offload_optimizer.buffer_size, 100000000);
    ck_assert_ptr_null(c.ignored);
    ck_assert_ptr_null(config_offload_note(&c, 1)); /* on the CPU too, the states move */
    config_free(&c);
    s = load_text("data: {train: x}\nzero_optimization: {offload_optimizer: {device: cpu, "
                  "buffer_count: 8}}\n",
                  NULL, 0, &c);
    ck_assert_msg(s == ZT_OK, "%s", zt_error_message());
    ck_assert_msg(c.no_effect && strstr(c.no_effect, "offload_optimizer.buffer_count ('8'): no "
                                                     "effect: zero_optimization.offload_optimizer."
                                                     "device is not nvme"),
                  "%s", c.no_effect ? c.no_effect : "(none)");
    config_free(&c);
}
END_TEST

/* Which values of DeepSpeed's keys pass silently and which are listed. */
START_TEST(test_deepspeed_values_off_or_asking)
{
    static const struct {
        const char *yaml, *set, *key; /* key: listed; NULL: silent */
    } cases[] = {
        {"zero_optimization: {offload_optimizer: {device: none, pin_memory: true}}", NULL, NULL},
        {"zero_optimization: {offload_optimizer: {pin_memory: true}}", NULL, NULL},
        {"zero_optimization: {offload_param: null}", NULL, NULL},
        {"zero_optimization: {offload_optimizer: {device: cpu, nvme_path: /x, buffer_count: 4, "
         "pipeline_read: true, fast_init: true, ratio: 1.0}}",
         NULL, NULL},
        {"zero_optimization: {offload_optimizer: {device: cpu, ratio: 0.3}}", NULL,
         "zero_optimization.offload_optimizer.ratio (0.3)"},
        {"zero_optimization: {offload_param: {device: cpu, pin_memory: true}}", NULL,
         "zero_optimization.offload_param (device: cpu)"},
        {"zero_optimization: {offload_optimizer: {device: nvme, nvme_path: /x, pipeline_read: "
         "true}}\naio: {block_size: 1048576}",
         NULL, "aio: one I/O thread per rank"},
        {"zero_optimization: {offload_optimizer: {device: nvme, nvme_path: /x, pipeline_write: "
         "false}}",
         NULL, "zero_optimization.offload_optimizer.pipeline_write (false)"},
        {"zero_optimization: {overlap_comm: true, contiguous_gradients: true}", NULL, NULL},
        {"zero_optimization: {mics_shard_size: -1}", NULL, NULL},
        {"tensorboard: {output_path: x, job_name: y}", NULL, NULL},
        {"wandb: {enabled: true, project: p}", NULL, "wandb (enabled: true)"},
        {"comms_logger: {enabled: true}", NULL, "comms_logger (enabled: true)"},
        {"csv_monitor: {enabled: false}", NULL, NULL},
        {"gradient_predivide_factor: 1.0", NULL, NULL},
        {"gradient_predivide_factor: 2", NULL, "gradient_predivide_factor (2)"},
        {"prescale_gradients: true", NULL, "prescale_gradients (true)"},
        {"activation_checkpointing: {partition_activations: true}", NULL,
         "activation_checkpointing.partition_activations (true)"},
        {"activation_checkpointing: {cpu_checkpointing: false, number_checkpoints: 4}", NULL, NULL},
        {"wall_clock_breakdown: true", NULL, "wall_clock_breakdown (true)"},
        {"checkpoint: {tag_validation: Fail, load_universal: true}", NULL,
         "checkpoint.load_universal (true)"},
        {"fp16: {enabled: false, fp16_master_weights_and_grads: false}", NULL, NULL},
        {"pipeline: {pipe_partitioned: true, grad_partitioned: false, seed_layers: false, "
         "activation_checkpoint_interval: 0, use_reentrant: true}",
         NULL, NULL},
        {"pipeline: {stages: 2, activation_checkpoint_interval: 1}", NULL,
         "pipeline.activation_checkpoint_interval (1)"},
        {"pipeline: {partition: uniform}", NULL, "pipeline.partition (uniform)"},
        {"pipeline: {seed_layers: true}", NULL, "pipeline.seed_layers (true)"},
        {"tensor_parallel: {autotp_size: 0, tp_overlap_comm: true}", NULL, NULL},
        {"tensor_parallel: {autotp_size: 1}", NULL, NULL},
        {"tensor_parallel: {autotp_size: 4}", NULL,
         "tensor_parallel.autotp_size (4): tensor_parallel.size is the tensor-parallel size"},
        {"tensor_parallel: {size: 2, tp: {tp_size: 2}}", NULL, "tensor_parallel.tp"},
        {"sequence_parallel_size: 2", NULL, "sequence_parallel_size (2): no Ulysses sequence"},
        {"", "zero_optimization.sub_group_size=1e9",
         "--set zero_optimization.sub_group_size=1e9: zero_optimization.sub_group_size (1e9)"},
    };
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        char text[256];
        struct zt_config c;
        snprintf(text, sizeof text, "data: {train: x}\n%s\n", cases[k].yaml);
        const char *sets[] = {cases[k].set};
        zt_status s = load_text(text, sets, cases[k].set ? 1 : 0, &c);
        ck_assert_msg(s == ZT_OK, "case %zu: %s", k, zt_error_message());
        if (!cases[k].key)
            ck_assert_msg(!c.ignored, "case %zu: listed:\n%s", k, c.ignored);
        else
            ck_assert_msg(c.ignored && strstr(c.ignored, cases[k].key) &&
                              strstr(c.ignored, "1 DeepSpeed setting and trains without it:\n"),
                          "case %zu: %s not listed:\n%s", k, cases[k].key,
                          c.ignored ? c.ignored : "(nothing)");
        config_free(&c);
    }
}
END_TEST

/* data.val_fraction: 0 without data.val is a run without validation data;
 * evaluations then need data.val (checked in the bad cases). */
START_TEST(test_no_validation_set)
{
    struct zt_config c;
    ck_assert_int_eq(load_text("data: {train: x, val_fraction: 0}\n", NULL, 0, &c), ZT_OK);
    ck_assert(!config_has_validation(&c));
    config_free(&c);
    ck_assert_int_eq(load_text("data: {train: x, val: v, val_fraction: 0}\nrun: {eval_interval: "
                               "5}\n",
                               NULL, 0, &c),
                     ZT_OK);
    ck_assert(config_has_validation(&c));
    config_free(&c);
    ck_assert_int_eq(load_text("data: {train: x}\n", NULL, 0, &c), ZT_OK);
    ck_assert(config_has_validation(&c));
    config_free(&c);
}
END_TEST

START_TEST(test_check_world_without_batch_size)
{
    struct zt_config c;
    ck_assert_int_eq(
        load_text("data: {train: x}\ntrain_micro_batch_size_per_gpu: 3\n", NULL, 0, &c), ZT_OK);
    for (int world = 1; world <= 7; world++)
        ck_assert_int_eq(config_check_world(&c, world), ZT_OK);
    config_free(&c);
}
END_TEST

/* The grid's keys: every value, any case for the names (DeepSpeed lower-
 * cases partition_method), and the names written back. */
START_TEST(test_parallel_keys)
{
    struct zt_config c;
    zt_status s =
        load_text("data: {train: x}\ntensor_parallel: {size: 4, sequence_parallel: true}\n"
                  "pipeline: {stages: 4, schedule: GPipe, partition_method: Uniform}\n",
                  NULL, 0, &c);
    ck_assert_msg(s == ZT_OK, "%s", zt_error_message());
    ck_assert_int_eq(c.tensor_parallel.size, 4);
    ck_assert_int_eq(c.tensor_parallel.sequence_parallel, 1);
    ck_assert_int_eq(c.pipeline.stages, 4);
    ck_assert_int_eq(c.pipeline.schedule, PIPELINE_GPIPE);
    ck_assert_int_eq(c.pipeline.partition_method, PIPELINE_PARTITION_UNIFORM);
    ck_assert_str_eq(config_pipeline_schedule_name(c.pipeline.schedule), "gpipe");
    ck_assert_str_eq(config_pipeline_partition_name(c.pipeline.partition_method), "uniform");
    ck_assert_str_eq(config_pipeline_schedule_name(PIPELINE_1F1B), "1f1b");
    ck_assert_str_eq(config_pipeline_partition_name(PIPELINE_PARTITION_PARAMETERS), "parameters");
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    ck_assert_ptr_nonnull(f);
    ck_assert_int_eq(config_write_yaml(&c, f), ZT_OK);
    ck_assert_int_eq(fclose(f), 0);
    static const char *const written[] = {"\ntensor_parallel:  # ",
                                          "\n  size: 4  # ",
                                          "\n  sequence_parallel: true  # ",
                                          "\npipeline:  # ",
                                          "\n  stages: 4  # ",
                                          "\n  schedule: gpipe  # ",
                                          "\n  partition_method: uniform  # "};
    for (size_t i = 0; i < sizeof written / sizeof written[0]; i++)
        ck_assert_msg(strstr(text, written[i]), "no \"%s\" in\n%s", written[i] + 1, text);
    free(text);
    config_free(&c);
    /* sequence_parallel at size 1 changes nothing and is accepted, whatever
     * the sequence length */
    s = load_text("data: {train: x, seq_len: 37}\ntensor_parallel: {sequence_parallel: true}\n",
                  NULL, 0, &c);
    ck_assert_msg(s == ZT_OK, "%s", zt_error_message());
    ck_assert_int_eq(c.tensor_parallel.size, 1);
    ck_assert_int_eq(c.tensor_parallel.sequence_parallel, 1);
    config_free(&c);
    /* as many stages as blocks; llama splits on n_kv_head and its MLP too */
    s = load_text("data: {train: x}\nmodel: {family: llama, n_head: 8, n_kv_head: 2, n_embd: 128, "
                  "intermediate_size: 344, n_layer: 3}\ntensor_parallel: {size: 2}\n"
                  "pipeline: {stages: 3}\n",
                  NULL, 0, &c);
    ck_assert_msg(s == ZT_OK, "%s", zt_error_message());
    ck_assert_int_eq(c.pipeline.stages, 3);
    config_free(&c);
}
END_TEST

/* Settings the others make moot are accepted and listed, with their
 * position, for the start-up warning: sequence parallelism at tensor size
 * 1 (Megatron warns of it too), and each rule of the table once; a value
 * that acts, or a default, is not listed, and neither is anything of a
 * resolved config written back. */
START_TEST(test_settings_with_no_effect)
{
    struct zt_config c;
    zt_status s =
        load_text("data: {train: x}\ntensor_parallel: {sequence_parallel: true}\n", NULL, 0, &c);
    ck_assert_msg(s == ZT_OK, "%s", zt_error_message());
    ck_assert_ptr_nonnull(c.no_effect);
    ck_assert_msg(strstr(c.no_effect, "bad.yaml: 1 setting given with no effect in this run:\n") &&
                      strstr(c.no_effect, "bad.yaml:2:38: tensor_parallel.sequence_parallel "
                                          "('true'): no effect: tensor_parallel.size is 1"),
                  "%s", c.no_effect);
    ck_assert_ptr_null(c.ignored);
    config_free(&c);
    const char *const set[] = {"tensor_parallel.sequence_parallel=true"};
    s = load_text("data: {train: x}\n", set, 1, &c);
    ck_assert_msg(s == ZT_OK, "%s", zt_error_message());
    ck_assert_msg(c.no_effect && strstr(c.no_effect, "  --set tensor_parallel.sequence_parallel="
                                                     "true: tensor_parallel.sequence_parallel"),
                  "%s", c.no_effect ? c.no_effect : "(none)");
    config_free(&c);
    static const struct {
        const char *text, *key; /* key NULL: nothing listed */
    } cases[] = {
        {"tensor_parallel: {size: 2, sequence_parallel: true}", NULL},
        {"tensor_parallel: {sequence_parallel: false}", NULL},
        {"activation_checkpointing: {every_n_blocks: 2}",
         "activation_checkpointing.every_n_blocks"},
        {"activation_checkpointing: {enabled: true, every_n_blocks: 2}", NULL},
        {"zero_optimization: {offload_optimizer: {pin_memory: true}}",
         "zero_optimization.offload_optimizer.pin_memory"},
        {"zero_optimization: {offload_optimizer: {device: cpu, pin_memory: true}}", NULL},
        {"zero_optimization: {stage: 2, stage3_prefetch_depth: 4}",
         "zero_optimization.stage3_prefetch_depth"},
        {"zero_optimization: {stage: 3, stage3_prefetch_depth: 4}", NULL},
        {"pipeline: {schedule: gpipe}", "pipeline.schedule"},
        {"pipeline: {partition_method: uniform}", "pipeline.partition_method"},
        {"model: {n_layer: 2}\npipeline: {stages: 2, schedule: gpipe}", NULL},
        {"gradient_accumulation_steps: 2\npipeline: {stages: 2, virtual_stages: 2, "
         "partition_method: uniform}",
         "pipeline.partition_method"},
        {"pipeline: {stages: 2, partition_method: uniform}", NULL},
        {"run: {nonfinite_skip_limit: 3}", "run.nonfinite_skip_limit"},
        {"run: {on_nonfinite: skip, nonfinite_skip_limit: 3}", NULL},
        {"data: {packing: true}", "data.packing"},
        {"data: {format: jsonl, packing: true}", NULL},
        {"data: {chat_template: llama3}", "data.chat_template"},
        {"data: {format: jsonl, chat_template: llama3}", NULL},
        /* a default, as a resolved config writes every key */
        {"activation_checkpointing: {every_n_blocks: 1}", NULL},
        {"zero_optimization: {stage: 0, stage3_prefetch_depth: 1}", NULL},
        {"pipeline: {schedule: 1F1B, partition_method: parameters}", NULL},
        {"run: {nonfinite_skip_limit: 10}", NULL},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char text[512];
        /* data.train after the case: a case's own data section is merged */
        snprintf(text, sizeof text, "%s\n", cases[i].text);
        const char *const train[] = {"data.train=x"};
        s = load_text(text, train, 1, &c);
        ck_assert_msg(s == ZT_OK, "%s: %s", cases[i].text, zt_error_message());
        if (!cases[i].key)
            ck_assert_msg(!c.no_effect, "%s: listed\n%s", cases[i].text, c.no_effect);
        else
            ck_assert_msg(c.no_effect && strstr(c.no_effect, "1 setting given") &&
                              strstr(c.no_effect, cases[i].key),
                          "%s: not listed: %s", cases[i].text, c.no_effect ? c.no_effect : "");
        config_free(&c);
    }
    s = load_text("data: {train: x}\ntensor_parallel: {sequence_parallel: true}\n"
                  "pipeline: {schedule: gpipe}\n",
                  NULL, 0, &c);
    ck_assert_msg(s == ZT_OK, "%s", zt_error_message());
    ck_assert_msg(c.no_effect && strstr(c.no_effect, "2 settings given"), "%s", c.no_effect);
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    ck_assert_ptr_nonnull(f);
    ck_assert_int_eq(config_write_yaml(&c, f), ZT_OK);
    ck_assert_int_eq(fclose(f), 0);
    config_free(&c);
    ck_assert_int_eq(load_text(text, NULL, 0, &c), ZT_OK);
    ck_assert_msg(c.no_effect && strstr(c.no_effect, "2 settings given"), "%s", c.no_effect);
    config_free(&c);
    free(text);
    ck_assert_int_eq(config_load(testutil_source_path("configs/tiny.yaml"), NULL, 0, &c), ZT_OK);
    ck_assert_msg(!c.no_effect, "%s", c.no_effect);
    config_free(&c);
}
END_TEST

/* The world is T x P x D: it must be a multiple of the replica's T x P
 * ranks, and train_batch_size counts the D data-parallel ranks only. */
START_TEST(test_check_world_with_tensor_and_pipeline)
{
    struct zt_config c;
    zt_status s = load_text("data: {train: x}\ntrain_micro_batch_size_per_gpu: 3\n"
                            "gradient_accumulation_steps: 5\ntrain_batch_size: 30\n"
                            "tensor_parallel: {size: 2}\npipeline: {stages: 2}\n",
                            NULL, 0, &c);
    ck_assert_msg(s == ZT_OK, "%s", zt_error_message());
    ck_assert_int_eq(config_check_world(&c, 8), ZT_OK); /* D = 2: 3 * 5 * 2 = 30 */
    s = config_check_world(&c, 4);
    ck_assert_int_eq(s, ZT_ERR_CONFIG);
    ck_assert_msg(strstr(zt_error_message(),
                         "/bad.yaml: train_batch_size: 30 must equal "
                         "train_micro_batch_size_per_gpu (3) * gradient_accumulation_steps (5) * "
                         "data-parallel size 1 (world 4 / (tensor 2 x pipeline 2)) = 15; remove "
                         "it or make the product match"),
                  "%s", zt_error_message());
    s = config_check_world(&c, 6);
    ck_assert_int_eq(s, ZT_ERR_CONFIG);
    ck_assert_msg(strstr(zt_error_message(),
                         "/bad.yaml: the world size 6 is not a multiple of tensor_parallel.size "
                         "(2) x pipeline.stages (2) = 4 ranks per model replica"),
                  "%s", zt_error_message());
    s = config_check_world(&c, 2); /* fewer ranks than one replica */
    ck_assert_int_eq(s, ZT_ERR_CONFIG);
    ck_assert_ptr_nonnull(strstr(zt_error_message(), "the world size 2 is not a multiple"));
    ck_assert_int_eq(config_check_world(&c, 0), ZT_ERR_USAGE);
    config_free(&c);

    /* without train_batch_size only the grid is checked */
    s = load_text("data: {train: x}\ntensor_parallel: {size: 2}\npipeline: {stages: 3}\n", NULL, 0,
                  &c);
    ck_assert_msg(s == ZT_OK, "%s", zt_error_message());
    for (int world = 1; world <= 24; world++)
        ck_assert_int_eq(config_check_world(&c, world), world % 6 == 0 ? ZT_OK : ZT_ERR_CONFIG);
    config_free(&c);

    /* tensor parallelism alone: D = world / T */
    s = load_text("data: {train: x}\ntrain_batch_size: 6\ntensor_parallel: {size: 4}\n", NULL, 0,
                  &c);
    ck_assert_msg(s == ZT_OK, "%s", zt_error_message());
    ck_assert_int_eq(config_check_world(&c, 24), ZT_OK);
    ck_assert_int_eq(config_check_world(&c, 6), ZT_ERR_CONFIG);
    ck_assert_msg(strstr(zt_error_message(), "tensor_parallel.size (4) x pipeline.stages (1) = 4"),
                  "%s", zt_error_message());
    config_free(&c);
}
END_TEST

START_TEST(test_overrides)
{
    static const char *const sets[] = {
        "optimizer.params.lr=3e-4",             /* scalar */
        "optimizer.params.betas=[0.8, 0.9]",    /* flow list */
        "scheduler.type=WarmupLR",              /* new section */
        "scheduler.params.warmup_num_steps=10", /* nested creation */
        "data.val=[v1.bin, v2.bin]",            /* string or list */
        "run.steps=5",
        "run.steps=6",                              /* the later one wins */
        "model={n_layer: 1, n_head: 1, n_embd: 8}", /* a whole section */
    };
    struct zt_config c;
    zt_status s = load_text("data: {train: x}\nrun: {steps: 50}\n", sets, 8, &c);
    ck_assert_msg(s == ZT_OK, "%s", zt_error_message());
    ck_assert_double_eq(c.optimizer.lr, 3e-4);
    ck_assert_double_eq(c.optimizer.beta1, 0.8);
    ck_assert_double_eq(c.optimizer.beta2, 0.9);
    ck_assert_int_eq(c.scheduler.type, ZT_SCHED_WARMUP_LR);
    ck_assert_int_eq(c.scheduler.warmup_num_steps, 10);
    ck_assert_double_eq(c.scheduler.warmup_max_lr, 3e-4);
    ck_assert_int_eq(c.data.n_val, 2);
    ck_assert_str_eq(c.data.val[1], "v2.bin");
    ck_assert_int_eq(c.run.steps, 6);
    ck_assert_int_eq(c.model.n_layer, 1);
    ck_assert_int_eq(c.model.n_embd, 8);
    ck_assert_int_eq(c.model.vocab_size, 256);
    config_free(&c);
}
END_TEST

START_TEST(test_null_means_default)
{
    struct zt_config c;
    zt_status s =
        load_text("data: {train: x, seq_len: ~}\nmodel:\nrun: {steps: null}\n", NULL, 0, &c);
    ck_assert_msg(s == ZT_OK, "%s", zt_error_message());
    ck_assert_int_eq(c.run.steps, 100);
    ck_assert_int_eq(c.data.seq_len, 128);
    config_free(&c);
}
END_TEST

START_TEST(test_round_trip)
{
    static const char *const texts[] = {
        "data: {train: x}\n",
        "data: {train: [a, b], val: c}\nscheduler: {type: WarmupDecayLR, params: {warmup_min_lr: "
        "1e-5, warmup_max_lr: 0.1, warmup_num_steps: 7, total_num_steps: 99}}\n"
        "optimizer: {params: {lr: 0.1, eps: 3.3e-9}}\ngradient_clipping: 0.3\n",
        "data: {train: \"we\\\"ird\\\\ \\t path\"}\nscheduler: {type: WarmupLR}\n"
        "run: {output_dir: \"o: #x\", seed: 0}\n",
        "data: {train: x}\noptimizer: {type: adafactor, params: {beta1: 0.9, eps: [1e-29, 2e-3], "
        "decay_rate: -0.7, scale_parameter: false}}\n",
        "data: {train: x}\noptimizer: {type: Adafactor, params: {relative_step: true, "
        "warmup_init: true}}\n",
        "data: {train: x}\noptimizer: {type: SGD, params: {momentum: 0.9, nesterov: true}}\n",
        "data: {train: x}\ntensor_parallel: {size: 4, sequence_parallel: true}\n"
        "pipeline: {stages: 3, schedule: gpipe, partition_method: uniform}\n",
        "data: {train: x}\ncsv_monitor: {enabled: true, output_path: logs, job_name: \"\"}\n",
    };
    const char *dir = testutil_tmpdir("config");
    for (size_t i = 0; i < sizeof texts / sizeof texts[0]; i++) {
        struct zt_config c;
        zt_status s = load_text(texts[i], NULL, 0, &c);
        ck_assert_msg(s == ZT_OK, "%zu: %s", i, zt_error_message());
        free(round_trip(&c, dir));
        config_free(&c);
    }
    struct zt_config full;
    ck_assert_int_eq(config_load(testutil_source_path("tests/configs/full.yaml"), NULL, 0, &full),
                     ZT_OK);
    char *first = round_trip(&full, dir);
    /* The written file reproduces itself (past the header naming its source). */
    char path[4096];
    snprintf(path, sizeof path, "%s/written.yaml", dir);
    struct zt_config back;
    ck_assert_int_eq(config_load(path, NULL, 0, &back), ZT_OK);
    char *second = round_trip(&back, dir);
    ck_assert_str_eq(strchr(first, '\n'), strchr(second, '\n'));
    free(first);
    free(second);
    config_free(&back);
    config_free(&full);
}
END_TEST

/* The configs shipped in configs/ and tests/data/ load and round-trip. */
START_TEST(test_repository_configs)
{
    static const char *const files[] = {"configs/tiny.yaml",       "configs/small.yaml",
                                        "configs/demo.yaml",       "tests/data/micro.yaml",
                                        "configs/llama-tiny.yaml", "configs/llama-small.yaml"};
    const char *dir = testutil_tmpdir("config");
    for (size_t i = 0; i < sizeof files / sizeof files[0]; i++) {
        struct zt_config c;
        zt_status s = config_load(testutil_source_path(files[i]), NULL, 0, &c);
        ck_assert_msg(s == ZT_OK, "%s: %s", files[i], zt_error_message());
        free(round_trip(&c, dir));
        config_free(&c);
    }
}
END_TEST

/* ---- the model families ------------------------------------------------------------ */

/* Llama's keys take their defaults (n_kv_head from n_head, the MLP width
 * by Llama's rule) and are refused for GPT-2. */
START_TEST(test_llama_defaults)
{
    struct zt_config c;
    zt_status s = load_text("data: {train: x}\nmodel: {family: llama, n_embd: 4096, n_head: 32}\n",
                            NULL, 0, &c);
    ck_assert_msg(s == ZT_OK, "%s", zt_error_message());
    ck_assert_str_eq(c.model.family, "llama");
    ck_assert_int_eq(c.model.n_kv_head, 32);
    ck_assert_int_eq(c.model.intermediate_size, 11008);
    ck_assert_double_eq(c.model.rope_theta, 10000.0);
    ck_assert_double_eq(c.model.rms_norm_eps, 1e-5);
    ck_assert_int_eq(c.model.tie_word_embeddings, 0);
    struct zt_kvlist shape;
    config_model_shape(&c, &shape);
    ck_assert_str_eq(shape.kind, "llama");
    ck_assert_int_eq((int)zt_kv_find(&shape, "intermediate_size")->i, 11008);
    config_free(&c);
    ck_assert_int_eq(load_text("data: {train: x}\n", NULL, 0, &c), ZT_OK);
    ck_assert_str_eq(c.model.family, "gpt2");
    config_model_shape(&c, &shape);
    ck_assert_str_eq(shape.kind, "gpt2");
    config_free(&c);
}
END_TEST

/* A Hugging Face config.json gives the family and the keys the config does
 * not set; keys set in `model` win. */
START_TEST(test_hf_config)
{
    const char *dir = testutil_tmpdir("config");
    const char *json =
        "{\"architectures\": [\"LlamaForCausalLM\"], \"model_type\": \"llama\", "
        "\"hidden_size\": 64, \"intermediate_size\": 176, \"num_attention_heads\": 8, "
        "\"num_key_value_heads\": 2, \"num_hidden_layers\": 3, \"max_position_embeddings\": "
        "512, \"rms_norm_eps\": 1e-06, \"rope_theta\": 500000.0, \"vocab_size\": 300, "
        "\"tie_word_embeddings\": true, \"hidden_act\": \"silu\", \"rope_scaling\": null, "
        "\"attention_bias\": false, \"torch_dtype\": \"bfloat16\"}";
    const char *path = write_file(dir, "config.json", json, strlen(json));
    char text[4096];
    snprintf(text, sizeof text,
             "data: {train: x, seq_len: 64}\nmodel: {hf_config: \"%s\", block_size: 128}\n", path);
    struct zt_config c;
    zt_status s = load_text(text, NULL, 0, &c);
    ck_assert_msg(s == ZT_OK, "%s", zt_error_message());
    ck_assert_str_eq(c.model.family, "llama");
    ck_assert_int_eq(c.model.n_embd, 64);
    ck_assert_int_eq(c.model.intermediate_size, 176);
    ck_assert_int_eq(c.model.n_head, 8);
    ck_assert_int_eq(c.model.n_kv_head, 2);
    ck_assert_int_eq(c.model.n_layer, 3);
    ck_assert_int_eq(c.model.block_size, 128); /* set in model: wins */
    ck_assert_int_eq(c.model.vocab_size, 300);
    ck_assert_double_eq(c.model.rms_norm_eps, 1e-6);
    ck_assert_double_eq(c.model.rope_theta, 500000.0);
    ck_assert_int_eq(c.model.tie_word_embeddings, 1);
    free(round_trip(&c, dir));
    config_free(&c);

    const char *gpt2 = "{\"architectures\": [\"GPT2LMHeadModel\"], \"n_embd\": 48, \"n_head\": "
                       "4, \"n_layer\": 2, \"n_positions\": 64, \"vocab_size\": 256, "
                       "\"activation_function\": \"gelu_new\"}";
    path = write_file(dir, "gpt2.json", gpt2, strlen(gpt2));
    snprintf(text, sizeof text, "data: {train: x}\nmodel: {hf_config: \"%s\"}\n", path);
    s = load_text(text, NULL, 0, &c);
    ck_assert_msg(s == ZT_OK, "%s", zt_error_message());
    ck_assert_str_eq(c.model.family, "gpt2");
    ck_assert_int_eq(c.model.n_embd, 48);
    ck_assert_int_eq(c.model.block_size, 64);
    ck_assert_int_eq(c.data.seq_len, 64);
    config_free(&c);
}
END_TEST

/* Loads a config whose model is the config.json `json` (written as NAME)
 * and whose data section is `data`. */
static zt_status load_with_hf(const char *name, const char *json, const char *data,
                              struct zt_config *c)
{
    const char *path = write_file(testutil_tmpdir("config"), name, json, strlen(json));
    char text[4096];
    snprintf(text, sizeof text, "data: %s\nmodel: {hf_config: \"%s\"}\n", data, path);
    return load_text(text, NULL, 0, c);
}

/* Mistral's config.json is the llama family; its sliding window must hold
 * the whole sequence (then it is full attention), else the refusal names
 * both numbers. */
START_TEST(test_hf_config_mistral)
{
    const char *json =
        "{\"architectures\": [\"MistralForCausalLM\"], \"model_type\": \"mistral\", "
        "\"hidden_size\": 64, \"intermediate_size\": 160, \"num_attention_heads\": 4, "
        "\"num_key_value_heads\": 2, \"num_hidden_layers\": 2, \"max_position_embeddings\": "
        "1024, \"rms_norm_eps\": 1e-05, \"rope_theta\": 10000.0, \"sliding_window\": 256, "
        "\"vocab_size\": 320, \"tie_word_embeddings\": false, \"hidden_act\": \"silu\"}";
    static const struct {
        const char *data, *message;
        zt_status status;
    } cases[] = {
        {"{train: x, seq_len: 256}", NULL, ZT_OK},
        {"{train: x, seq_len: 128}", NULL, ZT_OK},
        {"{train: x, seq_len: 257}", "sliding_window 256 is shorter than data.seq_len 257",
         ZT_ERR_UNSUPPORTED},
        /* seq_len defaults to max_position_embeddings. */
        {"{train: x}", "sliding_window 256 is shorter than data.seq_len 1024", ZT_ERR_UNSUPPORTED},
    };
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        struct zt_config c;
        zt_status s = load_with_hf("mistral.json", json, cases[k].data, &c);
        ck_assert_msg(s == cases[k].status &&
                          (!cases[k].message || strstr(zt_error_message(), cases[k].message)),
                      "case %zu: %s: %s", k, zt_status_str(s), zt_error_message());
        if (s != ZT_OK)
            continue;
        ck_assert_str_eq(c.model.family, "llama");
        ck_assert_int_eq(c.model.n_kv_head, 2);
        ck_assert_int_eq(c.model.vocab_size, 320);
        ck_assert_int_eq(c.model.block_size, 1024);
        config_free(&c);
    }
    const char *unbounded = "{\"architectures\": [\"MistralForCausalLM\"], \"sliding_window\": "
                            "null, \"max_position_embeddings\": 2048}";
    struct zt_config c;
    ck_assert_msg(load_with_hf("mistral-null.json", unbounded, "{train: x}", &c) == ZT_OK, "%s",
                  zt_error_message());
    ck_assert_int_eq(c.data.seq_len, 2048);
    config_free(&c);
}
END_TEST

/* Qwen2's config.json is the llama family with q, k and v biases (no key
 * says so: the architecture does), recorded in the model's shape. */
START_TEST(test_hf_config_qwen2)
{
    const char *json =
        "{\"architectures\": [\"Qwen2ForCausalLM\"], \"model_type\": \"qwen2\", "
        "\"hidden_size\": 64, \"intermediate_size\": 160, \"num_attention_heads\": 4, "
        "\"num_key_value_heads\": 2, \"num_hidden_layers\": 2, \"max_position_embeddings\": "
        "512, \"rms_norm_eps\": 1e-06, \"rope_theta\": 1000000.0, \"sliding_window\": 512, "
        "\"use_sliding_window\": false, \"max_window_layers\": 21, \"vocab_size\": 320, "
        "\"tie_word_embeddings\": true, \"hidden_act\": \"silu\"}";
    struct zt_config c;
    zt_status s = load_with_hf("qwen2.json", json, "{train: x, seq_len: 128}", &c);
    ck_assert_msg(s == ZT_OK, "%s", zt_error_message());
    ck_assert_str_eq(c.model.family, "llama");
    ck_assert_int_eq(c.model.attention_bias, 1);
    ck_assert_int_eq(c.model.tie_word_embeddings, 1);
    ck_assert_double_eq(c.model.rope_theta, 1000000.0);
    struct zt_kvlist shape;
    config_model_shape(&c, &shape);
    const struct zt_kv *bias = zt_kv_find(&shape, "attention_bias");
    ck_assert_ptr_nonnull(bias);
    ck_assert_int_eq(bias->i, 1);
    config_free(&c);
}
END_TEST

/* What a config.json may say that zerotrain does not build is refused by
 * name. */
START_TEST(test_hf_config_refusals)
{
    static const struct {
        const char *json, *message;
        zt_status status;
    } cases[] = {
        {"{\"architectures\": [\"LlamaForCausalLM\"], \"rope_scaling\": {\"type\": \"llama3\"}}",
         "rope_scaling", ZT_ERR_UNSUPPORTED},
        {"{\"architectures\": [\"LlamaForCausalLM\"], \"attention_bias\": true}",
         "attention_bias is true", ZT_ERR_UNSUPPORTED},
        {"{\"architectures\": [\"LlamaForCausalLM\"], \"hidden_act\": \"gelu\"}",
         "hidden_act is \"gelu\"", ZT_ERR_UNSUPPORTED},
        {"{\"architectures\": [\"LlamaForCausalLM\"], \"hidden_size\": 64, "
         "\"num_attention_heads\": 4, \"head_dim\": 32}",
         "head_dim 32", ZT_ERR_UNSUPPORTED},
        {"{\"architectures\": [\"Qwen2ForCausalLM\"], \"use_sliding_window\": true}",
         "use_sliding_window is true: not supported", ZT_ERR_UNSUPPORTED},
        {"{\"architectures\": [\"Phi3ForCausalLM\"]}", "Phi3ForCausalLM", ZT_ERR_CONFIG},
        {"{\"architectures\": [\"LlamaForCausalLM\"], \"hidden_size\": \"big\"}",
         "hidden_size must be a number", ZT_ERR_CONFIG},
        {"{\"architectures\": [\"LlamaForCausalLM\"], \"num_attention_heads\": 4.5}",
         "num_attention_heads 4.5 is not a valid model.n_head", ZT_ERR_CONFIG},
        {"{\"architectures\": [\"LlamaForCausalLM\"], \"num_key_value_heads\": 3}",
         "n_head (4) must be divisible by n_kv_head (3)", ZT_ERR_CONFIG},
        {"[1]", "expected a JSON object", ZT_ERR_CONFIG},
        {"{\"architectures\": [\"LlamaForCausalLM\"], ", "not valid JSON", ZT_ERR_CONFIG},
    };
    const char *dir = testutil_tmpdir("config");
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        const char *path = write_file(dir, "c.json", cases[k].json, strlen(cases[k].json));
        char text[4096];
        snprintf(text, sizeof text, "data: {train: x}\nmodel: {hf_config: \"%s\"}\n", path);
        struct zt_config c;
        zt_status s = load_text(text, NULL, 0, &c);
        ck_assert_msg(s == cases[k].status && strstr(zt_error_message(), cases[k].message),
                      "case %zu: %s: %s", k, zt_status_str(s), zt_error_message());
        ck_assert(is_zeroed(&c));
    }
    struct zt_config c;
    zt_status s =
        load_text("data: {train: x}\nmodel: {hf_config: /nonexistent/config.json}\n", NULL, 0, &c);
    ck_assert_int_eq(s, ZT_ERR_CONFIG);
    ck_assert_msg(strstr(zt_error_message(), "model.hf_config: /nonexistent/config.json"), "%s",
                  zt_error_message());
}
END_TEST

/* ---- bad configs ----------------------------------------------------------------- */

struct bad_case {
    const char *text;   /* written to bad.yaml; or NULL and `file` */
    const char *file;   /* under tests/configs/bad/ */
    const char *set[2]; /* overrides, NULL-terminated */
    zt_status status;
    const char *message; /* a substring of the message */
};

static const struct bad_case bad_cases[] = {
    /* unknown keys, with and without a near name */
    {"data: {train: x}\nmodel:\n  n_emb: 3\n",
     NULL,
     {NULL},
     ZT_ERR_CONFIG,
     "bad.yaml:3:3: unknown key 'n_emb' in model (did you mean 'n_embd'?)"},
    {"data: {train: x}\noptimiser: {}\n",
     NULL,
     {NULL},
     ZT_ERR_CONFIG,
     "bad.yaml:2:1: unknown key 'optimiser' (did you mean 'optimizer'?)"},
    {"data: {train: x}\nscheduler:\n  type: WarmupLR\n  params:\n    warmup_steps: 10\n",
     NULL,
     {NULL},
     ZT_ERR_CONFIG,
     "bad.yaml:5:5: unknown key 'warmup_steps' in scheduler.params (did you mean "
     "'warmup_num_steps'?)"},
    {"data: {train: x}\ncomm: {xyzzy: 1}\n",
     NULL,
     {NULL},
     ZT_ERR_CONFIG,
     "bad.yaml:2:8: unknown key 'xyzzy' in comm (valid keys: backend, reduce_scatter, allgather, "
     "allreduce, timeout_s)"},
    /* types */
    {"data: {train: x}\nmodel:\n  n_embd: abc\n",
     NULL,
     {NULL},
     ZT_ERR_CONFIG,
     "bad.yaml:3:11: model.n_embd: expected an integer, got 'abc'"},
    {"data: {train: x}\nrun: {steps: 1.5}\n",
     NULL,
     {NULL},
     ZT_ERR_CONFIG,
     "bad.yaml:2:14: run.steps: expected an integer, got '1.5'"},
    {"data: {train: x}\nrun: {steps: \"5\"}\n",
     NULL,
     {NULL},
     ZT_ERR_CONFIG,
     "bad.yaml:2:14: run.steps: expected an integer, got the string '5'"},
    {"data: {train: x}\nrun: {steps: 99999999999999999999}\n",
     NULL,
     {NULL},
     ZT_ERR_CONFIG,
     "bad.yaml:2:14: run.steps: 99999999999999999999 is out of range"},
    {"data: {train: x}\nrun: {seed: -1}\n",
     NULL,
     {NULL},
     ZT_ERR_CONFIG,
     "bad.yaml:2:13: run.seed: -1 is out of range"},
    {"data: {train: x}\nfp16: {enabled: maybe}\n",
     NULL,
     {NULL},
     ZT_ERR_CONFIG,
     "bad.yaml:2:17: fp16.enabled: expected a boolean (true or false), got 'maybe'"},
    {"data: {train: x}\nmodel: 5\n",
     NULL,
     {NULL},
     ZT_ERR_CONFIG,
     "bad.yaml:2:8: model: expected a mapping, got '5'"},
    {"data: {train: x}\noptimizer: {params: {betas: 0.9}}\n",
     NULL,
     {NULL},
     ZT_ERR_CONFIG,
     "bad.yaml:2:29: optimizer.params.betas: expected a list of two numbers [beta1, beta2], got "
     "'0.9'"},
    {"data: {train: []}\n",
     NULL,
     {NULL},
     ZT_ERR_CONFIG,
     "bad.yaml:1:15: data.train: must name at least one path"},
    {"data: {train: [a, {b: 1}]}\n",
     NULL,
     {NULL},
     ZT_ERR_CONFIG,
     "bad.yaml:1:19: data.train: expected a path or a list of paths, got a mapping"},
    {"data: {train: x}\ncomm: {backend: gloo}\n",
     NULL,
     {NULL},
     ZT_ERR_CONFIG,
     "bad.yaml:2:17: comm.backend: expected auto, mpi or nccl, got 'gloo'"},
    /* ZeRO-Offload's device and pin_memory */
    {"data: {train: x}\nzero_optimization: {offload_optimizer: {device: gpu}}\n",
     NULL,
     {NULL},
     ZT_ERR_CONFIG,
     "bad.yaml:2:49: zero_optimization.offload_optimizer.device: expected none, cpu or nvme, "
     "got 'gpu'"},
    {"data: {train: x}\nzero_optimization:\n  offload_optimizer:\n    device: nvme\n",
     NULL,
     {NULL},
     ZT_ERR_CONFIG,
     "bad.yaml:4:13: zero_optimization.offload_optimizer.nvme_path: required with device nvme "
     "(the folder of the state files)"},
    {"data: {train: x}\noptimizer: {type: Adafactor}\n"
     "zero_optimization: {offload_optimizer: {device: nvme, nvme_path: /x}}\n",
     NULL,
     {NULL},
     ZT_ERR_CONFIG,
     "zero_optimization.offload_optimizer.device: nvme streams the states of element-wise "
     "optimizers, and Adafactor reduces whole-tensor statistics over its states"},
    {"data: {train: x}\nzero_optimization: {offload_param: {device: nvme}}\n",
     NULL,
     {NULL},
     ZT_ERR_UNSUPPORTED,
     "bad.yaml:2:45: zero_optimization.offload_param.device: nvme is not supported"},
    {"{\"data\": {\"train\": \"x\"}, \"zero_optimization\": {\"offload_optimizer\": "
     "{\"device\": \"cpu\", \"pin_memory\": \"yes please\"}}}\n",
     NULL,
     {NULL},
     ZT_ERR_CONFIG,
     "zero_optimization.offload_optimizer.pin_memory: expected a boolean (true or false), got"},
    {"data: {train: x}\nzero_optimization: {offload_optimizer: {device: cpu, pin_memory: 2}}\n",
     NULL,
     {NULL},
     ZT_ERR_CONFIG,
     "zero_optimization.offload_optimizer.pin_memory: expected a boolean (true or false), got "
     "'2'"},
    {"data: {train: x}\nzero_optimization: {offload_optimizer: cpu}\n",
     NULL,
     {NULL},
     ZT_ERR_CONFIG,
     "zero_optimization.offload_optimizer: expected a mapping, got 'cpu'"},
    {"data: {train: x}\nzero_optimization: {offload_optimizer: {devise: cpu}}\n",
     NULL,
     {NULL},
     ZT_ERR_CONFIG,
     "unknown key 'devise' in zero_optimization.offload_optimizer (did you mean 'device'?)"},
    /* NCCL on the CPU could never run: refused at the keys, either order */
    {"data: {train: x}\ndevice: cpu\ncomm: {backend: nccl}\n",
     NULL,
     {NULL},
     ZT_ERR_CONFIG,
     "bad.yaml:3:17: comm.backend: nccl reduces GPU memory, but device is cpu (use comm.backend: "
     "mpi or auto, or device: cuda)"},
    {"data: {train: x}\ncomm: {backend: nccl}\n",
     NULL,
     {"device=cpu", NULL},
     ZT_ERR_CONFIG,
     "--set device=cpu: comm.backend: nccl reduces GPU memory, but device is cpu"},
    {"data: {train: x}\ndevice: tpu\n",
     NULL,
     {NULL},
     ZT_ERR_CONFIG,
     "bad.yaml:2:9: device: expected auto, cpu or cuda, got 'tpu'"},
    {"data: {train: x}\ndevice: [cpu]\n", NULL, {NULL}, ZT_ERR_CONFIG, "bad.yaml:2:9: device: "},
    {"data: {train: x}\nscheduler: {type: Cosine}\n",
     NULL,
     {NULL},
     ZT_ERR_CONFIG,
     "bad.yaml:2:19: scheduler.type: expected WarmupLR, WarmupDecayLR or WarmupCosineLR, got "
     "'Cosine'"},
    {"data: {train: x}\nscheduler: {type: WarmupLR, params: {warmup_type: exp}}\n",
     NULL,
     {NULL},
     ZT_ERR_CONFIG,
     "bad.yaml:2:51: scheduler.params.warmup_type: expected log or linear"},
    {"data: {train: x, format: csv}\n",
     NULL,
     {NULL},
     ZT_ERR_CONFIG,
     "bad.yaml:1:26: data.format: must be text or jsonl, got 'csv'"},
    /* ranges */
    {"data: {train: x}\nmodel: {vocab_size: 2147483648}\n",
     NULL,
     {NULL},
     ZT_ERR_CONFIG,
     "bad.yaml:2:21: model.vocab_size: 2147483648 is out of range"},
    {"data: {train: x}\nmodel: {vocab_size: 0}\n",
     NULL,
     {NULL},
     ZT_ERR_CONFIG,
     "bad.yaml:2:21: model.vocab_size: must be between 1 and 2147483647, got 0"},
    {"data: {train: x}\nmodel: {pad_vocab_size_to_multiple_of: 0}\n",
     NULL,
     {NULL},
     ZT_ERR_CONFIG,
     "bad.yaml:2:40: model.pad_vocab_size_to_multiple_of: must be between 1 and 65536, got 0"},
    {"data: {train: x}\nmodel:\n  pad_vocab_size_to_multiple_of: -128\n",
     NULL,
     {NULL},
     ZT_ERR_CONFIG,
     "bad.yaml:3:34: model.pad_vocab_size_to_multiple_of: must be between 1 and 65536, got -128"},
    {"data: {train: x}\nmodel: {n_embd: 130, n_head: 4}\n",
     NULL,
     {NULL},
     ZT_ERR_CONFIG,
     "bad.yaml:2:17: model.n_embd: n_embd (130) must be divisible by n_head (4)"},
    {"data: {train: x}\noptimizer: {params: {lr: -1}}\n",
     NULL,
     {NULL},
     ZT_ERR_CONFIG,
     "bad.yaml:2:26: optimizer.params.lr: must be > 0, got -1"},
    {"data: {train: x}\noptimizer: {params: {lr: 0}}\n",
     NULL,
     {NULL},
     ZT_ERR_CONFIG,
     "bad.yaml:2:26: optimizer.params.lr: must be > 0, got 0"},
    {"data: {train: x}\noptimizer: {params: {betas: [0.9, 1.0]}}\n",
     NULL,
     {NULL},
     ZT_ERR_CONFIG,
     "bad.yaml:2:35: optimizer.params.betas[1]: must be in [0, 1), got 1.0"},
    {"data: {train: x}\noptimizer: {params: {betas: [-0.1, 0.9]}}\n",
     NULL,
     {NULL},
     ZT_ERR_CONFIG,
     "bad.yaml:2:30: optimizer.params.betas[0]: must be in [0, 1), got -0.1"},
    {"data: {train: x}\noptimizer:\n  params:\n    eps: 0\n",
     NULL,
     {NULL},
     ZT_ERR_CONFIG,
     "bad.yaml:4:10: optimizer.params.eps: must be > 0, got 0"},
    {"data: {train: x}\ntrain_micro_batch_size_per_gpu: 0\n",
     NULL,
     {NULL},
     ZT_ERR_CONFIG,
     "bad.yaml:2:33: train_micro_batch_size_per_gpu: must be >= 1, got 0"},
    {"data: {train: x}\ngradient_accumulation_steps: 0\n",
     NULL,
     {NULL},
     ZT_ERR_CONFIG,
     "bad.yaml:2:30: gradient_accumulation_steps: must be >= 1, got 0"},
    {"model: {block_size: 64}\ndata: {train: x, seq_len: 65}\n",
     NULL,
     {NULL},
     ZT_ERR_CONFIG,
     "bad.yaml:2:27: data.seq_len: must be <= model.block_size (64), got 65"},
    {"data: {train: x}\nrun:\n  steps: 0\n",
     NULL,
     {NULL},
     ZT_ERR_CONFIG,
     "bad.yaml:3:10: run.steps: must be >= 1, got 0"},
    {"data: {train: x, val_fraction: 0.6}\n",
     NULL,
     {NULL},
     ZT_ERR_CONFIG,
     "bad.yaml:1:32: data.val_fraction: must be in [0, 0.5], got 0.6"},
    {"data: {train: x}\ngradient_clipping: -1.0\n",
     NULL,
     {NULL},
     ZT_ERR_CONFIG,
     "bad.yaml:2:20: gradient_clipping: must be >= 0, got -1.0"},
    {"data: {train: x}\nzero_optimization: {stage: 4}\n",
     NULL,
     {NULL},
     ZT_ERR_CONFIG,
     "bad.yaml:2:28: zero_optimization.stage: must be between 0 and 3, got 4"},
    /* whole-file problems */
    {"model: {n_layer: 2}\n", NULL, {NULL}, ZT_ERR_CONFIG, "bad.yaml: data.train: required"},
    {"data:\n  val: v.bin\n", NULL, {NULL}, ZT_ERR_CONFIG, "bad.yaml:2:3: data.train: required"},
    {"", NULL, {NULL}, ZT_ERR_CONFIG, "bad.yaml: empty configuration file"},
    {"# only comments\n\n", NULL, {NULL}, ZT_ERR_CONFIG, "bad.yaml: empty configuration file"},
    {"- a\n- b\n",
     NULL,
     {NULL},
     ZT_ERR_CONFIG,
     "bad.yaml:1:1: the top level must be a mapping of sections and keys, got a list"},
    {"data: {train: x}\n bad: 1\n",
     NULL,
     {NULL},
     ZT_ERR_CONFIG,
     "bad.yaml:2:2: YAML syntax error: did not find expected key while parsing a block mapping "
     "(at line 1)"},
    {"data: {train: \xff}\n",
     NULL,
     {NULL},
     ZT_ERR_CONFIG,
     "bad.yaml:1:15: YAML syntax error: invalid leading UTF-8 octet"},
    {NULL,
     "syntax.json",
     {NULL},
     ZT_ERR_CONFIG,
     "syntax.json:5:27: YAML syntax error: did not find expected node content while parsing a "
     "flow node"},
    {NULL,
     "duplicate.yaml",
     {NULL},
     ZT_ERR_CONFIG,
     "duplicate.yaml:7:5: duplicate key 'lr' (lines 5 and 7)"},
    {NULL,
     "hf_auto.json",
     {NULL},
     ZT_ERR_CONFIG,
     "hf_auto.json:2:37: train_micro_batch_size_per_gpu: \"auto\" is resolved by the HF Trainer "
     "and must be given a value here"},
    /* schedulers */
    {"data: {train: x}\nscheduler: {type: WarmupDecayLR, params: {cos_min_ratio: 0.1}}\n",
     NULL,
     {NULL},
     ZT_ERR_CONFIG,
     "bad.yaml:2:58: scheduler.params.cos_min_ratio: not a parameter of WarmupDecayLR (valid: "
     "warmup_min_lr, warmup_max_lr, warmup_num_steps, warmup_type, total_num_steps)"},
    {"data: {train: x}\nscheduler: {type: WarmupCosineLR, params: {warmup_max_lr: 0.1}}\n",
     NULL,
     {NULL},
     ZT_ERR_CONFIG,
     "scheduler.params.warmup_max_lr: not a parameter of WarmupCosineLR (valid: "
     "warmup_num_steps, warmup_type, total_num_steps, warmup_min_ratio, cos_min_ratio)"},
    {"data: {train: x}\nscheduler: {params: {warmup_num_steps: 3}}\n",
     NULL,
     {NULL},
     ZT_ERR_CONFIG,
     "bad.yaml:2:12: scheduler.type: required when scheduler is given"},
    {"data: {train: x}\nscheduler: {type: WarmupCosineLR}\n",
     NULL,
     {NULL},
     ZT_ERR_CONFIG,
     "bad.yaml:2:19: scheduler.params.total_num_steps: must be greater than warmup_num_steps "
     "(1000) for WarmupCosineLR, got 100 (from run.steps)"},
    /* not supported yet */
    {"data: {train: x}\nfp16: {enabled: true}\nbf16:\n  enabled: yes\n",
     NULL,
     {NULL},
     ZT_ERR_CONFIG,
     "fp16.enabled and bf16.enabled are both true: choose one"},
    {"data: {train: x}\nfp8: {enabled: true, format: x}\n",
     NULL,
     {NULL},
     ZT_ERR_CONFIG,
     "bad.yaml:2:30: fp8.format: \"x\" is not one of hybrid, e4m3"},
    {"data: {train: x}\nfp8: {amax_compute_algo: mean}\n",
     NULL,
     {NULL},
     ZT_ERR_CONFIG,
     "fp8.amax_compute_algo: \"mean\" is not one of max, most_recent"},
    {"data: {train: x}\nfp8: {amax_history_len: 0}\n",
     NULL,
     {NULL},
     ZT_ERR_CONFIG,
     "fp8.amax_history_len: must be between 1 and 1048576, got 0"},
    {"data: {train: x}\nfp8: {margin: -1}\n",
     NULL,
     {NULL},
     ZT_ERR_CONFIG,
     "fp8.margin: must be between 0 and 64, got -1"},
    {"data: {train: x}\nfp16: {enabled: true}\nfp8: {enabled: true}\n",
     NULL,
     {NULL},
     ZT_ERR_CONFIG,
     "fp8.enabled: not with fp16.enabled: the fp16 loss scale moves the output gradients' amax"},
    {"data: {train: x}\nfp8: {enabled: true}\nlora: {enabled: true}\n",
     NULL,
     {NULL},
     ZT_ERR_CONFIG,
     "fp8.enabled: not with lora.enabled"},
    {"data: {train: x}\nfp8: {enabled: true}\nquantization: {load_in_4bit: true}\n",
     NULL,
     {NULL},
     ZT_ERR_CONFIG,
     "fp8.enabled: not with quantization.load_in_4bit"},
    {"data: {train: x}\nbf16: {enabled: true}\ndata_types: {grad_accum_dtype: fp16}\n",
     NULL,
     {NULL},
     ZT_ERR_CONFIG,
     "bad.yaml:3:32: data_types.grad_accum_dtype: must be fp32 or the working precision (bf16), "
     "got 'fp16'"},
    {"data: {train: x}\ndata_types: {grad_accum_dtype: float64}\n",
     NULL,
     {NULL},
     ZT_ERR_CONFIG,
     "data_types.grad_accum_dtype: must be fp32 or the working precision (fp32), got 'float64'"},
    {"data: {train: x}\nfp16: {min_loss_scale: 0}\n",
     NULL,
     {NULL},
     ZT_ERR_CONFIG,
     "bad.yaml:2:24: fp16.min_loss_scale: must be > 0"},
    {"data: {train: x}\ncheckpoint: {every: -1}\n",
     NULL,
     {NULL},
     ZT_ERR_CONFIG,
     "bad.yaml:2:21: checkpoint.every: must be >= 0, got -1"},
    {"data: {train: x}\ncheckpoint: {every: 5}\n",
     NULL,
     {NULL},
     ZT_ERR_CONFIG,
     "bad.yaml:2:21: checkpoint.every: 5 asks for checkpoints, but checkpoint.dir is not set "
     "(null: no checkpoints): set checkpoint.dir"},
    /* DeepSpeed's keys: unknown to both still fail, with the nearest name of
     * either table; known ones must have the right type */
    {"data: {train: x}\nflops_profile: {enabled: true}\n",
     NULL,
     {NULL},
     ZT_ERR_CONFIG,
     "bad.yaml:2:1: unknown key 'flops_profile' (did you mean 'flops_profiler'?)"},
    {"data: {train: x}\nzero_optimization: {stage: 3, sub_group_sise: 1e9}\n",
     NULL,
     {NULL},
     ZT_ERR_CONFIG,
     "bad.yaml:2:31: unknown key 'sub_group_sise' in zero_optimization (did you mean "
     "'sub_group_size'?)"},
    {"data: {train: x}\nzero_optimization: {overlap_comm: 3}\n",
     NULL,
     {NULL},
     ZT_ERR_CONFIG,
     "bad.yaml:2:35: zero_optimization.overlap_comm: expected a boolean (true or false), got '3'"},
    {"data: {train: x}\ntensorboard: true\n",
     NULL,
     {NULL},
     ZT_ERR_CONFIG,
     "bad.yaml:2:14: tensorboard: expected a mapping, got 'true'"},
    {"data: {train: x}\ncsv_monitor: {enabled: 3}\n",
     NULL,
     {NULL},
     ZT_ERR_CONFIG,
     "bad.yaml:2:24: csv_monitor.enabled: expected a boolean (true or false), got '3'"},
    {"data: {train: x}\ncsv_monitor: {output_path: [a]}\n",
     NULL,
     {NULL},
     ZT_ERR_CONFIG,
     "bad.yaml:2:28: csv_monitor.output_path: expected a string, got a list"},
    {"data: {train: x}\ncsv_monitor: {job: x}\n",
     NULL,
     {NULL},
     ZT_ERR_CONFIG,
     "bad.yaml:2:15: unknown key 'job' in csv_monitor (valid keys: enabled, output_path, "
     "job_name)"},
    {"data: {train: x}\ncsv_monitor: true\n",
     NULL,
     {NULL},
     ZT_ERR_CONFIG,
     "bad.yaml:2:14: csv_monitor: expected a mapping, got 'true'"},
    {"data: {train: x}\nwandb: {enabled: maybe}\n",
     NULL,
     {NULL},
     ZT_ERR_CONFIG,
     "bad.yaml:2:18: wandb: expected enabled: true or false, got 'maybe'"},
    /* evaluations need validation data */
    {"data: {train: x, val_fraction: 0}\nrun: {eval_interval: 5}\n",
     NULL,
     {NULL},
     ZT_ERR_CONFIG,
     "bad.yaml:2:22: run.eval_interval: 5 asks for evaluations, but there is no validation data "
     "(data.val_fraction is 0 and data.val is not given): give data.val or a data.val_fraction > "
     "0, or set run.eval_interval to 0"},
    {"data: {train: x}\nrun: {eval_interval: 5}\n",
     NULL,
     {"data.val_fraction=0", NULL},
     ZT_ERR_CONFIG,
     "--set data.val_fraction=0: run.eval_interval: 5 asks for evaluations"},
    {"data: {train: x}\ncheckpoint: {kep: 3}\n",
     NULL,
     {NULL},
     ZT_ERR_CONFIG,
     "did you mean 'keep'?"},
    {"data: {train: x}\noptimizer: {type: Lamb}\n",
     NULL,
     {NULL},
     ZT_ERR_UNSUPPORTED,
     "bad.yaml:2:19: optimizer.type: not supported yet: optimizer 'Lamb' (supported: AdamW, "
     "Adam, SGD, Lion, Adafactor, AdamW8bit, LOMO)"},
    {"data: {train: x}\noptimizer: {type: SGD, params: {nesterov: true, momentum: 0.9, "
     "dampening: 0.1}}\n",
     NULL,
     {NULL},
     ZT_ERR_CONFIG,
     "optimizer.params.nesterov: needs momentum > 0 and dampening 0, got momentum 0.9, "
     "dampening 0.1"},
    {"data: {train: x}\noptimizer: {type: AdamW, params: {momentum: 0.9, lr: 1e-3}}\n",
     NULL,
     {NULL},
     ZT_ERR_CONFIG,
     "bad.yaml:2:45: optimizer.params: AdamW does not use momentum (its parameters: lr, betas, "
     "eps, weight_decay); remove them, or give them null"},
    {"data: {train: x}\noptimizer: {type: Lion, params: {eps: 1e-8, betas: [0.9, 0.99]}}\n",
     NULL,
     {NULL},
     ZT_ERR_CONFIG,
     "Lion does not use eps (its parameters: lr, betas, weight_decay)"},
    {"data: {train: x}\noptimizer: {type: adafactor, params: {eps: 1e-8}}\n",
     NULL,
     {NULL},
     ZT_ERR_CONFIG,
     "bad.yaml:2:44: optimizer.params.eps: Adafactor takes a pair [eps1, eps2]"},
    {"data: {train: x}\noptimizer: {type: adafactor, params: {betas: [0.9, 0.99]}}\n",
     NULL,
     {NULL},
     ZT_ERR_CONFIG,
     "Adafactor does not use betas (its parameters: lr, beta1, eps, weight_decay, "
     "clip_threshold, decay_rate, scale_parameter, relative_step, warmup_init)"},
    {"data: {train: x}\noptimizer: {type: AdamW, params: {eps: [1e-30, 1e-3]}}\n",
     NULL,
     {NULL},
     ZT_ERR_CONFIG,
     "optimizer.params.eps: AdamW takes one number, got a pair"},
    {"data: {train: x}\noptimizer: {type: Adafactor, params: {relative_step: true, lr: 0.1}}\n",
     NULL,
     {NULL},
     ZT_ERR_CONFIG,
     "optimizer.params.relative_step: computes the learning rate; remove optimizer.params.lr"},
    {"data: {train: x}\noptimizer: {type: Adafactor, params: {warmup_init: true}}\n",
     NULL,
     {NULL},
     ZT_ERR_CONFIG,
     "optimizer.params.warmup_init: needs relative_step: true"},
    {"data: {train: x}\noptimizer: {type: Adafactor, params: {decay_rate: 0.5}}\n",
     NULL,
     {NULL},
     ZT_ERR_CONFIG,
     "optimizer.params.decay_rate: must be < 0, got 0.5"},
    {"data: {train: x}\ngradient_accumulation_steps: 4\noptimizer: {type: lomo, params: {lr: "
     "0.01}}\n",
     NULL,
     {NULL},
     ZT_ERR_CONFIG,
     "bad.yaml:2:30: gradient_accumulation_steps: LOMO updates each unit during the backward and "
     "keeps no gradient to accumulate into: it must be 1, got 4 (raise "
     "train_micro_batch_size_per_gpu instead)"},
    {"data: {train: x}\nmodel: {n_layer: 4}\npipeline: {stages: 2, virtual_stages: 2}\n"
     "optimizer: {type: lomo, params: {lr: 0.01}}\n",
     NULL,
     {NULL},
     ZT_ERR_CONFIG,
     "bad.yaml:3:39: pipeline.virtual_stages: LOMO runs one micro batch a step, and the "
     "interleaved schedule needs whole rounds of pipeline.stages (2) micro batches: set "
     "pipeline.virtual_stages 1"},
    {"data: {train: x}\noptimizer: {type: Adafactor, params: {eps: [1e-30, 1e-3, 1]}}\n",
     NULL,
     {NULL},
     ZT_ERR_CONFIG,
     "optimizer.params.eps: expected a number, or Adafactor's pair [eps1, eps2]"},
    {"data: {train: x}\nscheduler: {type: OneCycle}\n",
     NULL,
     {NULL},
     ZT_ERR_UNSUPPORTED,
     "scheduler.type: not supported yet: scheduler 'OneCycle'"},
    /* overrides */
    {"data: {train: x}\n",
     NULL,
     {"run.steps", NULL},
     ZT_ERR_CONFIG,
     "--set run.steps: expected key.path=value"},
    {"data: {train: x}\n",
     NULL,
     {"model.n_emb=5", NULL},
     ZT_ERR_CONFIG,
     "--set model.n_emb=5: unknown key 'n_emb' in model (did you mean 'n_embd'?)"},
    {"data: {train: x}\n",
     NULL,
     {"optimizer.params.lr=-1", NULL},
     ZT_ERR_CONFIG,
     "--set optimizer.params.lr=-1: optimizer.params.lr: must be > 0, got -1"},
    {"data: {train: x}\n",
     NULL,
     {"optimizer.params.betas=[0.9,", NULL},
     ZT_ERR_CONFIG,
     "--set optimizer.params.betas=[0.9,: YAML syntax error: did not find expected node content"},
    {"data: {train: x}\n",
     NULL,
     {"optimizer.params.betas=[0.9, 2]", NULL},
     ZT_ERR_CONFIG,
     "--set optimizer.params.betas=[0.9, 2]: optimizer.params.betas[1]: must be in [0, 1), got 2"},
    {"data: {train: x}\nmodel: {n_head: 4}\n",
     NULL,
     {"model.n_embd=130", NULL},
     ZT_ERR_CONFIG,
     "--set model.n_embd=130: model.n_embd: n_embd (130) must be divisible by n_head (4)"},
    {"data: {train: x}\nmodel: {n_embd: 32}\n",
     NULL,
     {"model.n_head=3", NULL},
     ZT_ERR_CONFIG,
     "--set model.n_head=3: model.n_embd: n_embd (32) must be divisible by n_head (3)"},
    {"data: {train: x}\n",
     NULL,
     {"run.steps=3", "run.steps.max=4"},
     ZT_ERR_CONFIG,
     "--set run.steps.max=4: 'run.steps' is '3', not a mapping"},
    {"data: {train: x}\n",
     NULL,
     {"fp16.enabled=true", "bf16.enabled=true"},
     ZT_ERR_CONFIG,
     "--set fp16.enabled=true: fp16.enabled and bf16.enabled are both true: choose one"},
    {"model: {}\n",
     NULL,
     {"data.train=null", NULL},
     ZT_ERR_CONFIG,
     "--set data.train=null: data.train: required"},
    {"data: {train: x}\n",
     NULL,
     {"optimizer.params.lr=", NULL},
     ZT_ERR_CONFIG,
     "--set optimizer.params.lr=: empty value (give a value, or null to restore the default)"},
    /* model families */
    {"data: {train: x}\nmodel:\n  family: bert\n",
     NULL,
     {NULL},
     ZT_ERR_CONFIG,
     "bad.yaml:3:11: model.family: expected gpt2 or llama, got 'bert'"},
    {"data: {train: x}\nmodel:\n  n_kv_head: 2\n",
     NULL,
     {NULL},
     ZT_ERR_CONFIG,
     "bad.yaml:3:14: model.n_kv_head: a key of model.family llama, but the model is gpt2"},
    {"data: {train: x}\nmodel:\n  family: llama\n  n_head: 4\n  n_kv_head: 3\n",
     NULL,
     {NULL},
     ZT_ERR_CONFIG,
     "model.n_kv_head: n_head (4) must be divisible by n_kv_head (3)"},
    {"data: {train: x}\nmodel:\n  family: llama\n  n_head: 4\n  n_embd: 12\n",
     NULL,
     {NULL},
     ZT_ERR_CONFIG,
     "the head size n_embd / n_head (12 / 4) must be even"},
    {"data: {train: x}\nmodel:\n  family: llama\n  rope_theta: 0\n",
     NULL,
     {NULL},
     ZT_ERR_CONFIG,
     "model.rope_theta: must be > 0"},
    {"[1, 2]\n",
     NULL,
     {"data.train=x", NULL},
     ZT_ERR_CONFIG,
     "bad.yaml:1:1: the top level must be a mapping"},
    /* tensor and pipeline parallelism */
    {"data: {train: x}\ntensor_parallel: {size: 0}\n",
     NULL,
     {NULL},
     ZT_ERR_CONFIG,
     "bad.yaml:2:25: tensor_parallel.size: must be >= 1, got 0"},
    {"data: {train: x}\npipeline:\n  stages: -2\n",
     NULL,
     {NULL},
     ZT_ERR_CONFIG,
     "bad.yaml:3:11: pipeline.stages: must be >= 1, got -2"},
    {"data: {train: x}\npipeline:\n  stages: 5\n",
     NULL,
     {NULL},
     ZT_ERR_CONFIG,
     "bad.yaml:3:11: pipeline.stages: 5 is more than model.n_layer (4 blocks): every stage needs "
     "a block"},
    {"data: {train: x}\npipeline: {stages: 3}\n",
     NULL,
     {"model.n_layer=2", NULL},
     ZT_ERR_CONFIG,
     "--set model.n_layer=2: pipeline.stages: 3 is more than model.n_layer (2 blocks)"},
    {"data: {train: x}\npipeline: {stages: auto}\n",
     NULL,
     {NULL},
     ZT_ERR_CONFIG,
     "bad.yaml:2:20: pipeline.stages: expected an integer, got 'auto'"},
    {"data: {train: x}\npipeline:\n  schedule: interleaved\n",
     NULL,
     {NULL},
     ZT_ERR_CONFIG,
     "bad.yaml:3:13: pipeline.schedule: expected 1f1b or gpipe, got 'interleaved'"},
    {"data: {train: x}\npipeline:\n  partition_method: type:transformer\n",
     NULL,
     {NULL},
     ZT_ERR_CONFIG,
     "bad.yaml:3:21: pipeline.partition_method: expected parameters or uniform, got "
     "'type:transformer'"},
    {"data: {train: x}\ntensor_parallel: {sise: 2}\n",
     NULL,
     {NULL},
     ZT_ERR_CONFIG,
     "bad.yaml:2:19: unknown key 'sise' in tensor_parallel (did you mean 'size'?)"},
    {"data: {train: x}\ntensor_parallel:\n  sequence_parallel: sometimes\n",
     NULL,
     {NULL},
     ZT_ERR_CONFIG,
     "bad.yaml:3:22: tensor_parallel.sequence_parallel: expected a boolean (true or false)"},
    {"data: {train: x}\ntensor_parallel:\n  size: 3\n",
     NULL,
     {NULL},
     ZT_ERR_CONFIG,
     "bad.yaml:3:9: tensor_parallel.size: 3 must divide model.n_head (4): each tensor-parallel "
     "rank computes whole attention heads"},
    {"data: {train: x}\nmodel: {n_head: 8, n_embd: 64, pad_vocab_size_to_multiple_of: 1}\n",
     NULL,
     {"tensor_parallel.size=8", "model.vocab_size=260"},
     ZT_ERR_CONFIG,
     "--set tensor_parallel.size=8: tensor_parallel.size: 8 must divide model.vocab_size (260): "
     "the embedding and the output head are split by vocabulary rows (set "
     "model.pad_vocab_size_to_multiple_of above 1 to pad them)"},
    {"data: {train: x}\nmodel: {family: llama, n_head: 8, n_kv_head: 2, n_embd: 128}\n"
     "tensor_parallel: {size: 4}\n",
     NULL,
     {NULL},
     ZT_ERR_CONFIG,
     "tensor_parallel.size: 4 must divide model.n_kv_head (2): each tensor-parallel rank holds "
     "whole key/value heads"},
    {"data: {train: x}\nmodel: {family: llama, n_head: 4, n_embd: 128, intermediate_size: 250}\n"
     "tensor_parallel: {size: 4}\n",
     NULL,
     {NULL},
     ZT_ERR_CONFIG,
     "tensor_parallel.size: 4 must divide model.intermediate_size (250): the MLP's columns are "
     "split evenly"},
    {"data: {train: x, seq_len: 30}\ntensor_parallel: {size: 4, sequence_parallel: true}\n",
     NULL,
     {NULL},
     ZT_ERR_CONFIG,
     "tensor_parallel.sequence_parallel: data.seq_len (30) must be divisible by "
     "tensor_parallel.size (4): each tensor-parallel rank holds an equal slice of the sequence"},
};

START_TEST(test_bad_config)
{
    const struct bad_case *b = &bad_cases[_i];
    struct zt_config c;
    memset(&c, 0xab, sizeof c);
    int n_set = b->set[0] ? (b->set[1] ? 2 : 1) : 0;
    zt_status s;
    if (b->text) {
        s = load_text(b->text, b->set, n_set, &c);
    } else {
        char rel[256];
        snprintf(rel, sizeof rel, "tests/configs/bad/%s", b->file);
        s = config_load(testutil_source_path(rel), NULL, 0, &c);
    }
    ck_assert_msg(s == b->status, "case %d: status %s, expected %s (%s)", _i, zt_status_str(s),
                  zt_status_str(b->status), zt_error_message());
    ck_assert_int_eq(zt_status_exit_code(s), 2);
    ck_assert_msg(strstr(zt_error_message(), b->message), "case %d: message \"%s\" lacks \"%s\"",
                  _i, zt_error_message(), b->message);
    ck_assert(is_zeroed(&c));
}
END_TEST

/* ---- fault loops -------------------------------------------------------------------- */

/* Every byte prefix of a good file loads or fails cleanly: a known status,
 * a message, a zeroed struct, and (under ASan) nothing leaked. */
static void check_prefixes(const char *rel)
{
    FILE *f = fopen(testutil_source_path(rel), "rb");
    ck_assert_ptr_nonnull(f);
    char text[8192];
    size_t len = fread(text, 1, sizeof text, f);
    fclose(f);
    ck_assert_uint_lt(len, sizeof text);
    const char *dir = testutil_tmpdir("config");
    struct config_override ov[] = {{"data.train=x"}};
    int ok = 0;
    for (size_t n = 0; n <= len; n++) {
        /* A fresh file each time: rewriting one in place costs milliseconds
         * per truncation on some file systems. */
        char name[64];
        snprintf(name, sizeof name, "prefix-%zu.yaml", n);
        const char *path = write_file(dir, name, text, n);
        struct zt_config c;
        zt_status s = config_load(path, ov, 1, &c);
        unlink(path);
        if (s == ZT_OK) {
            ok++;
            config_free(&c);
            continue;
        }
        if (s != ZT_ERR_CONFIG && s != ZT_ERR_UNSUPPORTED)
            ck_abort_msg("prefix %zu: %s: %s", n, zt_status_str(s), zt_error_message());
        if (zt_error_message()[0] == '\0' || !is_zeroed(&c))
            ck_abort_msg("prefix %zu: no message or a struct left filled", n);
    }
    ck_assert_int_gt(ok, 0); /* at least the whole file */
}

START_TEST(test_truncated_yaml)
{
    check_prefixes("tests/configs/full.yaml");
}
END_TEST

START_TEST(test_truncated_json)
{
    check_prefixes("tests/configs/deepspeed.json");
    check_prefixes("tests/data/deepspeed_zero3.json");
}
END_TEST

/* Fails the N-th allocation of a load, for N = 1, 2, ... until the load
 * succeeds: each failure must be ZT_ERR_NOMEM with a zeroed struct, and
 * under ASan must leak nothing. */
START_TEST(test_allocation_failures)
{
    const char *path = testutil_source_path("tests/configs/full.yaml");
    struct config_override ov[] = {{"optimizer.params.betas=[0.8, 0.9]"},
                                   {"scheduler.params.extra.deep=1"}};
    long n;
    for (n = 1; n < 100000; n++) {
        struct zt_config c;
        fault_alloc_arm(n);
        zt_status s = config_load(path, ov, 1, &c);
        long left = fault_alloc_disarm();
        if (s == ZT_OK) {
            ck_assert_int_gt(left, 0); /* succeeded because nothing failed */
            config_free(&c);
            break;
        }
        if (s != ZT_ERR_NOMEM || !is_zeroed(&c))
            ck_abort_msg("allocation %ld: %s: %s", n, zt_status_str(s), zt_error_message());
    }
    ck_assert_int_gt(n, 50); /* the loop reached real allocations */
    ck_assert_int_lt(n, 100000);

    /* The same for an override that fails on its own: NOMEM or its error. */
    for (n = 1; n < 100000; n++) {
        struct zt_config c;
        fault_alloc_arm(n);
        zt_status s = config_load(path, ov, 2, &c);
        long left = fault_alloc_disarm();
        if ((s != ZT_ERR_NOMEM && s != ZT_ERR_CONFIG) || !is_zeroed(&c))
            ck_abort_msg("allocation %ld: %s: %s", n, zt_status_str(s), zt_error_message());
        if (s == ZT_ERR_CONFIG) {
            ck_assert_int_gt(left, 0);
            ck_assert_ptr_nonnull(strstr(zt_error_message(), "unknown key 'extra'"));
            break;
        }
    }
    ck_assert_int_lt(n, 100000);
}
END_TEST

/* The same for a DeepSpeed file whose settings fill the start-up warning:
 * a failure while collecting it is ZT_ERR_NOMEM, never a partial list. */
START_TEST(test_allocation_failures_deepspeed)
{
    const char *path = testutil_source_path("tests/data/deepspeed_zero3.json");
    struct config_override ov[] = {{"data.train=x"}};
    long n;
    for (n = 1; n < 100000; n++) {
        struct zt_config c;
        fault_alloc_arm(n);
        zt_status s = config_load(path, ov, 1, &c);
        long left = fault_alloc_disarm();
        if (s == ZT_OK) {
            ck_assert_int_gt(left, 0);
            ck_assert_int_eq(testutil_count(c.ignored, "\n"), 9); /* the heading and 8 settings */
            config_free(&c);
            break;
        }
        if (s != ZT_ERR_NOMEM || !is_zeroed(&c))
            ck_abort_msg("allocation %ld: %s: %s", n, zt_status_str(s), zt_error_message());
    }
    ck_assert_int_gt(n, 50);
    ck_assert_int_lt(n, 100000);
}
END_TEST

static Suite *config_suite(void)
{
    Suite *s = suite_create("config");
    TCase *tree = tcase_create("yaml_tree");
    tcase_add_test(tree, test_tree_positions_and_quoting);
    tcase_add_test(tree, test_tree_set_path);
    tcase_add_test(tree, test_tree_errors);
    tcase_add_test(tree, test_tree_aliases_depth_and_bombs);
    tcase_add_test(tree, test_tree_hostile_input_is_refused_in_linear_time);
    tcase_add_test(tree, test_tree_io_errors);
    suite_add_tcase(s, tree);

    TCase *good = tcase_create("good");
    tcase_add_test(good, test_defaults);
    tcase_add_test(good, test_fp8_keys);
    tcase_add_test(good, test_dependent_defaults_follow_their_source);
    tcase_add_test(good, test_lr_schedule_from_config);
    tcase_add_test(good, test_betas_default_per_optimizer);
    tcase_add_test(good, test_full_yaml);
    tcase_add_test(good, test_deepspeed_json);
    tcase_add_test(good, test_deepspeed_zero3_json);
    tcase_add_test(good, test_deepspeed_values_off_or_asking);
    tcase_add_test(good, test_csv_monitor_keys);
    tcase_add_test(good, test_offload_optimizer_keys);
    tcase_add_test(good, test_no_validation_set);
    tcase_add_test(good, test_check_world_without_batch_size);
    tcase_add_test(good, test_parallel_keys);
    tcase_add_test(good, test_settings_with_no_effect);
    tcase_add_test(good, test_check_world_with_tensor_and_pipeline);
    tcase_add_test(good, test_overrides);
    tcase_add_test(good, test_null_means_default);
    tcase_add_test(good, test_round_trip);
    tcase_add_test(good, test_repository_configs);
    tcase_add_test(good, test_llama_defaults);
    tcase_add_test(good, test_hf_config);
    tcase_add_test(good, test_hf_config_mistral);
    tcase_add_test(good, test_hf_config_qwen2);
    tcase_add_test(good, test_hf_config_refusals);
    suite_add_tcase(s, good);

    TCase *bad = tcase_create("bad");
    tcase_add_loop_test(bad, test_bad_config, 0, (int)(sizeof bad_cases / sizeof bad_cases[0]));
    suite_add_tcase(s, bad);

    TCase *fault = tcase_create("fault");
    tcase_set_timeout(fault, 60);
    tcase_add_test(fault, test_truncated_yaml);
    tcase_add_test(fault, test_truncated_json);
    tcase_add_test(fault, test_allocation_failures);
    tcase_add_test(fault, test_allocation_failures_deepspeed);
    suite_add_tcase(s, fault);
    return s;
}

int main(void)
{
    return testutil_run_suite(config_suite(), 0);
}
