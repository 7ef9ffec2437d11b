/* tests/test_machine.c — machine description files: the repository's
 * machines, lookup by name, a table of bad files with their exact messages,
 * every byte prefix of a good file, and the write/load round trip.
 *
 * Bad files are made from one good text by a single edit (find, replace),
 * so each case shows only what is wrong with it; messages are compared
 * whole, with FILE standing for the file's path.
 */
#include <check.h>
#include <dirent.h>
#include <float.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../config/machine.h"
#include "testutil.h"

#define GIB (1ull << 30)

static const char good_text[] = "# a test machine\n"            /* line 1 */
                                "name: t\n"                     /* 2 */
                                "device_memory: 80GiB\n"        /* 3 */
                                "devices_per_node: 8\n"         /* 4 */
                                "compute:\n"                    /* 5 */
                                "  matmul_flops:\n"             /* 6 */
                                "    fp32: 51.2e12\n"           /* 7 */
                                "    bf16: 989e12\n"            /* 8 */
                                "    fp16: 989e12\n"            /* 9 */
                                "  memory_bandwidth: 3.35e12\n" /* 10 */
                                "links:\n"                      /* 11 */
                                "  intra_node:\n"               /* 12 */
                                "    bandwidth: 450e9\n"        /* 13 */
                                "    latency: 3e-6\n"           /* 14 */
                                "  inter_node:\n"               /* 15 */
                                "    bandwidth: 50e9\n"         /* 16 */
                                "    latency: 5e-6\n";          /* 17 */

/* ---- helpers ---------------------------------------------------------------- */

/* `text` with every "FILE" replaced by `path`, in a static buffer. */
static const char *with_file(const char *text, const char *path)
{
    static char out[8192];
    size_t used = 0;
    for (const char *p = text; *p;) {
        const char *hit = strstr(p, "FILE");
        size_t n = hit ? (size_t)(hit - p) : strlen(p);
        ck_assert_uint_lt(used + n + strlen(path), sizeof out);
        memcpy(out + used, p, n);
        used += n;
        p += n;
        if (hit) {
            memcpy(out + used, path, strlen(path));
            used += strlen(path);
            p += 4;
        }
    }
    out[used] = '\0';
    return out;
}

/* good_text with its one occurrence of `find` replaced, in a static buffer. */
static const char *edited(const char *find, const char *replace)
{
    static char out[8192];
    const char *hit = strstr(good_text, find);
    ck_assert_msg(hit != NULL, "'%s' is not in the good text", find);
    ck_assert_ptr_null(strstr(hit + 1, find));
    snprintf(out, sizeof out, "%.*s%s%s", (int)(hit - good_text), good_text, replace,
             hit + strlen(find));
    return out;
}

static void write_text(const char *path, const char *text)
{
    testutil_write_file(path, text, strlen(text));
}

static int is_zeroed(const struct machine *m)
{
    static const struct machine zero;
    return memcmp(m, &zero, sizeof zero) == 0;
}

static void assert_positive(const struct machine *m)
{
    ck_assert_msg(m->name[0] != '\0', "%s: empty name", m->path);
    ck_assert_uint_gt(m->device_memory, 0);
    ck_assert_int_ge(m->devices_per_node, 1);
    ck_assert_int_ge(m->cores, 0); /* 0: not stated */
    for (int p = MACHINE_FP32; p <= MACHINE_FP16; p++)
        ck_assert_double_gt(m->matmul_flops[p], 0);
    ck_assert_double_gt(m->memory_bandwidth, 0);
    ck_assert_double_gt(m->intra_node.bandwidth, 0);
    ck_assert_double_gt(m->intra_node.latency, 0);
    ck_assert_double_gt(m->inter_node.bandwidth, 0);
    ck_assert_double_gt(m->inter_node.latency, 0);
}

/* Every field but path, exactly. */
static void assert_same_machine(const struct machine *a, const struct machine *b)
{
    ck_assert_str_eq(a->name, b->name);
    ck_assert_uint_eq(a->device_memory, b->device_memory);
    ck_assert_int_eq(a->devices_per_node, b->devices_per_node);
    ck_assert_int_eq(a->cores, b->cores);
    for (int p = MACHINE_FP32; p <= MACHINE_FP16; p++) {
        ck_assert_double_eq(a->matmul_flops[p], b->matmul_flops[p]);
        ck_assert_double_eq(a->peak_matmul_flops[p], b->peak_matmul_flops[p]);
    }
    ck_assert_double_eq(a->memory_bandwidth, b->memory_bandwidth);
    ck_assert_double_eq(a->intra_node.bandwidth, b->intra_node.bandwidth);
    ck_assert_double_eq(a->intra_node.latency, b->intra_node.latency);
    ck_assert_double_eq(a->inter_node.bandwidth, b->inter_node.bandwidth);
    ck_assert_double_eq(a->inter_node.latency, b->inter_node.latency);
    ck_assert_int_eq(a->gemm_tile, b->gemm_tile);
    ck_assert_double_eq(a->nvme_read_bandwidth, b->nvme_read_bandwidth);
    ck_assert_double_eq(a->nvme_write_bandwidth, b->nvme_write_bandwidth);
    for (int p = MACHINE_FP32; p <= MACHINE_FP16; p++) {
        ck_assert_mem_eq(&a->intra_node.busbw[p], &b->intra_node.busbw[p],
                         sizeof a->intra_node.busbw[p]);
        ck_assert_mem_eq(&a->inter_node.busbw[p], &b->inter_node.busbw[p],
                         sizeof a->inter_node.busbw[p]);
    }
    for (int p = MACHINE_FP32; p <= MACHINE_FP16; p++) {
        const struct machine_gemm_table *x = &a->gemm_rates[p], *y = &b->gemm_rates[p];
        ck_assert_int_eq(x->n, y->n);
        for (int i = 0; i < x->n; i++) {
            ck_assert_int_eq(x->row[i].threads, y->row[i].threads);
            ck_assert_int_eq(x->row[i].rows, y->row[i].rows);
            ck_assert_int_eq(x->row[i].in, y->row[i].in);
            ck_assert_int_eq(x->row[i].out, y->row[i].out);
            for (int k = 0; k < MACHINE_PRODUCTS; k++)
                ck_assert_double_eq(x->row[i].flops[k], y->row[i].flops[k]);
        }
    }
}

