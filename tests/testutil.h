/* tests/testutil.h — shared helpers for the Check suites. */
#ifndef ZT_TESTUTIL_H
#define ZT_TESTUTIL_H

#include <check.h>
#include <stddef.h>
#include <stdint.h>

/* Runs a suite and returns the process exit status (0 all passed, 1 some
 * failed). For MPI suites call after MPI_Init: only rank 0 prints the
 * summary, and the failure count is summed over ranks so that every rank
 * agrees on the status. */
int testutil_run_suite(Suite *s, int is_mpi);

/* Absolute path of a file in the source tree ("configs/tiny.yaml"), from the
 * ZT_SOURCE_DIR environment variable that CTest sets. Static buffer per call
 * slot: valid until the 8th next call. */
const char *testutil_source_path(const char *rel);

/* A fresh empty directory under $TMPDIR (or /tmp); static buffer as above. */
const char *testutil_tmpdir(const char *tag);

/* "DIR/NAME" in a static buffer of its own ring: valid until the 8th next
 * call. Fails the test if it does not fit in 4096 bytes. */
const char *testutil_path_in(const char *dir, const char *name);

/* printf into a static buffer (valid until the next call): the expected
 * text of an error message. */
const char *testutil_fmt(const char *f, ...) __attribute__((format(printf, 1, 2)));

/* Creates or replaces path with exactly n bytes; fails the test otherwise. */
void testutil_write_file(const char *path, const void *bytes, size_t n);

/* The whole file in a new buffer (caller frees) with one spare byte after
 * the *n bytes read; fails the test if it cannot be read. */
unsigned char *testutil_read_file(const char *path, size_t *n);

/* Little-endian packing of the low nbytes (1..8) of v, and its inverse,
 * written out here so that format checks do not trust the modules' own. */
void testutil_put_le(unsigned char *p, uint64_t v, int nbytes);
uint64_t testutil_get_le(const unsigned char *p, int nbytes);

#endif
