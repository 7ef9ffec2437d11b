/* tests/testutil.c — see testutil.h. */
#include "testutil.h"

#include "common/json.h"
#include <dirent.h>

#include <math.h>

#include <mpi.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

int testutil_run_suite(Suite *s, int is_mpi)
{
    int rank = 0, failed;
    if (is_mpi)
        MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    SRunner *sr = srunner_create(s);
    if (is_mpi)
        srunner_set_fork_status(sr, CK_NOFORK);
    srunner_run_all(sr, rank == 0 ? CK_NORMAL : CK_SILENT);
    failed = srunner_ntests_failed(sr);
    if (rank != 0 && failed)
        srunner_print(sr, CK_NORMAL); /* failures only a non-zero rank saw */
    srunner_free(sr);
    if (is_mpi) {
        int total = 0;
        MPI_Allreduce(&failed, &total, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
        failed = total;
    }
    return failed ? 1 : 0;
}

#define SLOT_BYTES 8192
#define RING       16

/* Three rings of static buffers, so that a helper's result survives many
 * calls of the others: one for source paths and temporary folders, one for
 * path_in, one for fmt. */
enum ring_kind { RING_PATHS, RING_PATH_IN, RING_FMT };

static char *ring_slot(enum ring_kind k)
{
    static char bufs[3][RING][SLOT_BYTES];
    static int next[3];
    return bufs[k][next[k]++ % RING];
}

static char *slot(void)
{
    return ring_slot(RING_PATHS);
}

const char *testutil_source_path(const char *rel)
{
    const char *root = getenv("ZT_SOURCE_DIR");
    char *b = slot();
    snprintf(b, SLOT_BYTES, "%s/%s", root ? root : ".", rel);
    return b;
}

const char *testutil_tmpdir(const char *tag)
{
    const char *t = getenv("ZT_TEST_TMPDIR");
    if (!t || !*t)
        t = getenv("TMPDIR");
    char *b = slot();
    snprintf(b, SLOT_BYTES, "%s/zt-%s-XXXXXX", t ? t : "/tmp", tag);
    if (!mkdtemp(b)) {
        perror("mkdtemp");
        abort();
    }
    return b;
}

void testutil_mark_handmade(const char *dir)
{
    static const char why[] = "files here were written by a test, not by zerotrain\n";
    testutil_write_file(testutil_path_in(dir, TESTUTIL_HANDMADE), why, sizeof why - 1);
}

const char *testutil_path_in(const char *dir, const char *name)
{
    char *b = ring_slot(RING_PATH_IN);
    int len = snprintf(b, SLOT_BYTES, "%s/%s", dir, name);
    ck_assert(len > 0 && len < SLOT_BYTES);
    return b;
}

const char *testutil_fmt(const char *f, ...)
{
    char *buf = ring_slot(RING_FMT);
    va_list ap;
    va_start(ap, f);
    vsnprintf(buf, SLOT_BYTES, f, ap);
    va_end(ap);
    return buf;
}

void testutil_write_file(const char *path, const void *bytes, size_t n)
{
    FILE *f = fopen(path, "wb");
    ck_assert_msg(f != NULL, "cannot create %s", path);
    ck_assert_uint_eq(fwrite(bytes, 1, n, f), n);
    ck_assert_int_eq(fclose(f), 0);
}

void testutil_write_repeated(const char *path, const char *text, int times)
{
    FILE *f = fopen(path, "wb");
    ck_assert_msg(f != NULL, "cannot create %s", path);
    for (int i = 0; i < times; i++)
        ck_assert_int_ge(fputs(text, f), 0);
    ck_assert_int_eq(fclose(f), 0);
}

unsigned char *testutil_read_file(const char *path, size_t *n)
{
    FILE *f = fopen(path, "rb");
    ck_assert_msg(f != NULL, "cannot open %s", path);
    struct stat sb;
    ck_assert_int_eq(fstat(fileno(f), &sb), 0);
    unsigned char *b = malloc((size_t)sb.st_size + 1);
    ck_assert_ptr_nonnull(b);
    ck_assert_uint_eq(fread(b, 1, (size_t)sb.st_size, f), (size_t)sb.st_size);
    fclose(f);
    *n = (size_t)sb.st_size;
    return b;
}

void testutil_put_le(unsigned char *p, uint64_t v, int nbytes)
{
    for (int i = 0; i < nbytes; i++)
        p[i] = (unsigned char)(v >> (8 * i));
}

uint64_t testutil_get_le(const unsigned char *p, int nbytes)
{
    uint64_t v = 0;
    for (int i = 0; i < nbytes; i++)
        v |= (uint64_t)p[i] << (8 * i);
    return v;
}

int testutil_run(const char *log, const char *fmt, ...)
{
    char cmd[8192], full[9000];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(cmd, sizeof cmd, fmt, ap);
    va_end(ap);
    snprintf(full, sizeof full, "%s >%s 2>&1", cmd, log);
    int st = system(full);
    ck_assert_msg(st != -1 && WIFEXITED(st), "command did not exit: %s", cmd);
    return WEXITSTATUS(st);
}

const char *testutil_slurp(const char *path)
{
    static char buf[1 << 20];
    FILE *f = fopen(path, "rb");
    ck_assert_msg(f != NULL, "cannot read %s", path);
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    buf[n] = '\0';
    fclose(f);
    return buf;
}

int testutil_entries(const char *dir)
{
    DIR *d = opendir(dir);
    ck_assert_msg(d != NULL, "cannot list %s", dir);
    int n = 0;
    for (struct dirent *e; (e = readdir(d));)
        n += strcmp(e->d_name, ".") != 0 && strcmp(e->d_name, "..") != 0;
    closedir(d);
    return n;
}

int testutil_count(const char *hay, const char *needle)
{
    int n = 0;
    for (const char *p = strstr(hay, needle); p; p = strstr(p + 1, needle))
        n++;
    return n;
}

int testutil_read_losses(const char *path, double *loss, int cap)
{
    FILE *f = fopen(path, "r");
    ck_assert_msg(f != NULL, "no metrics file %s", path);
    char line[4096];
    int n = 0;
    while (fgets(line, sizeof line, f) && n < cap) {
        const char *p = strstr(line, "\"loss\": ");
        if (p && !strstr(line, "val_loss"))
            loss[n++] = strtod(p + 8, NULL);
    }
    fclose(f);
    return n;
}

int testutil_train_micro(const char *dir, const char *name, int np, const char *extra)
{
    return testutil_run(testutil_path_in(dir, testutil_fmt("%s.log", name)),
                        "mpirun --oversubscribe -np %d %s train %s --quiet --no-progress "
                        "--set run.save_final=false --set run.output_dir=%s/%s "
                        "--metrics %s/%s.jsonl %s",
                        np, testutil_binary(), testutil_source_path("tests/data/micro.yaml"), dir,
                        name, dir, name, extra);
}

int testutil_micro_losses(const char *dir, const char *name, double *loss, int cap)
{
    return testutil_read_losses(testutil_path_in(dir, testutil_fmt("%s.jsonl", name)), loss, cap);
}

void testutil_train_micro_losses(const char *dir, const char *name, int np, const char *extra,
                                 double *loss, int n)
{
    ck_assert_msg(testutil_train_micro(dir, name, np, extra) == 0, "%s failed:\n%s", name,
                  testutil_slurp(testutil_path_in(dir, testutil_fmt("%s.log", name))));
    ck_assert_int_eq(testutil_micro_losses(dir, name, loss, n), n);
}

void testutil_assert_losses_close(const double *want, const double *got, int n, double tol,
                                  const char *what)
{
    for (int i = 0; i < n; i++)
        ck_assert_msg(fabs(got[i] - want[i]) <= tol * fabs(want[i]),
                      "%s, step %d: loss %.9g, expected %.9g", what, i + 1, got[i], want[i]);
}

void testutil_assert_computes_bf16(const char *log, const char *what)
{
    if (strstr(log, "computing in fp32 (bf16 stored only: ") &&
        strstr(log, "has no bf16 GEMM for this CPU"))
        return;
    ck_assert_msg(strstr(log, "computing in bf16,") != NULL, "%s: not computing in bf16:\n%s", what,
                  log);
}

void testutil_resume_matches(const char *dir, const char *from, const char *name, int np,
                             const char *args, const double *full)
{
    double part[5];
    ck_assert_msg(testutil_train_micro(dir, name, np,
                                       testutil_fmt("%s --set run.steps=10 --set "
                                                    "run.resume=%s/%s-ck/step-00000005",
                                                    args, dir, from)) == 0,
                  "%s failed:\n%s", name,
                  testutil_slurp(testutil_path_in(dir, testutil_fmt("%s.log", name))));
    ck_assert_int_eq(testutil_micro_losses(dir, name, part, 5), 5);
    testutil_assert_losses_close(full + 5, part, 5, 1e-5,
                                 testutil_fmt("%s resumed from %s", name, from));
}

double testutil_val_loss(const char *path)
{
    const char *json = testutil_slurp(path);
    const char *at = strstr(json, "\"val_loss\": ");
    double loss = NAN;
    ck_assert_msg(at && sscanf(at + strlen("\"val_loss\": "), "%lf", &loss) == 1, "%s: %s", path,
                  json);
    return loss;
}

double testutil_torch_folder_loss(const char *log, const char *folder, const char *data,
                                  int seq_len)
{
    if (testutil_run(log, "/usr/bin/python3 -c 'import torch'") != 0) {
        fprintf(stderr, "no /usr/bin/python3 with torch: %s is not loaded in PyTorch\n", folder);
        return NAN;
    }
    ck_assert_msg(testutil_run(log, "/usr/bin/python3 %s %s %s %d",
                               testutil_source_path("scripts/reference/hf_folder_loss.py"), folder,
                               data, seq_len) == 0,
                  "%s", testutil_slurp(log));
    double loss = NAN;
    ck_assert_msg(sscanf(testutil_slurp(log), "loss %lf", &loss) == 1, "%s", testutil_slurp(log));
    return loss;
}

/* The program whose path ctest puts in the environment variable `name`. */
static const char *binary_from_env(const char *name)
{
    const char *b = getenv(name);
    ck_assert_msg(b != NULL, "%s not set (run through ctest)", name);
    return b;
}

const char *testutil_binary(void)
{
    return binary_from_env("ZT_BINARY");
}

const char *testutil_faulty_binary(void)
{
    return binary_from_env("ZT_FAULTY_BINARY");
}

TCase *testutil_tcase(Suite *s, const char *name, int timeout_s)
{
    TCase *tc = tcase_create(name);
    tcase_set_timeout(tc, timeout_s);
    suite_add_tcase(s, tc);
    return tc;
}

pid_t testutil_find_rank(const char *marker)
{
    return testutil_find_world_rank(marker, -1);
}

/* OMPI_COMM_WORLD_RANK from a process's environment; -1 when absent. */
static int world_rank_of(long pid)
{
    FILE *f = fopen(testutil_fmt("/proc/%ld/environ", pid), "r");
    char var[4096];
    int rank = -1;
    size_t k = 0;
    for (int c; f && (c = fgetc(f)) != EOF;) {
        if (c != '\0' && k + 1 < sizeof var) {
            var[k++] = (char)c;
            continue;
        }
        var[k] = '\0';
        k = 0;
        if (strncmp(var, "OMPI_COMM_WORLD_RANK=", 21) == 0)
            rank = atoi(var + 21);
    }
    if (f)
        fclose(f);
    return rank;
}

pid_t testutil_find_world_rank(const char *marker, int rank)
{
    char cmd[1024], comm[64];
    snprintf(cmd, sizeof cmd, "pgrep -f -- '%s'", marker);
    FILE *p = popen(cmd, "r");
    ck_assert(p != NULL);
    long pid;
    pid_t found = 0;
    while (!found && fscanf(p, "%ld", &pid) == 1) {
        FILE *f = fopen(testutil_fmt("/proc/%ld/comm", pid), "r");
        if (f && fgets(comm, sizeof comm, f) && strncmp(comm, "zerotrain", 9) == 0 &&
            (rank < 0 || world_rank_of(pid) == rank))
            found = (pid_t)pid;
        if (f)
            fclose(f);
    }
    pclose(p);
    return found;
}

static int count_lines(const char *path)
{
    FILE *f = fopen(path, "r");
    int lines = 0;
    for (int c; f && (c = fgetc(f)) != EOF;)
        lines += c == '\n';
    if (f)
        fclose(f);
    return lines;
}

pid_t testutil_wait_for_rank(const char *metrics, int lines, const char *marker)
{
    pid_t rank = 0;
    for (int tries = 0; tries < 600 && !rank; tries++) {
        nanosleep(&(struct timespec){0, 100000000}, NULL);
        if (count_lines(metrics) >= lines)
            rank = testutil_find_rank(marker);
    }
    return rank;
}

/* The folder scripts/gpt2_vocab.sh fills; fails the test when it is not
 * there, since scripts/test.sh fetches it before the tests run. */
const char *testutil_gpt2_vocab_dir(void)
{
    const char *env = getenv("ZT_GPT2_VOCAB_DIR");
    const char *xdg = getenv("XDG_CACHE_HOME"), *home = getenv("HOME");
    const char *dir = env && env[0]   ? env
                      : xdg && xdg[0] ? testutil_fmt("%s/zerotrain/gpt2", xdg)
                                      : testutil_fmt("%s/.cache/zerotrain/gpt2", home ? home : "");
    ck_assert_msg(access(testutil_path_in(dir, "encoder.json"), R_OK) == 0 &&
                      access(testutil_path_in(dir, "vocab.bpe"), R_OK) == 0,
                  "GPT-2's vocabulary is not in %s: run scripts/gpt2_vocab.sh [DIR] first "
                  "(scripts/test.sh does), and set ZT_GPT2_VOCAB_DIR=DIR for another folder",
                  dir);
    return dir;
}

const char *testutil_tokenizers_root(void)
{
    const char *env = getenv("ZT_TOKENIZERS_DIR");
    const char *xdg = getenv("XDG_CACHE_HOME"), *home = getenv("HOME");
    return env && env[0]   ? env
           : xdg && xdg[0] ? testutil_fmt("%s/zerotrain/tokenizers", xdg)
                           : testutil_fmt("%s/.cache/zerotrain/tokenizers", home ? home : "");
}

const char *testutil_tokenizer_dir(const char *name, const char *file)
{
    const char *dir = testutil_path_in(testutil_tokenizers_root(), name);
    ck_assert_msg(access(testutil_path_in(dir, file), R_OK) == 0,
                  "%s's vocabulary is not in %s: run scripts/tokenizers.sh all [--dir ROOT] first "
                  "(scripts/test.sh does), and set ZT_TOKENIZERS_DIR=ROOT for another folder",
                  name, dir);
    return dir;
}

void testutil_load_json(const char *path, struct json_value *out)
{
    size_t n = 0;
    unsigned char *text = testutil_read_file(path, &n);
    ck_assert_msg(text != NULL, "cannot read %s", path);
    const struct json_source src = {.path = path, .code = ZT_ERR_DATA, .max_depth = 16};
    const zt_status st = json_parse(&src, (const char *)text, n, out);
    free(text);
    ck_assert_msg(st == ZT_OK, "%s: %s", path, zt_error_message());
}

const struct json_value *testutil_json_member(const struct json_value *obj, const char *key)
{
    const struct json_value *v = json_object_get(obj, key, NULL);
    ck_assert_msg(v != NULL, "no member '%s'", key);
    return v;
}

uint64_t testutil_json_count(const struct json_value *obj, const char *key)
{
    const struct json_value *v = testutil_json_member(obj, key);
    ck_assert_msg(v->type == JSON_INT && !v->negative, "'%s' is not a count", key);
    return v->magnitude;
}
