/* data/tokfile.c — reading and writing token files (format in data.h).
 *
 * A token file is the handoff between `zerotrain prepare` and training, and
 * a run may read one that is days old, copied between machines or cut short
 * by a full disk. So the reader trusts nothing: it checks the magic, the
 * version, every header field and the file size (from fstat, before it
 * allocates anything) and the FNV-1a checksum, and names the file and the
 * field in every message. The checksum is compared before the ids are
 * range-checked: in a corrupt file an id out of range is only a symptom, and
 * "the file is corrupt" is the message that tells the user what to do.
 *
 * Both directions stream through one chunk (DATA_CHUNK_BYTES) with explicit
 * little-endian packing, so files are identical on every host and neither
 * side ever holds two copies of the tokens. The writer goes through an
 * atomic_file (common/atomic_file.h) so that an interrupted `prepare` never
 * leaves a file that looks complete.
 */
#include "data.h"
#include "data_impl.h"

#include "../common/atomic_file.h"
#include "../common/fnv.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>

/* The header as its fields, independent of how a struct would be laid out. */
struct header {
    uint32_t version, width, vocab_size, reserved;
    uint64_t count, checksum;
};

uint64_t tokfile_checksum(const void *bytes, size_t n)
{
    return zt_fnv1a(ZT_FNV_OFFSET, bytes, n);
}

static void put_le(unsigned char *p, uint64_t v, int nbytes)
{
    for (int i = 0; i < nbytes; i++)
        p[i] = (unsigned char)(v >> (8 * i));
}

static uint64_t get_le(const unsigned char *p, int nbytes)
{
    uint64_t v = 0;
    for (int i = 0; i < nbytes; i++)
        v |= (uint64_t)p[i] << (8 * i);
    return v;
}

static void header_pack(const struct header *h, unsigned char out[ZT_TOKFILE_HEADER_SIZE])
{
    memcpy(out, ZT_TOKFILE_MAGIC, 8);
    put_le(out + 8, h->version, 4);
    put_le(out + 12, h->width, 4);
    put_le(out + 16, h->vocab_size, 4);
    put_le(out + 20, h->reserved, 4);
    put_le(out + 24, h->count, 8);
    put_le(out + 32, h->checksum, 8);
}

static void header_unpack(const unsigned char in[ZT_TOKFILE_HEADER_SIZE], struct header *h)
{
    h->version = (uint32_t)get_le(in + 8, 4);
    h->width = (uint32_t)get_le(in + 12, 4);
    h->vocab_size = (uint32_t)get_le(in + 16, 4);
    h->reserved = (uint32_t)get_le(in + 20, 4);
    h->count = get_le(in + 24, 8);
    h->checksum = get_le(in + 32, 8);
}

zt_status data_open_error(const char *path, int err)
{
    if (err == ENOENT)
        return zt_error_set(ZT_ERR_IO, "%s: no such file or directory", path);
    return zt_error_set(ZT_ERR_IO, "%s: cannot open: %s", path, strerror(err));
}

/* Width and vocab rules shared by reader and writer: the vocab must be
 * non-empty and every id below it must fit the width. */
static zt_status check_width_vocab(const char *path, uint32_t width, uint32_t vocab_size)
{
    if (width != 1 && width != 2 && width != 4)
        return zt_error_set(ZT_ERR_DATA, "%s: token width %u not supported (1, 2 or 4)", path,
                            (unsigned)width);
    /* Ids are int32 in memory, so 4-byte ids stop below 2^31. */
    uint64_t max_vocab = width == 4 ? INT32_MAX : (uint64_t)1 << (8 * width);
    if (vocab_size == 0 || vocab_size > max_vocab)
        return zt_error_set(ZT_ERR_DATA, "%s: vocab size %u does not fit %u-byte ids (1 .. %llu)",
                            path, (unsigned)vocab_size, (unsigned)width,
                            (unsigned long long)max_vocab);
    return ZT_OK;
}

/* ---- writing ---- */

static zt_status write_bytes(FILE *f, const char *tmp, const void *p, size_t n)
{
    if (n && fwrite(p, 1, n, f) != n)
        return zt_error_set(ZT_ERR_IO, "%s: write failed: %s", tmp, strerror(errno));
    return ZT_OK;
}

/* Streams the tokens packed to `width` bytes; returns their checksum. */
static zt_status write_body(FILE *f, const char *tmp, const int32_t *tokens, size_t n,
                            uint32_t width, unsigned char *chunk, uint64_t *checksum)
{
    size_t per_chunk = DATA_CHUNK_BYTES / width;
    uint64_t h = ZT_FNV_OFFSET;
    for (size_t start = 0; start < n; start += per_chunk) {
        size_t m = n - start < per_chunk ? n - start : per_chunk;
        for (size_t i = 0; i < m; i++)
            put_le(chunk + i * width, (uint32_t)tokens[start + i], (int)width);
        h = zt_fnv1a(h, chunk, m * width);
        ZT_TRY(write_bytes(f, tmp, chunk, m * width));
    }
    *checksum = h;
    return ZT_OK;
}

