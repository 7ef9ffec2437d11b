/* formats/checkpoint_shard.c — shard files: the writer that streams a
 * rank's vectors to disk and the reader that checks a file's header and
 * serves element ranges (format in checkpoint.h).
 *
 * Writing is one pass over the caller's data. The header is written first
 * with zero checksums, so the table fixes every offset before any data
 * moves; each section's FNV-1a is accumulated while its bytes stream past,
 * and finish seeks back and writes the header again, complete. The file
 * lives under PATH.tmp.<pid> until then (common/atomic_file.h), so a rank
 * that dies mid-write leaves no file that looks whole. Element bytes are
 * written as the caller holds them: on a little-endian host that is the
 * format, and shards are gigabytes, so there is no per-element packing
 * pass; big-endian hosts are refused at open.
 *
 * Reading trusts nothing: the header is checked field by field against the
 * format and against the size fstat gives, before anything is allocated
 * from its numbers (the table is bounded by the file size). The layout is
 * canonical — sections follow the table in order with no gap and end at
 * the end of the file — which is what lets the header digest plus the
 * section checksums cover every byte. Ranges are read with pread, so a
 * handle can serve several threads and a rank reads only what it needs.
 */
#include "checkpoint.h"
#include "checkpoint_impl.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <unistd.h>

#include "../common/atomic_file.h"
#include "../common/endian.h"
#include "../common/fileio.h"

#define CHUNK_BYTES  (1u << 20)
#define MAX_SECTIONS (1u << 20)
#define MAX_FILE     ((uint64_t)INT64_MAX)

/* File dtype codes: the index in this table. Fixed by the format, so a
 * reordering of enum zt_dtype cannot change what files mean. */
static const struct {
    enum zt_dtype dtype;
    const char *name;
} dtypes[] = {{ZT_F32, "F32"}, {ZT_F64, "F64"}, {ZT_BF16, "BF16"}, {ZT_F16, "F16"},
              {ZT_I32, "I32"}, {ZT_I64, "I64"}, {ZT_U8, "U8"}};
#define N_DTYPES ((uint32_t)(sizeof dtypes / sizeof dtypes[0]))

static int dtype_code(enum zt_dtype t)
{
    for (uint32_t k = 0; k < N_DTYPES; k++)
        if (dtypes[k].dtype == t)
            return (int)k;
    return -1;
}

static int host_is_little_endian(void)
{
    const uint16_t one = 1;
    unsigned char b;
    memcpy(&b, &one, 1);
    return b == 1;
}

/* Why `name` (at most max bytes, not necessarily terminated) cannot name a
 * section, or NULL when it can. */
static const char *name_problem(const char *name, size_t max)
{
    const char *nul = memchr(name, '\0', max);
    if (!nul)
        return "name is longer than 31 bytes";
    if (nul == name)
        return "name is empty";
    for (const char *c = name; c < nul; c++)
        if (*c < '!' || *c > '~')
            return "name has a byte outside '!' .. '~'";
    return NULL;
}

static uint64_t table_end(uint64_t n_sections)
{
    return CKPT_SHARD_HEADER_BYTES + CKPT_SHARD_ENTRY_BYTES * n_sections;
}

/* The header bytes [0, table_end(n)) for these sections into buf. */
static void pack_header(unsigned char *buf, int rank, int world, const struct ckpt_section *sec,
                        int n)
{
    memcpy(buf, CKPT_SHARD_MAGIC, 8);
    zt_put_le(buf + 8, CKPT_SHARD_VERSION, 4);
    zt_put_le(buf + 12, (uint64_t)rank, 4);
    zt_put_le(buf + 16, (uint64_t)world, 4);
    zt_put_le(buf + 20, (uint64_t)n, 4);
    for (int k = 0; k < n; k++) {
        unsigned char *e = buf + table_end((uint64_t)k);
        memset(e, 0, CKPT_SHARD_ENTRY_BYTES);
        memcpy(e, sec[k].name, strlen(sec[k].name));
        zt_put_le(e + 32, (uint64_t)dtype_code(sec[k].dtype), 4);
        zt_put_le(e + 40, sec[k].count, 8);
        zt_put_le(e + 48, sec[k].offset, 8);
        zt_put_le(e + 56, sec[k].checksum, 8);
    }
}

