/* tests/testutil.h — shared helpers for the Check suites. */
#ifndef ZT_TESTUTIL_H
#define ZT_TESTUTIL_H

#include <check.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

struct json_value; /* common/json.h */

/* Runs a suite and returns the process exit status (0 all passed, 1 some
 * failed). For MPI suites call after MPI_Init: only rank 0 prints the
 * summary, and the failure count is summed over ranks so that every rank
 * agrees on the status. */
int testutil_run_suite(Suite *s, int is_mpi);

/* Absolute path of a file in the source tree ("configs/tiny.yaml"), from the
 * ZT_SOURCE_DIR environment variable that CTest sets. Static buffer per call
 * slot of a ring of 16 shared with testutil_tmpdir: valid until the 16th
 * next call of either. */
const char *testutil_source_path(const char *rel);

/* A fresh empty directory under $ZT_TEST_TMPDIR (CTest sets it to the build
 * tree's tests/tmp, emptied before each ctest run), else $TMPDIR, else /tmp;
 * static buffer as above. */
const char *testutil_tmpdir(const char *tag);

/* Every output file zerotrain writes under ZT_TEST_TMPDIR is checked after
 * the suites have run (test_output_json.c): metrics and timelines line by
 * line, reports whole. A test that writes such a file by hand (a fixture,
 * a deliberately broken copy) marks its folder with this file, and the
 * check leaves that folder and everything below it alone. */
#define TESTUTIL_HANDMADE ".handmade"
void testutil_mark_handmade(const char *dir);

/* "DIR/NAME" in a static buffer of its own ring of 16; fails the test if it
 * does not fit. */
const char *testutil_path_in(const char *dir, const char *name);

/* printf into a static buffer of its own ring of 16: valid until the 16th
 * next call. */
const char *testutil_fmt(const char *f, ...) __attribute__((format(printf, 1, 2)));

/* Creates or replaces path with exactly n bytes; fails the test otherwise. */
void testutil_write_file(const char *path, const void *bytes, size_t n);

/* Creates or replaces path with `text` written `times` times over. */
void testutil_write_repeated(const char *path, const char *text, int times);

/* The whole file in a new buffer (caller frees) with one spare byte after
 * the *n bytes read; fails the test if it cannot be read. */
unsigned char *testutil_read_file(const char *path, size_t *n);

struct json_value;
/* Parses the JSON file at path into *out (freed with json_free); fails the
 * test, naming the file and the byte, when it is missing or not JSON. */
void testutil_load_json(const char *path, struct json_value *out);

/* Little-endian packing of the low nbytes (1..8) of v, and its inverse,
 * written out here so that format checks do not trust the modules' own. */
void testutil_put_le(unsigned char *p, uint64_t v, int nbytes);
uint64_t testutil_get_le(const unsigned char *p, int nbytes);

/* Runs a shell command with stdout and stderr to the file `log`; returns
 * its exit status (a test failure if it did not exit normally). */