static void load_ok(const char *name_or_path, struct machine *m)
{
    zt_status s = machine_load(name_or_path, m);
    ck_assert_msg(s == ZT_OK, "%s: %s: %s", name_or_path, zt_status_str(s), zt_error_message());
}

/* machine_load must fail with ZT_ERR_CONFIG, exactly `message`, and a
 * zeroed struct. */
static void load_fails(const char *name_or_path, const char *message)
{
    struct machine m;
    memset(&m, 0xab, sizeof m);
    zt_status s = machine_load(name_or_path, &m);
    ck_assert_msg(s == ZT_ERR_CONFIG, "%s: status %s (%s)", name_or_path, zt_status_str(s),
                  zt_error_message());
    ck_assert_int_eq(zt_status_exit_code(s), 2);
    ck_assert_str_eq(zt_error_message(), message);
    ck_assert(is_zeroed(&m));
}

/* ---- the repository's machines ---------------------------------------------------- */

START_TEST(test_repository_machines_load)
{
    char dir[4096];
    snprintf(dir, sizeof dir, "%s", testutil_source_path("configs/machines"));
    DIR *d = opendir(dir);
    ck_assert_msg(d != NULL, "cannot list %s (is ZT_SOURCE_DIR set?)", dir);
    int n = 0;
    for (struct dirent *e; (e = readdir(d)) != NULL;) {
        size_t len = strlen(e->d_name);
        if (len <= 5 || strcmp(e->d_name + len - 5, ".yaml") != 0)
            continue;
        struct machine m;
        load_ok(testutil_path_in(dir, e->d_name), &m);
        assert_positive(&m);
        ck_assert_str_eq(m.path, testutil_path_in(dir, e->d_name));
        /* Found by name, a machine's name is its file's. */
        ck_assert_msg(strncmp(m.name, e->d_name, len - 5) == 0 && m.name[len - 5] == '\0',
                      "%s has name '%s'", e->d_name, m.name);
        n++;
    }
    closedir(d);
    ck_assert_int_ge(n, 3);
}
END_TEST

START_TEST(test_repository_machine_values)
{
    struct machine h, a80, a40;
    unsetenv("ZT_MACHINES_DIR"); /* the compiled-in folder: the repository's */
    load_ok("h100-sxm", &h);
    load_ok("a100-80gb", &a80);
    load_ok("a100-40gb", &a40);
    ck_assert_str_eq(h.name, "h100-sxm");
    ck_assert_uint_eq(h.device_memory, 85899345920ull);
    ck_assert_int_eq(h.devices_per_node, 8);
    ck_assert_int_eq(h.cores, 112);
    ck_assert_int_eq(a80.cores, 128);
    ck_assert_uint_eq(a80.device_memory, 80 * GIB);
    ck_assert_uint_eq(a40.device_memory, 40 * GIB);
    /* Sustained, not peak: below the datasheet figures, which the peaks
     * state (dense: half the sparse figure). */
    ck_assert_double_lt(h.matmul_flops[MACHINE_BF16], 989.4e12);
    ck_assert_double_lt(h.matmul_flops[MACHINE_FP32], 67e12);
    ck_assert_double_eq(h.peak_matmul_flops[MACHINE_BF16], 989.4e12);
    ck_assert_double_eq(h.peak_matmul_flops[MACHINE_FP32], 67e12);
    ck_assert_double_eq(a80.peak_matmul_flops[MACHINE_BF16], 312e12);
    ck_assert_double_eq(a40.peak_matmul_flops[MACHINE_FP16], 312e12);
    ck_assert_double_lt(h.memory_bandwidth, 3.35e12);
    ck_assert_double_lt(h.intra_node.bandwidth, 450e9);
    ck_assert_double_lt(h.inter_node.bandwidth, 50e9);
    /* The orderings the planner relies on. */
    ck_assert_double_gt(h.matmul_flops[MACHINE_BF16], a80.matmul_flops[MACHINE_BF16]);
    ck_assert_double_lt(h.matmul_flops[MACHINE_FP32], h.matmul_flops[MACHINE_BF16]);
    ck_assert_double_eq(a80.matmul_flops[MACHINE_BF16], a40.matmul_flops[MACHINE_BF16]);
    ck_assert_double_gt(a80.memory_bandwidth, a40.memory_bandwidth);
    ck_assert_double_gt(h.intra_node.bandwidth, h.inter_node.bandwidth);
    ck_assert_double_gt(a80.intra_node.bandwidth, a80.inter_node.bandwidth);
}
END_TEST

/* ---- lookup by name ---------------------------------------------------------------- */