/* Header (checksum unknown yet), body, then the header again with the
 * checksum: one pass over the tokens. */
static zt_status write_file(FILE *f, const char *tmp, const int32_t *tokens, size_t n,
                            uint32_t width, uint32_t vocab_size)
{
    struct header h = {ZT_TOKFILE_VERSION, width, vocab_size, 0, (uint64_t)n, 0};
    unsigned char head[ZT_TOKFILE_HEADER_SIZE];
    header_pack(&h, head);
    ZT_TRY(write_bytes(f, tmp, head, sizeof head));
    unsigned char *chunk = malloc(DATA_CHUNK_BYTES);
    if (!chunk)
        return zt_error_set(ZT_ERR_NOMEM, "%s: cannot allocate the write buffer", tmp);
    zt_status st = write_body(f, tmp, tokens, n, width, chunk, &h.checksum);
    free(chunk);
    ZT_TRY(st);
    header_pack(&h, head);
    if (fseek(f, 0, SEEK_SET) != 0)
        return zt_error_set(ZT_ERR_IO, "%s: seek failed: %s", tmp, strerror(errno));
    ZT_TRY(write_bytes(f, tmp, head, sizeof head));
    return ZT_OK;
}

static zt_status check_ids(const char *path, const int32_t *tokens, size_t n, uint32_t vocab_size)
{
    for (size_t i = 0; i < n; i++)
        if (tokens[i] < 0 || (uint32_t)tokens[i] >= vocab_size)
            return zt_error_set(ZT_ERR_DATA,
                                "%s: token id %ld at position %zu is outside the vocab 0 .. %u",
                                path, (long)tokens[i], i, (unsigned)(vocab_size - 1));
    return ZT_OK;
}

zt_status tokfile_write(const char *path, const int32_t *tokens, size_t n, uint32_t width,
                        uint32_t vocab_size)
{
    ZT_TRY(check_width_vocab(path, width, vocab_size));
    ZT_TRY(check_ids(path, tokens, n, vocab_size));
    struct atomic_file out;
    ZT_TRY(atomic_file_open(path, &out));
    zt_status st = write_file(out.f, out.tmp_path, tokens, n, width, vocab_size);
    if (st != ZT_OK) {
        atomic_file_abort(&out);
        return st;
    }
    ZT_TRY(atomic_file_commit(&out));
    return ZT_OK;
}

/* ---- reading ---- */

/* Reads the header from a file of `size` bytes and checks every field,
 * including that the body has exactly count * width bytes. */
static zt_status read_header(FILE *f, const char *path, uint64_t size, struct header *h)
{
    unsigned char head[ZT_TOKFILE_HEADER_SIZE];
    size_t have = size < sizeof head ? (size_t)size : sizeof head;
    if (fread(head, 1, have, f) != have)
        return zt_error_set(ZT_ERR_IO, "%s: read failed: %s", path, strerror(errno));
    size_t magic_have = have < 8 ? have : 8;
    if (memcmp(head, ZT_TOKFILE_MAGIC, magic_have) != 0)
        return zt_error_set(ZT_ERR_DATA, "%s: not a token file (bad magic)", path);
    if (have < sizeof head)
        return zt_error_set(ZT_ERR_DATA,
                            "%s: truncated: the header needs %d bytes but the file has %zu", path,
                            ZT_TOKFILE_HEADER_SIZE, have);
    header_unpack(head, h);
    if (h->version > ZT_TOKFILE_VERSION)
        return zt_error_set(ZT_ERR_DATA,
                            "%s: token file version %u is newer than this zerotrain "
                            "understands (%u)",
                            path, (unsigned)h->version, (unsigned)ZT_TOKFILE_VERSION);
    if (h->version != ZT_TOKFILE_VERSION)
        return zt_error_set(ZT_ERR_DATA, "%s: token file version %u is not valid (expected %u)",
                            path, (unsigned)h->version, (unsigned)ZT_TOKFILE_VERSION);
    ZT_TRY(check_width_vocab(path, h->width, h->vocab_size));
    if (h->reserved != 0)
        return zt_error_set(ZT_ERR_DATA, "%s: reserved header field is %u, expected 0", path,
                            (unsigned)h->reserved);
    uint64_t body = size - ZT_TOKFILE_HEADER_SIZE;
    if (h->count > UINT64_MAX / h->width || h->count * h->width != body) {
        const char *what = h->count > body / h->width ? "truncated: " : "";
        return zt_error_set(ZT_ERR_DATA,
                            "%s: %sheader says %llu tokens (%llu bytes) but the file has %llu "
                            "bytes of tokens",
                            path, what, (unsigned long long)h->count,
                            (unsigned long long)(h->count * h->width), (unsigned long long)body);
    }
    return ZT_OK;
}

