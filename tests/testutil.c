/* tests/testutil.c — see testutil.h. */
#include "testutil.h"

#include <mpi.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
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

static char *slot(void)
{
    static char bufs[8][4096];
    static int next;
    return bufs[next++ % 8];
}

const char *testutil_source_path(const char *rel)
{
    const char *root = getenv("ZT_SOURCE_DIR");
    char *b = slot();
    snprintf(b, 4096, "%s/%s", root ? root : ".", rel);
    return b;
}

const char *testutil_tmpdir(const char *tag)
{
    const char *t = getenv("TMPDIR");
    char *b = slot();
    snprintf(b, 4096, "%s/zt-%s-XXXXXX", t ? t : "/tmp", tag);
    if (!mkdtemp(b)) {
        perror("mkdtemp");
        abort();
    }
    return b;
}

const char *testutil_path_in(const char *dir, const char *name)
{
    static char bufs[8][4096];
    static int next;
    char *b = bufs[next++ % 8];
    int len = snprintf(b, 4096, "%s/%s", dir, name);
    ck_assert(len > 0 && len < 4096);
    return b;
}

const char *testutil_fmt(const char *f, ...)
{
    static char buf[8192];
    va_list ap;
    va_start(ap, f);
    vsnprintf(buf, sizeof buf, f, ap);
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