START_TEST(test_lookup_by_name)
{
    char dir[4096];
    snprintf(dir, sizeof dir, "%s", testutil_tmpdir("machines"));
    write_text(testutil_path_in(dir, "m1.yaml"), edited("name: t", "name: m1"));
    write_text(testutil_path_in(dir, "zz.yaml"), good_text);
    write_text(testutil_path_in(dir, "b.yaml"), good_text);
    write_text(testutil_path_in(dir, "notes.txt"), "not a machine\n");
    write_text(testutil_path_in(dir, ".hidden.yaml"), good_text);
    ck_assert_int_eq(setenv("ZT_MACHINES_DIR", dir, 1), 0);

    struct machine m;
    load_ok("m1", &m);
    ck_assert_str_eq(m.name, "m1");
    ck_assert_str_eq(m.path, testutil_path_in(dir, "m1.yaml"));
    ck_assert_uint_eq(m.device_memory, 80 * GIB);
    ck_assert_int_eq(m.devices_per_node, 8);
    ck_assert_double_eq(m.matmul_flops[MACHINE_FP32], 51.2e12);
    ck_assert_double_eq(m.matmul_flops[MACHINE_BF16], 989e12);
    ck_assert_double_eq(m.matmul_flops[MACHINE_FP16], 989e12);
    ck_assert_double_eq(m.memory_bandwidth, 3.35e12);
    ck_assert_double_eq(m.intra_node.bandwidth, 450e9);
    ck_assert_double_eq(m.intra_node.latency, 3e-6);
    ck_assert_double_eq(m.inter_node.bandwidth, 50e9);
    ck_assert_double_eq(m.inter_node.latency, 5e-6);

    /* A path is read as given, wherever the folder points. */
    load_ok(testutil_path_in(dir, "b.yaml"), &m);
    ck_assert_str_eq(m.name, "t");

    load_fails("x", testutil_fmt("no machine 'x' in %s (there are: b, m1, zz)", dir));
    /* "notes" is a NAME, not a path: notes.txt is not a machine. */
    load_fails("notes", testutil_fmt("no machine 'notes' in %s (there are: b, m1, zz)", dir));
    /* Ending in .yaml makes it a path, relative to the working folder. */
    load_fails("no-such-m1.yaml",
               "cannot open the configuration file no-such-m1.yaml: No such file or directory");
    load_fails("", "machine_load: empty machine name");

    char empty[4096];
    snprintf(empty, sizeof empty, "%s", testutil_tmpdir("machines-empty"));
    ck_assert_int_eq(setenv("ZT_MACHINES_DIR", empty, 1), 0);
    load_fails("m1", testutil_fmt("no machine 'm1' in %s (there are none)", empty));

    const char *gone = testutil_path_in(dir, "no-such-folder");
    ck_assert_int_eq(setenv("ZT_MACHINES_DIR", gone, 1), 0);
    load_fails("m1", testutil_fmt("no machine 'm1': cannot list the machines folder %s: No such "
                                  "file or directory",
                                  gone));
    unsetenv("ZT_MACHINES_DIR");
}
END_TEST

START_TEST(test_empty_env_means_default_folder)
{
    ck_assert_int_eq(setenv("ZT_MACHINES_DIR", "", 1), 0);
    struct machine m;
    load_ok("h100-sxm", &m);
    ck_assert_str_eq(m.name, "h100-sxm");
    unsetenv("ZT_MACHINES_DIR");
}
END_TEST

/* ---- bad files ---------------------------------------------------------------------- */

struct bad_case {
    const char *find;    /* edited in good_text; NULL: `replace` is the whole file */
    const char *replace; /* what it becomes */
    const char *message; /* the whole message; FILE stands for the path */
};