/* Streams the body into out->tokens, hashing as it goes; remembers the
 * first id out of range so that the checksum verdict can come first. */
static zt_status read_body(FILE *f, const char *path, const struct header *h, unsigned char *chunk,
                           int32_t *tokens)
{
    uint64_t hash = ZT_FNV_OFFSET;
    size_t per_chunk = DATA_CHUNK_BYTES / h->width, n = (size_t)h->count;
    size_t bad_pos = SIZE_MAX;
    for (size_t start = 0; start < n; start += per_chunk) {
        size_t m = n - start < per_chunk ? n - start : per_chunk;
        size_t got = fread(chunk, h->width, m, f);
        if (got != m)
            return ferror(f)
                       ? zt_error_set(ZT_ERR_IO, "%s: read failed: %s", path, strerror(errno))
                       : zt_error_set(ZT_ERR_DATA,
                                      "%s: truncated: the file shrank while being read", path);
        hash = zt_fnv1a(hash, chunk, m * h->width);
        for (size_t i = 0; i < m; i++) {
            uint32_t id = (uint32_t)get_le(chunk + i * h->width, (int)h->width);
            tokens[start + i] = (int32_t)id;
            if (id >= h->vocab_size && bad_pos == SIZE_MAX)
                bad_pos = start + i;
        }
    }
    if (hash != h->checksum)
        return zt_error_set(ZT_ERR_DATA,
                            "%s: checksum mismatch (header 0x%016llx, data 0x%016llx): the file "
                            "is corrupt",
                            path, (unsigned long long)h->checksum, (unsigned long long)hash);
    if (bad_pos != SIZE_MAX)
        return zt_error_set(ZT_ERR_DATA, "%s: token id %lu at position %zu is >= vocab size %u",
                            path, (unsigned long)(uint32_t)tokens[bad_pos], bad_pos,
                            (unsigned)h->vocab_size);
    return ZT_OK;
}

/* Allocates the token array and reads the body into it. */
static zt_status read_tokens(FILE *f, const char *path, const struct header *h,
                             struct token_buffer *out)
{
    if (h->count > SIZE_MAX / sizeof(int32_t))
        return zt_error_set(ZT_ERR_NOMEM, "%s: %llu tokens do not fit in memory", path,
                            (unsigned long long)h->count);
    size_t n = (size_t)h->count;
    int32_t *tokens = malloc(n ? n * sizeof *tokens : 1);
    unsigned char *chunk = malloc(DATA_CHUNK_BYTES);
    zt_status st = ZT_OK;
    if (!tokens || !chunk)
        st = zt_error_set(ZT_ERR_NOMEM, "%s: cannot allocate %zu tokens (%zu bytes)", path, n,
                          n * sizeof *tokens);
    else
        st = read_body(f, path, h, chunk, tokens);
    free(chunk);
    if (st != ZT_OK) {
        free(tokens);
        return st;
    }
    *out = (struct token_buffer){tokens, n, h->vocab_size, n, NULL};
    return ZT_OK;
}

/* Opens `path` and checks its header against its size; on success *fp is
 * left open just after the header (the caller closes it). */
static zt_status open_checked(const char *path, FILE **fp, struct header *h)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return data_open_error(path, errno);
    struct stat sb;
    zt_status st = ZT_OK;
    if (fstat(fileno(f), &sb) != 0)
        st = zt_error_set(ZT_ERR_IO, "%s: cannot stat: %s", path, strerror(errno));
    else if (!S_ISREG(sb.st_mode))
        st = zt_error_set(ZT_ERR_DATA, "%s: not a regular file", path);
    else
        st = read_header(f, path, (uint64_t)sb.st_size, h);
    if (st != ZT_OK) {
        fclose(f);
        return st;
    }
    *fp = f;
    return ZT_OK;
}

zt_status tokfile_read(const char *path, struct token_buffer *out)
{
    *out = (struct token_buffer){0};
    FILE *f;
    struct header h = {0};
    ZT_TRY(open_checked(path, &f, &h));
    zt_status st = read_tokens(f, path, &h, out);
    fclose(f);
    return st;
}

zt_status tokfile_check(const char *path)
{
    FILE *f;
    struct header h = {0};
    ZT_TRY(open_checked(path, &f, &h));
    fclose(f);
    return ZT_OK;
}

int tokfile_is_named(const char *path)
{
    size_t n = strlen(path);
    return n >= 4 && strcmp(path + n - 4, ".tok") == 0;
}

int tokfile_is_tokfile(const char *path)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return 0;
    char magic[8];
    int yes = fread(magic, 1, sizeof magic, f) == sizeof magic &&
              memcmp(magic, ZT_TOKFILE_MAGIC, sizeof magic) == 0;
    fclose(f);
    return yes;
}