/* ---- writing ---- */

enum writer_state { DECLARING, WRITING, FAILED };

struct ckpt_shard_writer {
    struct atomic_file af;
    int rank, world;
    enum writer_state state;
    struct ckpt_section *sec;
    int n, cap;
    uint64_t data_bytes;     /* all sections */
    uint64_t total, done;    /* elements declared, written */
    int cur;                 /* section receiving the next element */
    uint64_t cur_done, hash; /* elements of section cur written, their FNV-1a */
};

zt_status ckpt_shard_writer_open(const char *path, int rank, int world,
                                 struct ckpt_shard_writer **out)
{
    *out = NULL;
    if (world < 1 || rank < 0 || rank >= world)
        return zt_error_set(ZT_ERR_USAGE, "%s: rank %d of world %d is impossible", path, rank,
                            world);
    if (!host_is_little_endian())
        return zt_error_set(ZT_ERR_UNSUPPORTED,
                            "%s: checkpoints are little-endian; this host is not", path);
    struct ckpt_shard_writer *w = calloc(1, sizeof *w);
    if (!w)
        return zt_error_set(ZT_ERR_NOMEM, "%s: cannot allocate the writer", path);
    zt_status st = atomic_file_open(path, &w->af);
    if (st != ZT_OK) {
        free(w);
        ZT_TRY(st);
    }
    w->rank = rank;
    w->world = world;
    *out = w;
    return ZT_OK;
}

void ckpt_shard_writer_abort(struct ckpt_shard_writer *w)
{
    if (!w)
        return;
    atomic_file_abort(&w->af);
    free(w->sec);
    free(w);
}

zt_status ckpt_shard_writer_add(struct ckpt_shard_writer *w, const char *name, enum zt_dtype dtype,
                                uint64_t count)
{
    ZT_ASSERT(w->state == DECLARING);
    const char *path = w->af.path;
    size_t name_len = strlen(name);
    const char *why =
        name_problem(name, name_len < CKPT_SECTION_NAME_MAX ? name_len + 1 : CKPT_SECTION_NAME_MAX);
    if (why)
        return zt_error_set(ZT_ERR_USAGE, "%s: section '%s': %s", path, name, why);
    for (int k = 0; k < w->n; k++)
        if (strcmp(w->sec[k].name, name) == 0)
            return zt_error_set(ZT_ERR_USAGE, "%s: section '%s' is declared twice", path, name);
    if (dtype_code(dtype) < 0)
        return zt_error_set(ZT_ERR_USAGE, "%s: section '%s': dtype %d is not known", path, name,
                            (int)dtype);
    size_t size = zt_dtype_size(dtype);
    /* The header plus the data stay within MAX_FILE after every add. */
    uint64_t used = table_end((uint64_t)w->n + 1) + w->data_bytes;
    if ((uint64_t)w->n + 1 > MAX_SECTIONS || used > MAX_FILE || count > (MAX_FILE - used) / size)
        return zt_error_set(ZT_ERR_USAGE, "%s: section '%s': the file would be too large", path,
                            name);
    if (w->n == w->cap) {
        int cap = w->cap ? 2 * w->cap : 8;
        struct ckpt_section *sec = realloc(w->sec, (size_t)cap * sizeof *sec);
        if (!sec)
            return zt_error_set(ZT_ERR_NOMEM, "%s: cannot allocate the section table", path);
        w->sec = sec;
        w->cap = cap;
    }
    struct ckpt_section *s = &w->sec[w->n++];
    *s = (struct ckpt_section){.dtype = dtype, .count = count};
    memcpy(s->name, name, strlen(name) + 1);
    w->data_bytes += count * size;
    w->total += count;
    return ZT_OK;
}

/* Closes the sections that are full (zero-length ones included), storing
 * their checksums, so `cur` is the section that takes the next element. */