static const struct bad_case bad_cases[] = {
    /* keys */
    {"devices_per_node: 8\n", "devices_per_node: 8\ngpu_mem: 80GiB\n",
     "FILE:5:1: unknown key 'gpu_mem' (expected name, device_memory, devices_per_node, cores, "
     "compute, nvme, links)"},
    {"    bf16: 989e12", "    bf17: 989e12",
     "FILE:8:5: unknown key 'bf17' in compute.matmul_flops (expected fp32, bf16, fp16)"},
    {"  inter_node:", "  inter_nodes:",
     "FILE:15:3: unknown key 'inter_nodes' in links (expected intra_node, inter_node)"},
    {"    latency: 5e-6\n", "", "FILE: missing key links.inter_node.latency"},
    {"    fp32: 51.2e12\n", "", "FILE: missing key compute.matmul_flops.fp32"},
    {"name: t\n", "", "FILE: missing key name"},
    {"links:\n  intra_node:\n    bandwidth: 450e9\n    latency: 3e-6\n  inter_node:\n    "
     "bandwidth: 50e9\n    latency: 5e-6\n",
     "", "FILE: missing key links"},
    /* sections */
    {"  intra_node:\n    bandwidth: 450e9\n    latency: 3e-6\n", "  intra_node: 3\n",
     "FILE:12:15: links.intra_node: expected a mapping, got '3'"},
    {"  intra_node:\n    bandwidth: 450e9\n    latency: 3e-6\n", "  intra_node:\n",
     "FILE:12:14: links.intra_node: expected a mapping, got null"},
    {"  intra_node:\n    bandwidth: 450e9\n    latency: 3e-6\n", "  intra_node: [1, 2]\n",
     "FILE:12:15: links.intra_node: expected a mapping, got a list"},
    /* numbers */
    {"bf16: 989e12", "bf16: fast",
     "FILE:8:11: compute.matmul_flops.bf16: expected a positive number, got 'fast'"},
    {"latency: 3e-6", "latency: -3e-6",
     "FILE:14:14: links.intra_node.latency: expected a positive number, got '-3e-6'"},
    {"memory_bandwidth: 3.35e12", "memory_bandwidth: 0",
     "FILE:10:21: compute.memory_bandwidth: expected a positive number, got '0'"},
    {"bandwidth: 50e9", "bandwidth: inf",
     "FILE:16:16: links.inter_node.bandwidth: expected a positive number, got 'inf'"},
    {"bandwidth: 50e9", "bandwidth: nan",
     "FILE:16:16: links.inter_node.bandwidth: expected a positive number, got 'nan'"},
    {"bandwidth: 50e9", "bandwidth: 1e999",
     "FILE:16:16: links.inter_node.bandwidth: expected a positive number, got '1e999'"},
    {"bandwidth: 50e9", "bandwidth: 0x10",
     "FILE:16:16: links.inter_node.bandwidth: expected a positive number, got '0x10'"},
    {"bandwidth: 450e9", "bandwidth: 450GB/s",
     "FILE:13:16: links.intra_node.bandwidth: expected a positive number, got '450GB/s'"},
    {"bandwidth: 450e9", "bandwidth: '450e9'",
     "FILE:13:16: links.intra_node.bandwidth: expected a positive number, got the string "
     "'450e9'"},
    {"bandwidth: 450e9", "bandwidth: 4.5.0",
     "FILE:13:16: links.intra_node.bandwidth: expected a positive number, got '4.5.0'"},
    {"fp16: 989e12", "fp16:",
     "FILE:9:10: compute.matmul_flops.fp16: expected a positive number, "
     "got null"},
    /* devices_per_node */
    {"devices_per_node: 8", "devices_per_node: 0",
     "FILE:4:19: devices_per_node: expected an integer >= 1, got '0'"},
    {"devices_per_node: 8", "devices_per_node: -8",
     "FILE:4:19: devices_per_node: expected an integer >= 1, got '-8'"},
    {"devices_per_node: 8", "devices_per_node: 2.5",
     "FILE:4:19: devices_per_node: expected an integer >= 1, got '2.5'"},
    {"devices_per_node: 8", "devices_per_node: 99999999999",
     "FILE:4:19: devices_per_node: expected an integer >= 1, got '99999999999'"},
    /* cores (optional, but never a bad value) */
    {"devices_per_node: 8\n", "devices_per_node: 8\ncores: -2\n",
     "FILE:5:8: cores: expected an integer >= 1, got '-2'"},
    {"devices_per_node: 8\n", "devices_per_node: 8\ncores: 2.5\n",
     "FILE:5:8: cores: expected an integer >= 1, got '2.5'"},
    {"devices_per_node: 8\n", "devices_per_node: 8\ncores: 0\n",
     "FILE:5:8: cores: expected an integer >= 1, got '0'"},
    {"devices_per_node: 8\n", "devices_per_node: 8\ncores: two\n",
     "FILE:5:8: cores: expected an integer >= 1, got 'two'"},
    {"devices_per_node: 8\n", "devices_per_node: 8\ncores:\n",
     "FILE:5:7: cores: expected an integer >= 1, got null"},
    /* device_memory */
    {"device_memory: 80GiB", "device_memory: lots",
     "FILE:3:16: device_memory: expected a size such as 80GiB or a number of bytes, got 'lots'"},
    {"device_memory: 80GiB", "device_memory: 80Gb",
     "FILE:3:16: device_memory: expected a size such as 80GiB or a number of bytes, got '80Gb'"},
    {"device_memory: 80GiB", "device_memory: 0",
     "FILE:3:16: device_memory: expected a size such as 80GiB or a number of bytes, got '0'"},
    {"device_memory: 80GiB", "device_memory: {a: 1}",
     "FILE:3:16: device_memory: expected a size such as 80GiB or a number of bytes, got a "
     "mapping"},
    /* name */
    {"name: t", "name: \"\"",
     "FILE:2:7: name: expected a string of 1 to 63 characters, got the string ''"},
    {"name: t", "name:", "FILE:2:6: name: expected a string of 1 to 63 characters, got null"},
    {"name: t", "name: [a]", "FILE:2:7: name: expected a string of 1 to 63 characters, got a list"},
    {"name: t",
     "name: " /* 64 characters */
     "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa",
     "FILE:2:7: name: expected a string of 1 to 63 characters, got "
     "'aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa...'"},
    /* the whole file */
    {NULL, "- a\n- b\n",
     "FILE:1:1: a machine file must be a mapping of name, device_memory, devices_per_node, "
     "cores, compute, nvme, links; got a list"},
    {NULL, "h100\n",
     "FILE:1:1: a machine file must be a mapping of name, device_memory, devices_per_node, "
     "cores, compute, nvme, links; got 'h100'"},
    {NULL, "", "FILE: empty machine file"},
    {NULL, "# only a comment\n", "FILE: empty machine file"},
    {NULL, "name: [\n",
     "FILE:2:1: YAML syntax error: did not find expected node content "
     "while parsing a flow node"},
};

START_TEST(test_bad_file)
{
    const struct bad_case *b = &bad_cases[_i];
    const char *text = b->find ? edited(b->find, b->replace) : b->replace;
    char path[4096];
    snprintf(path, sizeof path, "%s", testutil_path_in(testutil_tmpdir("machine"), "bad.yaml"));
    write_text(path, text);
    load_fails(path, with_file(b->message, path));
}
END_TEST

START_TEST(test_unreadable_paths)
{
    load_fails("/no/such/folder/x.yaml",
               "cannot open the configuration file /no/such/folder/x.yaml: No such file or "
               "directory");
    /* A folder named like a machine file. */
    char dir[4096];
    snprintf(dir, sizeof dir, "%s", testutil_tmpdir("machine-dir"));
    const char *folder = testutil_path_in(dir, "folder.yaml");
    char cmd[4200];
    snprintf(cmd, sizeof cmd, "mkdir '%s'", folder);
    ck_assert_int_eq(system(cmd), 0);
    struct machine m;
    ck_assert_int_eq(machine_load(folder, &m), ZT_ERR_CONFIG);
    ck_assert_msg(strstr(zt_error_message(), folder) != NULL, "%s", zt_error_message());
    ck_assert(is_zeroed(&m));
}
END_TEST

/* Every byte prefix of a repository machine loads or fails cleanly: a
 * configuration error with a message and a zeroed struct (and under ASan,
 * nothing leaked). */