int testutil_run(const char *log, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Contents of a text file as a string (static buffer, 1 MiB). */
const char *testutil_slurp(const char *path);

/* Entries of a folder, "." and ".." aside (a test failure if it cannot
 * be listed). */
int testutil_entries(const char *dir);

/* How many times needle occurs in hay. */
int testutil_count(const char *hay, const char *needle);

/* The "loss" of every step record of a metrics file, at most cap; returns
 * how many. */
int testutil_read_losses(const char *path, double *loss, int cap);

/* Trains tests/data/micro.yaml with the zerotrain binary under mpirun:
 * `np` ranks, quiet, outputs in dir/name, metrics in dir/name.jsonl, log
 * in dir/name.log, then the extra arguments; returns the exit status.
 * Without the final save (run.save_final false, which the log notes):
 * test_outputs and test_generate check it, and here every run would pay
 * for it; extra's --set run.save_final=true turns it on. */
int testutil_train_micro(const char *dir, const char *name, int np, const char *extra);

/* The losses of dir/name.jsonl (written by testutil_train_micro), at most
 * cap; returns how many. */
int testutil_micro_losses(const char *dir, const char *name, double *loss, int cap);

/* testutil_train_micro that must succeed (else the test fails with its
 * log) and log n steps, whose losses it returns in loss[n]. */
void testutil_train_micro_losses(const char *dir, const char *name, int np, const char *extra,
                                 double *loss, int n);

/* Fails the test unless |got[i] - want[i]| <= tol |want[i]| for i < n,
 * naming `what` and the step. */
void testutil_assert_losses_close(const double *want, const double *got, int n, double tol,
                                  const char *what);

/* Fails the test unless a bf16 run's log says it computes in bf16, or, on
 * a CPU without a bf16 GEMM (AVX2 only), says it computes in fp32 with
 * bf16 storage and why: the suites pass on every CPU of the machine kind
 * and still check which path the run took. */
void testutil_assert_computes_bf16(const char *log, const char *what);

/* obj's member `key`, failing the test where it has none. */
const struct json_value *testutil_json_member(const struct json_value *obj, const char *key);

/* obj's member `key` as a non-negative integer, failing the test where it
 * is missing or not one. */
uint64_t testutil_json_count(const struct json_value *obj, const char *key);

/* Runs `name` (np ranks, args) from dir/from-ck/step-00000005, the
 * checkpoint of a 10-step testutil_train_micro run saving every 5, to
 * step 10, and fails the test unless its 5 losses are the uninterrupted
 * run's last 5 (full[5..10)) within 1e-5. */
void testutil_resume_matches(const char *dir, const char *from, const char *name, int np,
                             const char *args, const double *full);

/* The "val_loss" of the metrics file at path (what `zerotrain eval
 * --metrics` writes); fails the test, showing the file, without one. */
double testutil_val_loss(const char *path);

/* The loss PyTorch computes from a save_pretrained-style folder
 * (scripts/reference/hf_folder_loss.py: the byte file `data` cut into
 * windows of seq_len), its output in `log`; NAN, said on stderr, when
 * /usr/bin/python3 has no torch. Fails the test if the script fails. */
double testutil_torch_folder_loss(const char *log, const char *folder, const char *data,
                                  int seq_len);

/* The folder holding GPT-2's vocabulary (scripts/gpt2_vocab.sh fills it):
 * $ZT_GPT2_VOCAB_DIR, else the script's default cache folder; fails the
 * test when it is not there, since scripts/test.sh fetches it before the
 * tests run. Static buffer as testutil_fmt's. */
const char *testutil_gpt2_vocab_dir(void);

/* The folder scripts/tokenizers.sh fills: $ZT_TOKENIZERS_DIR, else the
 * script's default cache folder. Static buffer as testutil_fmt's. */
const char *testutil_tokenizers_root(void);

/* ROOT/NAME (a reference vocabulary: llama3, llama2, mistral, cl100k,
 * o200k), checked to hold `file`; fails the test saying how to fetch it
 * when it does not. Static buffer as testutil_path_in's. */
const char *testutil_tokenizer_dir(const char *name, const char *file);

/* A new test case called `name` added to s, with a timeout of
 * `timeout_s` seconds (the sanitizer build runs about 10x slower than the
 * release one: leave room for it). */
TCase *testutil_tcase(Suite *s, const char *name, int timeout_s);

/* The pid of one zerotrain rank (not mpirun) whose command line contains
 * marker, or 0 if none runs. */
pid_t testutil_find_rank(const char *marker);

/* Waits (up to 60 s) until the metrics file at `metrics` holds at least
 * `lines` lines, then returns testutil_find_rank(marker); 0 if that never
 * happened. For signalling a rank of a run in progress. */
pid_t testutil_wait_for_rank(const char *metrics, int lines, const char *marker);
/* The pid of world rank `rank` (OMPI_COMM_WORLD_RANK in its environment;
 * any rank when negative) among the zerotrain processes whose command line
 * contains `marker`; 0 when there is none. */
pid_t testutil_find_world_rank(const char *marker, int rank);

/* The zerotrain binary (ZT_BINARY, set by CTest). */
const char *testutil_binary(void);
/* zerotrain with checkpoint fault injection (tests/zerotrain_faulty.c;
 * ZT_FAULTY_BINARY, set by CTest). */
const char *testutil_faulty_binary(void);

#endif