static void close_full_sections(struct ckpt_shard_writer *w)
{
    while (w->cur < w->n && w->cur_done == w->sec[w->cur].count) {
        w->sec[w->cur++].checksum = w->hash;
        w->cur_done = 0;
        w->hash = CKPT_FNV_OFFSET;
    }
}

static zt_status write_bytes(struct ckpt_shard_writer *w, const void *p, size_t n)
{
    if (n && fwrite(p, 1, n, w->af.f) != n) {
        w->state = FAILED;
        return zt_error_set(ZT_ERR_IO, "%s: cannot write %s: %s", w->af.path, w->af.tmp_path,
                            strerror(errno));
    }
    return ZT_OK;
}

/* The header as it stands (checksums known so far) into a new buffer. */
static zt_status header_bytes(struct ckpt_shard_writer *w, unsigned char **out, size_t *len)
{
    *len = (size_t)table_end((uint64_t)w->n);
    *out = malloc(*len);
    if (!*out)
        return zt_error_set(ZT_ERR_NOMEM, "%s: cannot allocate the header", w->af.path);
    pack_header(*out, w->rank, w->world, w->sec, w->n);
    return ZT_OK;
}

zt_status ckpt_shard_writer_begin(struct ckpt_shard_writer *w)
{
    ZT_ASSERT(w->state == DECLARING);
    uint64_t offset = table_end((uint64_t)w->n);
    for (int k = 0; k < w->n; k++) {
        w->sec[k].offset = offset;
        offset += w->sec[k].count * zt_dtype_size(w->sec[k].dtype);
    }
    unsigned char *head;
    size_t len;
    w->state = FAILED;
    ZT_TRY(header_bytes(w, &head, &len));
    zt_status st = write_bytes(w, head, len);
    free(head);
    ZT_TRY(st);
    w->state = WRITING;
    w->hash = CKPT_FNV_OFFSET;
    close_full_sections(w);
    return ZT_OK;
}

zt_status ckpt_shard_writer_write(struct ckpt_shard_writer *w, const void *data, uint64_t count)
{
    ZT_ASSERT(w->state == WRITING);
    if (count > w->total - w->done)
        return zt_error_set(
            ZT_ERR_USAGE, "%s: writing %llu elements, but only %llu of those declared remain",
            w->af.path, (unsigned long long)count, (unsigned long long)(w->total - w->done));
    const unsigned char *p = data;
    while (count > 0) {
        const struct ckpt_section *s = &w->sec[w->cur];
        uint64_t k = s->count - w->cur_done < count ? s->count - w->cur_done : count;
        size_t bytes = (size_t)(k * zt_dtype_size(s->dtype));
        w->hash = ckpt_fnv(w->hash, p, bytes);
        ZT_TRY(write_bytes(w, p, bytes));
        p += bytes;
        count -= k;
        w->done += k;
        w->cur_done += k;
        close_full_sections(w);
    }
    return ZT_OK;
}

/* Everything finish does before the writer is freed. */
static zt_status complete(struct ckpt_shard_writer *w, uint64_t *file_bytes,
                          uint64_t *file_checksum)
{
    if (w->done != w->total) {
        const struct ckpt_section *s = &w->sec[w->cur];
        return zt_error_set(ZT_ERR_USAGE,
                            "%s: finished after %llu of %llu elements (section '%s' has %llu of "
                            "%llu)",
                            w->af.path, (unsigned long long)w->done, (unsigned long long)w->total,
                            s->name, (unsigned long long)w->cur_done, (unsigned long long)s->count);
    }
    unsigned char *head;
    size_t len;
    ZT_TRY(header_bytes(w, &head, &len));
    uint64_t digest = ckpt_fnv(CKPT_FNV_OFFSET, head, len);
    zt_status st = ZT_OK;
    if (fseeko(w->af.f, 0, SEEK_SET) != 0)
        st = zt_error_set(ZT_ERR_IO, "%s: cannot seek in %s: %s", w->af.path, w->af.tmp_path,
                          strerror(errno));
    else
        st = write_bytes(w, head, len);
    free(head);
    ZT_TRY(st);
    ZT_TRY(atomic_file_commit(&w->af));
    if (file_bytes)
        *file_bytes = (uint64_t)len + w->data_bytes;
    if (file_checksum)
        *file_checksum = digest;
    return ZT_OK;
}