START_TEST(test_every_prefix)
{
    size_t len;
    unsigned char *text =
        testutil_read_file(testutil_source_path("configs/machines/h100-sxm.yaml"), &len);
    char path[4096];
    snprintf(path, sizeof path, "%s", testutil_path_in(testutil_tmpdir("prefix"), "p.yaml"));
    int loaded = 0;
    for (size_t n = 0; n <= len; n++) {
        testutil_write_file(path, text, n);
        struct machine m;
        zt_status s = machine_load(path, &m);
        if (s == ZT_OK) {
            loaded++;
            continue;
        }
        if (s != ZT_ERR_CONFIG || !zt_error_message()[0] || !is_zeroed(&m))
            ck_abort_msg("prefix %zu: %s: %s", n, zt_status_str(s), zt_error_message());
    }
    free(text);
    /* The whole file loads; so do prefixes that only cut its last comment. */
    ck_assert_int_ge(loaded, 1);
}
END_TEST

/* ---- writing ------------------------------------------------------------------------- */

static void round_trip(const struct machine *in, const char *comment, const char *dir,
                       struct machine *out)
{
    const char *path = testutil_path_in(dir, "written.yaml");
    FILE *f = fopen(path, "w");
    ck_assert_ptr_nonnull(f);
    zt_status s = machine_write(in, comment, f);
    ck_assert_msg(s == ZT_OK, "%s", zt_error_message());
    ck_assert_int_eq(fclose(f), 0);
    load_ok(path, out);
    ck_assert_str_eq(out->path, path);
    assert_same_machine(in, out);
}

START_TEST(test_write_round_trips_repository_machine)
{
    char dir[4096];
    snprintf(dir, sizeof dir, "%s", testutil_tmpdir("machine-write"));
    struct machine h, back;
    load_ok(testutil_source_path("configs/machines/h100-sxm.yaml"), &h);
    round_trip(&h, "planner's copy\n\nof h100-sxm\n", dir, &back);
    const char *text = testutil_slurp(testutil_path_in(dir, "written.yaml"));
    ck_assert_msg(strncmp(text, "# planner's copy\n#\n# of h100-sxm\nname: \"h100-sxm\"\n",
                          strlen("# planner's copy\n#\n# of h100-sxm\nname: \"h100-sxm\"\n")) == 0,
                  "%s", text);
    ck_assert_ptr_nonnull(strstr(text, "\ndevice_memory: 80GiB"));
    ck_assert_ptr_nonnull(strstr(text, "\n    bf16: 6.9258e+14\n"));
    ck_assert_ptr_nonnull(strstr(text, "\n    latency: 3e-06\n"));
}
END_TEST

START_TEST(test_write_round_trips_awkward_values)
{
    char dir[4096];
    snprintf(dir, sizeof dir, "%s", testutil_tmpdir("machine-write"));
    struct machine m =
                       {
                           .name = "a \"quoted\": #name\\ with\ttab",
                           .device_memory = 123456789,
                           .devices_per_node = 2147483647,
                           .cores = 2147483647,
                           .matmul_flops = {0.1, 1.0 / 3.0, DBL_MAX},
                           .memory_bandwidth = DBL_MIN,
                           .intra_node = {2.0 / 3.0, 1e-300},
                           .inter_node = {123456789012345678.0, 7e-7},
                       },
                   back;
    round_trip(&m, NULL, dir, &back);
    const char *text = testutil_slurp(testutil_path_in(dir, "written.yaml"));
    ck_assert_msg(strncmp(text, "name:", 5) == 0, "no comment asked for: %s", text);

    m.device_memory = 3 * (1ull << 40); /* whole TiB */
    round_trip(&m, "one line", dir, &back);
    text = testutil_slurp(testutil_path_in(dir, "written.yaml"));
    ck_assert_ptr_nonnull(strstr(text, "# one line\nname:"));
    ck_assert_ptr_nonnull(strstr(text, "\ndevice_memory: 3TiB"));

    m.device_memory = 5 * (1ull << 20) + 1024; /* KiB, not MiB */
    round_trip(&m, NULL, dir, &back);
    ck_assert_ptr_nonnull(
        strstr(testutil_slurp(testutil_path_in(dir, "written.yaml")), "device_memory: 5121KiB"));
}
END_TEST

/* cores is the one optional key: absent reads as 0 and is not written
 * while 0; stated, it reads and round-trips as given. */
START_TEST(test_cores_is_optional)
{
    char dir[4096];
    snprintf(dir, sizeof dir, "%s", testutil_tmpdir("machine-cores"));
    const char *path = testutil_path_in(dir, "m.yaml");
    struct machine m, back;
    write_text(path, good_text);
    load_ok(path, &m);
    ck_assert_int_eq(m.cores, 0);
    round_trip(&m, NULL, dir, &back);
    ck_assert_ptr_null(strstr(testutil_slurp(testutil_path_in(dir, "written.yaml")), "cores"));

    write_text(path, edited("devices_per_node: 8\n", "devices_per_node: 8\ncores: 2\n"));
    load_ok(path, &m);
    ck_assert_int_eq(m.cores, 2);
    round_trip(&m, NULL, dir, &back);
    ck_assert_ptr_nonnull(strstr(testutil_slurp(testutil_path_in(dir, "written.yaml")),
                                 "\ndevices_per_node: 8\ncores: 2 # of one node\ncompute:"));
}
END_TEST

/* peak_matmul_flops is optional, as each of its precisions: absent reads
 * as 0 ("not stated") and is not written; a stated one round-trips. */
