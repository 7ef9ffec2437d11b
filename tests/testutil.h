/* tests/testutil.h — shared helpers for the Check suites. */
#ifndef ZT_TESTUTIL_H
#define ZT_TESTUTIL_H

#include <check.h>

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

#endif