zt_status ckpt_shard_writer_finish(struct ckpt_shard_writer *w, uint64_t *file_bytes,
                                   uint64_t *file_checksum)
{
    ZT_ASSERT(w->state == WRITING);
    zt_status st = complete(w, file_bytes, file_checksum);
    ckpt_shard_writer_abort(w); /* after a commit: only frees */
    return st;
}

/* ---- reading ---- */

struct ckpt_shard {
    char *path;
    int fd;
    struct ckpt_shard_header h;
    struct ckpt_section *sec;
    const struct ckpt_section **by_name; /* sorted by strcmp */
};

void ckpt_shard_close(struct ckpt_shard *s)
{
    if (!s)
        return;
    if (s->fd >= 0)
        close(s->fd);
    free(s->path);
    free(s->sec);
    free(s->by_name);
    free(s);
}

/* Reads n bytes at offset; a file that ends early is ZT_ERR_CHECKPOINT. */
static zt_status pread_full(int fd, const char *path, void *buf, size_t n, uint64_t offset)
{
    return zt_pread_full(fd, path, buf, n, offset, ZT_ERR_CHECKPOINT);
}

/* Checks the fixed 24 bytes against the format and the file size; sets
 * rank, world and the section count. */
static zt_status check_fixed(struct ckpt_shard *s, const unsigned char *b, uint64_t size)
{
    const char *path = s->path;
    size_t have = size < CKPT_SHARD_HEADER_BYTES ? (size_t)size : CKPT_SHARD_HEADER_BYTES;
    if (memcmp(b, CKPT_SHARD_MAGIC, have < 8 ? have : 8) != 0)
        return zt_error_set(ZT_ERR_CHECKPOINT, "%s: not a checkpoint shard (bad magic)", path);
    if (have < CKPT_SHARD_HEADER_BYTES)
        return zt_error_set(ZT_ERR_CHECKPOINT, "%s: truncated: %llu bytes, the header needs %u",
                            path, (unsigned long long)size, CKPT_SHARD_HEADER_BYTES);
    uint32_t version = (uint32_t)zt_get_le(b + 8, 4), rank = (uint32_t)zt_get_le(b + 12, 4);
    uint32_t world = (uint32_t)zt_get_le(b + 16, 4), n = (uint32_t)zt_get_le(b + 20, 4);
    if (version > CKPT_SHARD_VERSION)
        return zt_error_set(ZT_ERR_CHECKPOINT,
                            "%s: shard format version %u is newer than this zerotrain understands "
                            "(%u)",
                            path, (unsigned)version, CKPT_SHARD_VERSION);
    if (version != CKPT_SHARD_VERSION)
        return zt_error_set(ZT_ERR_CHECKPOINT, "%s: shard format version %u is not valid", path,
                            (unsigned)version);
    if (world < 1 || world > INT_MAX || rank >= world)
        return zt_error_set(ZT_ERR_CHECKPOINT, "%s: rank %u of world %u is impossible", path,
                            (unsigned)rank, (unsigned)world);
    if (n > MAX_SECTIONS)
        return zt_error_set(ZT_ERR_CHECKPOINT, "%s: %u sections exceed the limit of %u", path,
                            (unsigned)n, MAX_SECTIONS);
    if (table_end(n) > size)
        return zt_error_set(
            ZT_ERR_CHECKPOINT, "%s: truncated: %llu bytes, the table of %u sections needs %llu",
            path, (unsigned long long)size, (unsigned)n, (unsigned long long)table_end(n));
    s->h.rank = (int)rank;
    s->h.world = (int)world;
    s->h.n_sections = (int)n;
    return ZT_OK;
}

/* Decodes and checks table entry k; *offset is where it must start and
 * moves past it. */