START_TEST(test_peaks_are_optional)
{
    char dir[4096];
    snprintf(dir, sizeof dir, "%s", testutil_tmpdir("machine-peaks"));
    const char *path = testutil_path_in(dir, "m.yaml");
    struct machine m, back;
    write_text(path, good_text);
    load_ok(path, &m);
    for (int p = MACHINE_FP32; p <= MACHINE_FP16; p++)
        ck_assert_double_eq(m.peak_matmul_flops[p], 0.0);
    round_trip(&m, NULL, dir, &back);
    ck_assert_ptr_null(strstr(testutil_slurp(testutil_path_in(dir, "written.yaml")), "peak"));

    write_text(path, edited("  memory_bandwidth:", "  peak_matmul_flops:\n    bf16: 1979e12\n"
                                                   "  memory_bandwidth:"));
    load_ok(path, &m);
    ck_assert_double_eq(m.peak_matmul_flops[MACHINE_BF16], 1979e12);
    ck_assert_double_eq(m.peak_matmul_flops[MACHINE_FP32], 0.0);
    round_trip(&m, NULL, dir, &back);
    const char *text = testutil_slurp(testutil_path_in(dir, "written.yaml"));
    ck_assert_msg(strstr(text, "\n  peak_matmul_flops: # the datasheet's dense peak (MFU's "
                               "denominator)\n    bf16: 1.979e+15\n  memory_bandwidth:"),
                  "%s", text);

    write_text(path, edited("  memory_bandwidth:", "  peak_matmul_flops:\n    bf16: fast\n"
                                                   "  memory_bandwidth:"));
    load_fails(path, with_file("FILE:11:11: compute.peak_matmul_flops.bf16: expected a positive "
                               "number, got 'fast'",
                               path));
}
END_TEST

/* The GEMM keys are optional: absent, no tile and no measured layer (and
 * nothing written); stated, they read and round-trip, each type apart; a
 * row that is not [threads, rows, in, out, 3 FLOP/s] is named with its
 * line. */
START_TEST(test_gemm_keys_are_optional)
{
    char dir[4096];
    snprintf(dir, sizeof dir, "%s", testutil_tmpdir("machine-gemm"));
    const char *path = testutil_path_in(dir, "m.yaml");
    struct machine m, back;
    write_text(path, good_text);
    load_ok(path, &m);
    ck_assert_int_eq(m.gemm_tile, 0);
    for (int p = MACHINE_FP32; p <= MACHINE_FP16; p++)
        ck_assert_int_eq(m.gemm_rates[p].n, 0);
    round_trip(&m, NULL, dir, &back);
    ck_assert_ptr_null(strstr(testutil_slurp(testutil_path_in(dir, "written.yaml")), "gemm"));

    write_text(path, edited("links:", "  gemm_tile: 128\n  gemm_rates:\n    bf16:\n"
                                      "      - [1, 512, 768, 768, 1.9e11, 1.5e11, 1.7e11]\n"
                                      "      - [2, 2048, 128, 384, 3.1e11, 3e11, 2.9e11]\nlinks:"));
    load_ok(path, &m);
    ck_assert_int_eq(m.gemm_tile, 128);
    ck_assert_int_eq(m.gemm_rates[MACHINE_FP32].n, 0);
    ck_assert_int_eq(m.gemm_rates[MACHINE_BF16].n, 2);
    const struct machine_gemm_rate *r = &m.gemm_rates[MACHINE_BF16].row[1];
    ck_assert_int_eq(r->threads, 2);
    ck_assert_int_eq(r->rows, 2048);
    ck_assert_int_eq(r->in, 128);
    ck_assert_int_eq(r->out, 384);
    ck_assert_double_eq(r->flops[MACHINE_FORWARD], 3.1e11);
    ck_assert_double_eq(r->flops[MACHINE_INPUT_GRAD], 3e11);
    ck_assert_double_eq(r->flops[MACHINE_WEIGHT_GRAD], 2.9e11);
    round_trip(&m, NULL, dir, &back);

    static const char expected[] = "expected a list of at most 64 [threads, rows, in, out, "
                                   "forward, input grad, weight grad FLOP/s] rows (4 positive "
                                   "integers, then 3 positive numbers)";
    write_text(path, edited("links:", "  gemm_rates:\n    fp32:\n"
                                      "      - [1, 512, 768, 768, 1.9e11]\nlinks:"));
    load_fails(path, with_file(testutil_fmt("FILE:13:9: compute.gemm_rates.fp32: %s, got a list",
                                            expected),
                               path));
    write_text(path, edited("links:", "  gemm_rates:\n    fp16: 3\nlinks:"));
    load_fails(path,
               with_file(testutil_fmt("FILE:12:11: compute.gemm_rates.fp16: %s, got '3'", expected),
                         path));
    write_text(path, edited("links:", "  gemm_rates:\n    fp32:\n"
                                      "      - [0, 512, 768, 768, 1e11, 1e11, 1e11]\nlinks:"));
    load_fails(path, with_file(testutil_fmt("FILE:13:9: compute.gemm_rates.fp32: %s, got a list",
                                            expected),
                               path));
    /* an older calibrate's key names its replacement */
    write_text(path, edited("links:", "  gemm_measured:\n    - [512, 768, 768, 1.9e11]\nlinks:"));
    load_fails(path, with_file("FILE:11:3: compute.gemm_measured is no longer read: replaced by "
                               "compute.gemm_rates (each product apart, by thread count): run "
                               "zerotrain calibrate again",
                               path));
    write_text(path, edited("links:", "  gemm_rates:\n    fp8:\n      - [1]\nlinks:"));
    load_fails(path, with_file("FILE:12:5: unknown key 'fp8' in compute.gemm_rates (expected "
                               "fp32, bf16, fp16)",
                               path));
}
END_TEST

/* update_rates, dequantize_4bit, attention_flops, elementwise_bandwidth
 * and the loader's rates are optional: absent, none (and nothing written);
 * stated, they read, round-trip and (the updates) are found by name
 * whatever its case; a bad entry is named with its line. */
START_TEST(test_element_rates_are_optional)
{
    char dir[4096];
    snprintf(dir, sizeof dir, "%s", testutil_tmpdir("machine-rates"));
    const char *path = testutil_path_in(dir, "m.yaml");
    struct machine m, back;
    write_text(path, good_text);
    load_ok(path, &m);
    ck_assert_int_eq(m.n_updates, 0);
    ck_assert_double_eq(m.dequantize_4bit, 0.0);
    ck_assert_double_eq(machine_update_rate(&m, "AdamW"), 0.0);
    round_trip(&m, NULL, dir, &back);
    const char *text = testutil_slurp(testutil_path_in(dir, "written.yaml"));
    ck_assert_ptr_null(strstr(text, "update_rates"));
    ck_assert_ptr_null(strstr(text, "dequantize"));
    ck_assert_ptr_null(strstr(text, "attention"));
    ck_assert_ptr_null(strstr(text, "elementwise"));
    ck_assert_ptr_null(strstr(text, "weights_"));
    ck_assert_ptr_null(strstr(text, "quantize_4bit"));

    write_text(path,
               edited("links:", "  update_rates:\n    AdamW: 1.2e9\n    AdamW8bit: 9.5e7\n"
                                "  dequantize_4bit: 2.5e9\n  attention_flops:\n"
                                "    fp32: 1.1e11\n    bf16: 2e11\n    fp16: 1.1e11\n"
                                "  elementwise_bandwidth: 5.25e9\n  weights_read: 1.5e9\n"
                                "  weights_read_transposed: 4e8\n  quantize_4bit: 2.5e8\nlinks:"));
    load_ok(path, &m);
    ck_assert_double_eq(m.weights_read, 1.5e9);
    ck_assert_double_eq(m.weights_read_transposed, 4e8);
    ck_assert_double_eq(m.quantize_4bit, 2.5e8);
    ck_assert_int_eq(m.n_updates, 2);
    ck_assert_double_eq(machine_update_rate(&m, "adamw8bit"), 9.5e7);
    ck_assert_double_eq(machine_update_rate(&m, "AdamW"), 1.2e9);
    ck_assert_double_eq(machine_update_rate(&m, "Lion"), 0.0);
    ck_assert_double_eq(m.dequantize_4bit, 2.5e9);
    ck_assert_double_eq(m.attention_flops[MACHINE_BF16], 2e11);
    ck_assert_double_eq(m.attention_flops[MACHINE_FP16], 1.1e11);
    ck_assert_double_eq(m.elementwise_bandwidth, 5.25e9);
    round_trip(&m, NULL, dir, &back);
    ck_assert_double_eq(back.quantize_4bit, 2.5e8);
    text = testutil_slurp(testutil_path_in(dir, "written.yaml"));
    ck_assert_msg(strstr(text, "  update_rates: # parameter elements/s of each optimizer's "
                               "update\n    AdamW: 1.2e+09\n    AdamW8bit: 9.5e+07\n"
                               "  dequantize_4bit: 2.5e+09 # 4-bit weights dequantised per s\n"),
                  "%s", text);

    static const char expected[] = "expected a mapping of at most 8 optimizer names (1 to 23 "
                                   "characters) to positive numbers";
    write_text(path, edited("links:", "  update_rates:\n    AdamW: fast\nlinks:"));
    load_fails(path,
               with_file(testutil_fmt("FILE:12:12: compute.update_rates: %s, got 'fast'", expected),
                         path));
    write_text(path, edited("links:", "  update_rates: [1, 2]\nlinks:"));
    load_fails(path,
               with_file(testutil_fmt("FILE:11:17: compute.update_rates: %s, got a list", expected),
                         path));
    write_text(path, edited("links:", "  dequantize_4bit: -1\nlinks:"));
    load_fails(path, with_file("FILE:11:20: compute.dequantize_4bit: expected a positive number, "
                               "got '-1'",
                               path));
    write_text(path, edited("links:", "  attention_flops:\n    bf16: 0\nlinks:"));
    load_fails(path, with_file("FILE:12:11: compute.attention_flops.bf16: expected a positive "
                               "number, got '0'",
                               path));
    write_text(path, edited("links:", "  elementwise_bandwidth: lots\nlinks:"));
    load_fails(path, with_file("FILE:11:26: compute.elementwise_bandwidth: expected a positive "
                               "number, got 'lots'",
                               path));
    write_text(path, edited("links:", "  quantize_4bit: 0\nlinks:"));
    load_fails(path, with_file("FILE:11:18: compute.quantize_4bit: expected a positive "
                               "number, got '0'",
                               path));
}
END_TEST

/* The nvme bandwidths are optional: absent, 0 (and nothing written);
 * stated, they read and round-trip; a bad value or key is named with its
 * line. */
START_TEST(test_nvme_bandwidths_are_optional)
{
    char dir[4096];
    snprintf(dir, sizeof dir, "%s", testutil_tmpdir("machine-nvme"));
    const char *path = testutil_path_in(dir, "m.yaml");
    struct machine m, back;
    write_text(path, good_text);
    load_ok(path, &m);
    ck_assert_double_eq(m.nvme_read_bandwidth, 0);
    ck_assert_double_eq(m.nvme_write_bandwidth, 0);
    round_trip(&m, NULL, dir, &back);
    ck_assert_ptr_null(strstr(testutil_slurp(testutil_path_in(dir, "written.yaml")), "nvme"));

    write_text(path, edited("links:", "nvme:\n  read_bandwidth: 1.5e9\n  write_bandwidth: 1.1e9\n"
                                      "links:"));
    load_ok(path, &m);
    ck_assert_double_eq(m.nvme_read_bandwidth, 1.5e9);
    ck_assert_double_eq(m.nvme_write_bandwidth, 1.1e9);
    round_trip(&m, NULL, dir, &back);

    write_text(path, edited("links:", "nvme:\n  read_bandwidth: fast\nlinks:"));
    load_fails(path, with_file("FILE:12:19: nvme.read_bandwidth: expected a positive number, "
                               "got 'fast'",
                               path));
    write_text(path, edited("links:", "nvme:\n  bandwidth: 1e9\nlinks:"));
    load_fails(path, with_file("FILE:12:3: unknown key 'bandwidth' in nvme (expected "
                               "read_bandwidth, write_bandwidth)",
                               path));
}
END_TEST