static zt_status check_entry(struct ckpt_shard *s, const unsigned char *e, int k, uint64_t size,
                             uint64_t *offset)
{
    const char *path = s->path;
    struct ckpt_section *sec = &s->sec[k];
    const char *why = name_problem((const char *)e, CKPT_SECTION_NAME_MAX);
    if (why)
        return zt_error_set(ZT_ERR_CHECKPOINT, "%s: section %d: %s", path, k, why);
    size_t len = strlen((const char *)e);
    memcpy(sec->name, e, len + 1);
    for (size_t c = len; c < CKPT_SECTION_NAME_MAX; c++)
        if (e[c] != 0)
            return zt_error_set(ZT_ERR_CHECKPOINT, "%s: section '%s': name padding is not zero",
                                path, sec->name);
    uint32_t code = (uint32_t)zt_get_le(e + 32, 4), reserved = (uint32_t)zt_get_le(e + 36, 4);
    if (code >= N_DTYPES)
        return zt_error_set(ZT_ERR_CHECKPOINT, "%s: section '%s': unknown dtype code %u", path,
                            sec->name, (unsigned)code);
    if (reserved != 0)
        return zt_error_set(ZT_ERR_CHECKPOINT, "%s: section '%s': reserved field is %u, expected 0",
                            path, sec->name, (unsigned)reserved);
    sec->dtype = dtypes[code].dtype;
    sec->count = zt_get_le(e + 40, 8);
    sec->offset = zt_get_le(e + 48, 8);
    sec->checksum = zt_get_le(e + 56, 8);
    if (sec->offset != *offset)
        return zt_error_set(ZT_ERR_CHECKPOINT,
                            "%s: section '%s': offset %llu, expected %llu (sections follow the "
                            "table without gaps)",
                            path, sec->name, (unsigned long long)sec->offset,
                            (unsigned long long)*offset);
    size_t esize = zt_dtype_size(sec->dtype);
    if (sec->count > (size - *offset) / esize)
        return zt_error_set(ZT_ERR_CHECKPOINT,
                            "%s: truncated: %llu bytes, section '%s' (%llu %s elements) does not "
                            "fit",
                            path, (unsigned long long)size, sec->name,
                            (unsigned long long)sec->count, dtypes[code].name);
    *offset += sec->count * esize;
    return ZT_OK;
}

static int by_name_cmp(const void *a, const void *b)
{
    const struct ckpt_section *x = *(const struct ckpt_section *const *)a;
    const struct ckpt_section *y = *(const struct ckpt_section *const *)b;
    return strcmp(x->name, y->name);
}

/* Reads the table, checks every entry, the total size and duplicates. */
static zt_status read_table(struct ckpt_shard *s, uint64_t size)
{
    int n = s->h.n_sections;
    size_t len = (size_t)table_end((uint64_t)n);
    unsigned char *buf = malloc(len);
    s->sec = calloc((size_t)n + 1, sizeof *s->sec);
    s->by_name = calloc((size_t)n + 1, sizeof *s->by_name);
    if (!buf || !s->sec || !s->by_name) {
        free(buf);
        return zt_error_set(ZT_ERR_NOMEM, "%s: cannot allocate the table of %d sections", s->path,
                            n);
    }
    zt_status st = pread_full(s->fd, s->path, buf, len, 0);
    uint64_t offset = len;
    for (int k = 0; k < n && st == ZT_OK; k++)
        st = check_entry(s, buf + table_end((uint64_t)k), k, size, &offset);
    s->h.file_checksum = ckpt_fnv(CKPT_FNV_OFFSET, buf, len);
    free(buf);
    ZT_TRY(st);
    if (offset != size)
        return zt_error_set(ZT_ERR_CHECKPOINT,
                            "%s: %llu bytes, but the sections end at byte %llu (trailing bytes)",
                            s->path, (unsigned long long)size, (unsigned long long)offset);
    for (int k = 0; k < n; k++)
        s->by_name[k] = &s->sec[k];
    qsort(s->by_name, (size_t)n, sizeof *s->by_name, by_name_cmp);
    for (int k = 1; k < n; k++)
        if (strcmp(s->by_name[k - 1]->name, s->by_name[k]->name) == 0)
            return zt_error_set(ZT_ERR_CHECKPOINT, "%s: section '%s' appears twice", s->path,
                                s->by_name[k]->name);
    s->h.sections = s->sec;
    s->h.file_bytes = size;
    return ZT_OK;
}

/* Everything open does once the handle exists. */
static zt_status open_checked(struct ckpt_shard *s)
{
    uint64_t size;
    ZT_TRY(zt_open_regular(s->path, ZT_ERR_CHECKPOINT, &s->fd, &size));
    unsigned char fixed[CKPT_SHARD_HEADER_BYTES];
    size_t have = size < sizeof fixed ? (size_t)size : sizeof fixed;
    ZT_TRY(pread_full(s->fd, s->path, fixed, have, 0));
    ZT_TRY(check_fixed(s, fixed, size));
    return read_table(s, size);
}

zt_status ckpt_shard_open(const char *path, struct ckpt_shard **out)
{
    *out = NULL;
    struct ckpt_shard *s = calloc(1, sizeof *s);
    if (!s || !(s->path = malloc(strlen(path) + 1))) {
        free(s);
        return zt_error_set(ZT_ERR_NOMEM, "%s: cannot allocate the shard handle", path);
    }
    memcpy(s->path, path, strlen(path) + 1);
    zt_status st = open_checked(s);
    if (st != ZT_OK) {
        ckpt_shard_close(s);
        return st;
    }
    *out = s;
    return ZT_OK;
}

const struct ckpt_shard_header *ckpt_shard_header(const struct ckpt_shard *s)
{
    return &s->h;
}

const struct ckpt_section *ckpt_shard_find(const struct ckpt_shard *s, const char *name)
{
    size_t lo = 0, hi = (size_t)s->h.n_sections;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        int c = strcmp(s->by_name[mid]->name, name);
        if (c == 0)
            return s->by_name[mid];
        if (c < 0)
            lo = mid + 1;
        else
            hi = mid;
    }
    return NULL;
}

zt_status ckpt_shard_read(struct ckpt_shard *s, const struct ckpt_section *sec, uint64_t first,
                          uint64_t count, void *dst)
{
    ZT_ASSERT(sec >= s->sec && sec < s->sec + s->h.n_sections);
    if (first > sec->count || count > sec->count - first)
        return zt_error_set(ZT_ERR_USAGE,
                            "%s: section '%s': cannot read %llu elements from %llu, it has %llu",
                            s->path, sec->name, (unsigned long long)count,
                            (unsigned long long)first, (unsigned long long)sec->count);
    size_t esize = zt_dtype_size(sec->dtype);
    return pread_full(s->fd, s->path, dst, (size_t)(count * esize), sec->offset + first * esize);
}

/* FNV-1a 64 of one section's bytes, read through buf (CHUNK_BYTES). */
static zt_status section_hash(struct ckpt_shard *s, const struct ckpt_section *sec,
                              unsigned char *buf, uint64_t *hash)
{
    uint64_t left = sec->count * zt_dtype_size(sec->dtype), offset = sec->offset;
    uint64_t h = CKPT_FNV_OFFSET;
    while (left > 0) {
        size_t n = left < CHUNK_BYTES ? (size_t)left : CHUNK_BYTES;
        ZT_TRY(pread_full(s->fd, s->path, buf, n, offset));
        h = ckpt_fnv(h, buf, n);
        offset += n;
        left -= n;
    }
    *hash = h;
    return ZT_OK;
}

zt_status ckpt_shard_verify(struct ckpt_shard *s)
{
    unsigned char *buf = malloc(CHUNK_BYTES);
    if (!buf)
        return zt_error_set(ZT_ERR_NOMEM, "%s: cannot allocate the read buffer", s->path);
    zt_status st = ZT_OK;
    for (int k = 0; k < s->h.n_sections && st == ZT_OK; k++) {
        uint64_t h = 0;
        st = section_hash(s, &s->sec[k], buf, &h);
        if (st == ZT_OK && h != s->sec[k].checksum)
            st = zt_error_set(ZT_ERR_CHECKPOINT,
                              "%s: checksum mismatch in section '%s' (stored 0x%016llx, "
                              "computed 0x%016llx)",
                              s->path, s->sec[k].name, (unsigned long long)s->sec[k].checksum,
                              (unsigned long long)h);
    }
    free(buf);
    return st;
}