/* A link's measured collectives are optional: absent, none; stated, each
 * type's rows read and round-trip; a short row, a size not above the one
 * before, or a rate that is not positive is named with its line. */
START_TEST(test_busbw_tables_are_optional)
{
    char dir[4096];
    snprintf(dir, sizeof dir, "%s", testutil_tmpdir("machine-busbw"));
    const char *path = testutil_path_in(dir, "m.yaml");
    struct machine m, back;
    write_text(path, good_text);
    load_ok(path, &m);
    for (int p = MACHINE_FP32; p <= MACHINE_FP16; p++)
        ck_assert_int_eq(m.intra_node.busbw[p].n + m.inter_node.busbw[p].n, 0);
    round_trip(&m, NULL, dir, &back);
    ck_assert_ptr_null(strstr(testutil_slurp(testutil_path_in(dir, "written.yaml")), "busbw"));

    write_text(path, edited("    latency: 5e-6\n", "    latency: 5e-6\n    busbw:\n      bf16:\n"
                                                   "        - [4096, 8.3e8, 5.8e8, 1.17e9]\n"
                                                   "        - [268435456, 4.7e9, 1.3e9, 3.6e9]\n"));
    load_ok(path, &m);
    ck_assert_int_eq(m.intra_node.busbw[MACHINE_BF16].n, 0);
    ck_assert_int_eq(m.inter_node.busbw[MACHINE_FP32].n, 0);
    const struct machine_busbw_table *b = &m.inter_node.busbw[MACHINE_BF16];
    ck_assert_int_eq(b->n, 2);
    ck_assert_double_eq(b->row[1].bytes, 268435456);
    ck_assert_double_eq(b->row[1].busbw[MACHINE_ALLREDUCE], 4.7e9);
    ck_assert_double_eq(b->row[1].busbw[MACHINE_REDUCE_SCATTER], 1.3e9);
    ck_assert_double_eq(b->row[1].busbw[MACHINE_ALLGATHER], 3.6e9);
    round_trip(&m, NULL, dir, &back);

    static const char expected[] = "expected a list of at most 24 [bytes, allreduce, "
                                   "reduce_scatter, allgather bus bytes/s] rows (sizes "
                                   "increasing, rates positive)";
    static const char *const bad[] = {"[4096, 8.3e8, 5.8e8]", "[4096, 8.3e8, 0, 1e9]",
                                      "[4096, 8.3e8, 5.8e8, 1e9]\n        - [4096, 1, 1, 1]"};
    static const int lines[] = {17, 17, 18};
    for (int i = 0; i < 3; i++) {
        write_text(path, edited("    latency: 3e-6\n",
                                testutil_fmt("    latency: 3e-6\n    busbw:\n      fp32:\n"
                                             "        - %s\n",
                                             bad[i])));
        load_fails(path, with_file(testutil_fmt("FILE:%d:11: links.intra_node.busbw.fp32: %s, "
                                                "got a list",
                                                lines[i], expected),
                                   path));
    }
}
END_TEST

START_TEST(test_write_error)
{
    FILE *f = fopen("/dev/full", "w");
    if (!f)
        return; /* no /dev/full here: nothing to fail the write with */
    struct machine m;
    load_ok(testutil_source_path("configs/machines/a100-40gb.yaml"), &m);
    zt_status s = machine_write(&m, "x", f);
    fclose(f);
    ck_assert_int_eq(s, ZT_ERR_IO);
    ck_assert_str_eq(zt_error_message(),
                     "machine_write: cannot write machine 'a100-40gb': No space left on device");
}
END_TEST

static Suite *machine_suite(void)
{
    Suite *s = suite_create("machine");
    TCase *repo = testutil_tcase(s, "repository", 60);
    tcase_add_test(repo, test_repository_machines_load);
    tcase_add_test(repo, test_repository_machine_values);

    TCase *lookup = testutil_tcase(s, "lookup", 60);
    tcase_add_test(lookup, test_lookup_by_name);
    tcase_add_test(lookup, test_empty_env_means_default_folder);

    TCase *bad = testutil_tcase(s, "bad", 60);
    tcase_add_loop_test(bad, test_bad_file, 0, (int)(sizeof bad_cases / sizeof bad_cases[0]));
    tcase_add_test(bad, test_unreadable_paths);
    tcase_add_test(bad, test_every_prefix);

    TCase *write = testutil_tcase(s, "write", 60);
    tcase_add_test(write, test_write_round_trips_repository_machine);
    tcase_add_test(write, test_write_round_trips_awkward_values);
    tcase_add_test(write, test_cores_is_optional);
    tcase_add_test(write, test_peaks_are_optional);
    tcase_add_test(write, test_gemm_keys_are_optional);
    tcase_add_test(write, test_element_rates_are_optional);
    tcase_add_test(write, test_nvme_bandwidths_are_optional);
    tcase_add_test(write, test_busbw_tables_are_optional);
    tcase_add_test(write, test_write_error);
    return s;
}

int main(void)
{
    return testutil_run_suite(machine_suite(), 0);
}
