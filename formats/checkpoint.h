/* formats/checkpoint.h — the storage layer of sharded training
 * checkpoints: files, formats, atomic publication, rotation, validation and
 * ranged reads. It knows nothing of models or optimizers; the engine says
 * which named vectors a rank saves and what the metadata holds.
 *
 * Layout of a checkpoint folder DIR:
 *   DIR/step-00000120/meta.json       written by rank 0
 *   DIR/step-00000120/rank-00000.bin  one shard file per rank, by that rank
 *   DIR/latest                        "step-00000120\n", written by rank 0
 * Every file appears whole or not at all (temp file, fsync, rename, folder
 * sync: common/atomic_file.h). A step folder is *complete* when meta.json
 * reads and every shard file it lists is present with the listed size; a
 * folder without meta.json is a write that never finished.
 *
 * Saving, with the caller doing the collective parts:
 *   rank 0:   ckpt_dir_prepare                  (mkdir; clears a leftover)
 *   all:      barrier
 *   each:     ckpt_shard_writer_* → its rank-NNNNN.bin; bytes and checksum
 *   all:      gather of (bytes, checksum) to rank 0; barrier
 *   rank 0:   ckpt_meta_write, ckpt_publish, ckpt_rotate
 * A crash anywhere before ckpt_publish leaves DIR/latest naming the previous
 * checkpoint, which stays intact: rotation only runs after publication and
 * never removes the folder latest names. DIR must be one folder every rank
 * sees (a shared filesystem).
 *
 * Loading: ckpt_resolve (a path a user gave: a step folder or DIR) or
 * ckpt_find_latest (cheap completeness check), ckpt_validate
 * (every byte checksummed), then each rank opens the shard files it needs
 * and reads element ranges with ckpt_shard_read; after a change of world
 * size a rank reads pieces of several old shards (resharding), which is
 * why reads are ranged and cost only the bytes asked for.
 *
 * Shard file format, version 1, little-endian:
 *   0   char[8] "ZTCKSHRD"
 *   8   u32 version (1)     12  u32 rank     16  u32 world    20  u32 n_sections
 *   24  n_sections entries of 64 bytes:
 *       char name[32] (NUL-padded, printable ASCII, no spaces)
 *       u32 dtype (file code: F32 0, F64 1, BF16 2, F16 3, I32 4, I64 5, U8 6)
 *       u32 reserved (0)   u64 count (elements)
 *       u64 offset (of the section's first byte, from the file start)
 *       u64 checksum (FNV-1a 64 of the section's bytes)
 *   then the sections' bytes, contiguous, in table order, to the end of the
 *   file. Elements are stored as little-endian hosts hold them; the code
 *   refuses to run on a big-endian host rather than write other files.
 * The layout is canonical (no gaps, no padding, names zero-padded), so every
 * byte of a shard is covered either by a section checksum or by the
 * header's own digest, the *file checksum*: FNV-1a 64 of bytes [0, 24 +
 * 64 n) — the header, whose table holds every section's checksum. meta.json
 * records it with the file's size; it is a digest of the whole file that
 * the writer can produce without reading the data back.
 *
 * meta.json is one JSON object with the fields of struct ckpt_meta (see
 * ckpt_meta_write); 64-bit integers are written and read exactly, file
 * checksums are "0x" + 16 hex digits. Format 2 added the "model" and
 * "optimizer" objects (in place of version 1's GPT-2 shape keys); format
 * 3 the "base" object (frozen units kept outside the shards), format 4 the
 * "layout" object and, per unit, its "pipeline_stage" and (tensor
 * parallelism) "slice_numel". "lora" may be in any.
 *
 * Errors: a bad or incomplete checkpoint is ZT_ERR_CHECKPOINT, a failing
 * system call ZT_ERR_IO, impossible arguments ZT_ERR_USAGE, allocation
 * failure ZT_ERR_NOMEM. Every message starts with the file it is about
 * ("CKPT/step-00000120/rank-00001.bin: truncated: 1000 bytes, meta.json
 * says 4096"). Calls in the wrong writer state are bugs and assert.
 */
#ifndef ZT_FORMATS_CHECKPOINT_H
#define ZT_FORMATS_CHECKPOINT_H

#include <stddef.h>
#include <stdint.h>

#include "../common/dtype.h"
#include "../common/kvlist.h"
#include "../common/status.h"

/* meta.json "format_version": 4 when the ranks were laid out on more
 * than the data-parallel axis (struct ckpt_layout: a reader that does not
 * know the layout would take the wrong file for a piece), 3 when the base
 * is kept outside the shards (struct ckpt_base), else 2; 1 .. 3 are still
 * read. */
#define CKPT_FORMAT_VERSION     4u
#define CKPT_SHARD_MAGIC        "ZTCKSHRD"
#define CKPT_SHARD_VERSION      1u
#define CKPT_SHARD_HEADER_BYTES 24u
#define CKPT_SHARD_ENTRY_BYTES  64u
#define CKPT_SECTION_NAME_MAX   32 /* bytes, the terminating NUL included */
#define CKPT_STEP_NAME_MAX      32 /* "step-" + up to 19 digits + NUL fits */
#define CKPT_META_MAX_BYTES     (64u << 20)
#define CKPT_META_NAME          "meta.json"
#define CKPT_LATEST_NAME        "latest"

/* ---- shard files ---- */

/* One section of an open shard file. */
struct ckpt_section {
    char name[CKPT_SECTION_NAME_MAX];
    enum zt_dtype dtype;
    uint64_t count;    /* elements */
    uint64_t offset;   /* of the first byte, from the start of the file */
    uint64_t checksum; /* FNV-1a 64 of the section's count * size bytes */
};

/* What the header of an open shard says. Owned by the struct ckpt_shard. */
struct ckpt_shard_header {
    int rank, world, n_sections;
    const struct ckpt_section *sections; /* n_sections, in file order */
    uint64_t file_bytes;                 /* the file's size */
    uint64_t file_checksum;              /* FNV-1a 64 of the header bytes */
};

struct ckpt_shard;
struct ckpt_shard_writer;

/* Starts the shard file of `rank` (0 <= rank < world) at `path`; the temp
 * file PATH.tmp.<pid> is created now, so an unwritable folder is reported
 * before any work. *out is the writer, NULL on error. Statuses:
 * ZT_ERR_USAGE (rank, world), ZT_ERR_UNSUPPORTED (big-endian host),
 * ZT_ERR_IO, ZT_ERR_NOMEM.
 *
 *   writer_open ──► DECLARING ──begin──► WRITING ──finish──► (PATH; freed)
 *                   add ↺                write ↺
 *   writer_abort from any state: temp file removed, freed. */
zt_status ckpt_shard_writer_open(const char *path, int rank, int world,
                                 struct ckpt_shard_writer **out);

/* Declares the next section (DECLARING state): `count` elements of
 * `dtype`; name is copied. On error nothing is declared and w stays usable.
 * ZT_ERR_USAGE: a name that is empty, longer than 31 bytes, has bytes
 * outside '!' .. '~' or is already declared; a dtype outside enum zt_dtype;
 * a file size that would overflow. ZT_ERR_NOMEM. */
zt_status ckpt_shard_writer_add(struct ckpt_shard_writer *w, const char *name, enum zt_dtype dtype,
                                uint64_t count);

/* Writes the header (checksums still zero; finish fills them in) and moves
 * to WRITING. ZT_ERR_IO, ZT_ERR_NOMEM; after either only
 * ckpt_shard_writer_abort. */
zt_status ckpt_shard_writer_begin(struct ckpt_shard_writer *w);

/* Appends the next `count` elements (WRITING state), raw bytes of the
 * dtype, continuing across sections in declaration order: `data` holds, in
 * order, the rest of the current section, then whole sections, then the
 * start of the next, each at its own element size. Any chunking gives the
 * same file. ZT_ERR_USAGE (more elements than declared remain; nothing is
 * written), ZT_ERR_IO (after it only ckpt_shard_writer_abort). */
zt_status ckpt_shard_writer_write(struct ckpt_shard_writer *w, const void *data, uint64_t count);

/* Completes the file (WRITING state): checks that every declared element
 * was written, rewrites the header with the section checksums, syncs the
 * file, renames it over PATH and syncs the folder. Sets *file_bytes and
 * *file_checksum (either may be NULL) for meta.json. Frees w whatever the
 * outcome; on error the temp file is removed and PATH is left as it was.
 * ZT_ERR_USAGE (elements missing), ZT_ERR_IO, ZT_ERR_NOMEM. */
zt_status ckpt_shard_writer_finish(struct ckpt_shard_writer *w, uint64_t *file_bytes,
                                   uint64_t *file_checksum);

/* Discards the file being written: removes the temp file, frees w; PATH is
 * left as it was. NULL is allowed. */
void ckpt_shard_writer_abort(struct ckpt_shard_writer *w);

/* Opens a shard file and checks its header against the format and the
 * file's size (magic, version, rank < world, every table entry, the
 * canonical layout, the size). Section data is not read. *out is the
 * handle (close with ckpt_shard_close), NULL on error. Statuses:
 * ZT_ERR_IO (missing or unreadable), ZT_ERR_CHECKPOINT (any breach of the
 * format, naming the field), ZT_ERR_NOMEM. */
zt_status ckpt_shard_open(const char *path, struct ckpt_shard **out);

/* The header of an open shard; valid until ckpt_shard_close. */
const struct ckpt_shard_header *ckpt_shard_header(const struct ckpt_shard *s);

/* The section called `name`, or NULL if the shard has none; owned by s. */
const struct ckpt_section *ckpt_shard_find(const struct ckpt_shard *s, const char *name);

/* Reads elements [first, first + count) of section `sec` (one of s's) into
 * dst as raw bytes of the section's dtype, with pread: only those bytes are
 * read, and several threads may read one handle. Not checksummed (a range
 * is not the unit of the checksum): ckpt_shard_verify or ckpt_validate
 * vouch for the file. ZT_ERR_USAGE (range beyond the section), ZT_ERR_IO,
 * ZT_ERR_CHECKPOINT (the file shrank since it was opened). */
zt_status ckpt_shard_read(struct ckpt_shard *s, const struct ckpt_section *sec, uint64_t first,
                          uint64_t count, void *dst);

/* Reads every section and compares its FNV-1a 64 with the header's.
 * ZT_ERR_CHECKPOINT "PATH: checksum mismatch in section 'exp_avg' (stored
 * 0x..., computed 0x...)" or a file that shrank, ZT_ERR_IO, ZT_ERR_NOMEM. */
zt_status ckpt_shard_verify(struct ckpt_shard *s);

/* Closes the file and frees s. NULL is allowed. */
void ckpt_shard_close(struct ckpt_shard *s);

/* ---- metadata (meta.json) ---- */

/* Size and file checksum of one shard file, as ckpt_shard_writer_finish
 * gives them. */
struct ckpt_file {
    uint64_t bytes, checksum;
};

/* LoRA adapters on the model, as PEFT's LoraConfig names them (meta.json
 * "lora": {"r": 8, "lora_alpha": 16, "lora_dropout": 0, "bias": "none",
 * "target_modules": ["c_attn"]}; absent: none, r 0), so that a table can
 * be rebuilt from the checkpoint alone. */
/* A 4-bit base (meta.json "quantization", BitsAndBytesConfig's names;
 * absent: none): what the frozen linear weights were stored as, so that
 * export and resume rebuild the same model. */
struct ckpt_quant {
    int load_in_4bit;
    char quant_type[8]; /* "nf4" or "fp4" */
    int double_quant;
    char compute_dtype[8]; /* "fp32", "bf16" or "fp16" */
};

struct ckpt_lora {
    int r; /* >= 1; 0: no adapters */
    double alpha, dropout;
    char bias[16];
    char **targets; /* n_targets strings: target_modules as resolved */
    int n_targets;
};

/* Where the frozen units' weights are (meta.json "base"). STORED (no
 * "base" key): in the shards, like every unit's. Otherwise no shard holds
 * a frozen unit: they are the file `path` (FILE, {"path": ..., "checksum":
 * "0x...", "bytes": N}: Hugging Face weights whose bytes, every shard of a
 * set in turn, have this FNV-1a 64 and total size) or the initial values
 * drawn from `seed` (SEED, {"init": "seed", "seed": N}), and a loader
 * takes them from there. Such a checkpoint is format 3. */
enum ckpt_base_kind { CKPT_BASE_STORED, CKPT_BASE_FILE, CKPT_BASE_SEED };

struct ckpt_base {
    enum ckpt_base_kind kind;
    char path[4096];          /* FILE: as the run named it */
    uint64_t checksum, bytes; /* FILE */
    uint64_t seed;            /* SEED */
};

/* One checkpoint's description. The pointers are owned by the struct:
 * ckpt_meta_read allocates them, ckpt_meta_free releases them; a caller
 * filling one for ckpt_meta_write owns them as it likes. */
enum { CKPT_UNIT_FROZEN = 1, CKPT_UNIT_NOT_STORED = 2 };

/* The grid the writing ranks stood on (comm/layout.h: rank = tp + T·(dp +
 * D·pp)): tp·pp·dp = world. Unit u is stored by the pipeline stage
 * unit_stage[u]: each tensor-parallel rank t stores its slice of the unit
 * (unit_slice[u] elements, worker/tensor_parallel.h says which), cut into
 * dp pieces of unit_shard[u] elements, piece d in the file of rank (t, d,
 * unit_stage[u]). Tensors that every tensor-parallel rank holds whole
 * (norms, position embeddings) are in every slice; a reader takes them from
 * t = 0. A checkpoint without "layout" (formats 1 .. 3) is {1, 1, world}
 * with every unit on stage 0. vocab_padded: the rows of the padded
 * vocabulary the slices were cut from (worker/tensor_parallel.h: their
 * padding rows, zero, map to nothing of the model), 0 when unpadded; in
 * meta.json "layout" as "vocab_padded", absent when 0. */
struct ckpt_layout {
    int tp, pp, dp;
    int64_t vocab_padded;
};

/* The rank at coordinates (tp, pp, dp) of grid l, and rank r's
 * coordinates: comm/layout.h's placement, which the files are named by. */
static inline int ckpt_layout_rank(const struct ckpt_layout *l, int tp, int pp, int dp)
{
    return tp + l->tp * (dp + l->dp * pp);
}
/* Elements a file holds of a unit's slice of `numel` cut into pieces of
 * `share`: piece `piece`'s, which the last pieces may have fewer of (or
 * none). Writers size their sections by it; readers find a unit in them. */
static inline uint64_t ckpt_piece_elements(uint64_t numel, uint64_t share, int piece)
{
    uint64_t lo = share * (uint64_t)piece, hi = lo + share;
    hi = hi < numel ? hi : numel;
    return hi > lo ? hi - lo : 0;
}

static inline void ckpt_layout_coords(const struct ckpt_layout *l, int r, int *tp, int *pp, int *dp)
{
    *tp = r % l->tp;
    *dp = r / l->tp % l->dp;
    *pp = r / (l->tp * l->dp);
}

struct ckpt_meta {
    uint32_t format_version; /* set by ckpt_meta_read; the writer picks it (2 .. 4) */
    int64_t step;            /* >= 0 */
    int world;               /* ranks that wrote it, >= 1 */
    int stage;               /* ZeRO stage 0 .. 3 */
    char precision[16];      /* "fp32", "bf16", "fp16" */
    /* What the writer's matrix products ran on ("onednn 2.6.3
     * brg:avx512_core"): a record for whoever compares runs, never checked
     * on resume. In meta.json "gemm", absent when empty (older files). */
    char gemm[128];
    char *config_yaml;    /* the resolved config (owned; valid UTF-8) */
    int n_units;          /* >= 0 */
    uint64_t *unit_numel; /* per unit: real elements of the whole model (owned, n_units) */
    /* Per unit: elements of one tensor-parallel rank's slice (owned; a
     * writer may leave it NULL when layout.tp is 1; ckpt_meta_read always
     * fills it, with unit_numel when tp is 1). In meta.json "slice_numel",
     * present when tp > 1. */
    uint64_t *unit_slice;
    uint64_t *unit_shard; /* per unit: elements per data-parallel piece of the slice (owned) */
    /* Per unit: CKPT_UNIT_FROZEN when it was frozen, so its shards hold the
     * weights ("master") but no optimizer state sections;
     * CKPT_UNIT_NOT_STORED when it is frozen and not in the shards at all
     * (a 4-bit base, rebuilt from the weights it was loaded from); 0 when
     * it trains (owned, n_units; a writer may leave it NULL for none;
     * ckpt_meta_read always fills it). In meta.json "frozen": true on the
     * unit, and "stored": false, absent when it trains. */
    unsigned char *unit_frozen;
    struct ckpt_layout layout; /* a writer's zeroed layout is {1, 1, world} */
    int *unit_stage;           /* per unit (owned; a writer may leave it NULL for 0) */
    uint64_t n_params;
    /* The model family and its shape ("model": {"family": "gpt2", ...}) and
     * the optimizer with its hyperparameters ("optimizer": {"type":
     * "AdamW", ...}), as their modules describe themselves; this layer
     * stores them without knowing them. Version-1 files had neither: they
     * read as GPT-2 (from the flat shape keys they had) and AdamW (no
     * hyperparameters recorded). */
    struct zt_kvlist model, optimizer;
    uint64_t seed;
    uint64_t samples_seen; /* data sampler position */
    double loss_scale;     /* finite */
    int64_t scaler_good_steps;
    int scaler_hysteresis;
    int64_t optimizer_steps;
    struct ckpt_file *files; /* owned, `world` entries: rank r's shard file */
    struct ckpt_lora lora;   /* r 0: none */
    struct ckpt_quant quant; /* load_in_4bit 0: none */
    struct ckpt_base base;
};

/* Whether unit u's weights are in the checkpoint's shards (a frozen unit's
 * are not when the base is kept elsewhere). */
static inline int ckpt_meta_unit_stored(const struct ckpt_meta *m, int u)
{
    if (m->unit_frozen && m->unit_frozen[u] == CKPT_UNIT_NOT_STORED)
        return 0;
    return m->base.kind == CKPT_BASE_STORED || !m->unit_frozen || !m->unit_frozen[u];
}

/* Writes m as JSON to `path` atomically. The owner keeps m. ZT_ERR_USAGE
 * when m could not be read back (world < 1, stage outside 0..3, unknown
 * precision, step < 0, negative sizes, non-finite loss scale, config text
 * that is not UTF-8, NULL arrays), ZT_ERR_IO, ZT_ERR_NOMEM. */
zt_status ckpt_meta_write(const char *path, const struct ckpt_meta *m);

/* Reads meta.json into *out (overwritten; free with ckpt_meta_free).
 * Strict: every key present once with its type and range; keys it does not
 * know are ignored. On error *out is zeroed. ZT_ERR_CHECKPOINT ("PATH: not
 * valid JSON at byte 57: ...", "PATH: missing key 'world'", "PATH: format
 * version 3 is newer than this zerotrain understands (1)", ...), ZT_ERR_IO,
 * ZT_ERR_NOMEM. */
zt_status ckpt_meta_read(const char *path, struct ckpt_meta *out);

/* Frees what m owns and zeroes it; NULL-safe and idempotent. */
void ckpt_meta_free(struct ckpt_meta *m);

/* ---- checkpoint folders ---- */

/* "step-00000120" (at least 8 digits) into buf; n >= CKPT_STEP_NAME_MAX
 * and step >= 0 are asserted. */
void ckpt_step_dirname(int64_t step, char *buf, size_t n);

/* "STEP_DIR/rank-00002.bin" and "STEP_DIR/meta.json" into buf.
 * ZT_ERR_USAGE when it does not fit in n bytes. */
zt_status ckpt_shard_path(const char *step_dir, int rank, char *buf, size_t n);
zt_status ckpt_meta_path(const char *step_dir, char *buf, size_t n);

/* Creates DIR (and its parents) and an empty DIR/step-NNNNNNNN, whose path
 * goes to step_dir (n bytes). A folder of that name left by an earlier
 * attempt is removed first, complete or not, unless DIR/latest names it.
 * Rank 0 only, before the barrier that precedes the shard writes.
 * ZT_ERR_CHECKPOINT (the folder is the published checkpoint), ZT_ERR_IO,
 * ZT_ERR_USAGE (step < 0, a path that does not fit). */
zt_status ckpt_dir_prepare(const char *dir, int64_t step, char *step_dir, size_t n);

/* Points DIR/latest at step `step`, atomically, after checking that the
 * step folder is complete (sizes, not checksums). Rank 0, after every rank
 * finished its shard and meta.json is written. ZT_ERR_CHECKPOINT (the step
 * is not complete, with the reason), ZT_ERR_IO, ZT_ERR_NOMEM. */
zt_status ckpt_publish(const char *dir, int64_t step);

/* Reads DIR/latest. *found = 0 (and ZT_OK) when DIR or DIR/latest does
 * not exist; else *found = 1 and step_dir gets "DIR/step-NNNNNNNN" once the
 * folder is checked complete (sizes, not checksums: ckpt_validate does
 * those). ZT_ERR_CHECKPOINT when latest is malformed or names a step that
 * is not a complete checkpoint ("DIR/latest names step-00000100, which is
 * not a complete checkpoint (meta.json missing)"), ZT_ERR_IO, ZT_ERR_USAGE
 * (step_dir too small). */
zt_status ckpt_find_latest(const char *dir, char *step_dir, size_t n, int *found);

/* Resolves a checkpoint as a user names it: a step folder (one holding
 * meta.json) as it is, or a checkpoint folder (one holding `latest`) to
 * the step folder latest names, checked complete as ckpt_find_latest does.
 * step_dir gets the step folder's path (trailing slashes of `path` left
 * out). Every command that takes a checkpoint goes through here, so each
 * accepts both. ZT_ERR_CHECKPOINT when path is neither, saying what was
 * expected ("DIR: neither a checkpoint (no meta.json) nor a checkpoint
 * folder (no `latest` file): expected a step-NNNNNNNN folder or the
 * checkpoint.dir holding them"), a step folder that was never completed,
 * or a latest that is malformed or names an incomplete step; ZT_ERR_IO
 * (unreadable), ZT_ERR_USAGE (no such folder: the path given is wrong;
 * step_dir too small). */
zt_status ckpt_resolve(const char *path, char *step_dir, size_t n);

/* Keeps the `keep` (>= 1) newest complete step folders and every folder
 * newer than the oldest of them; removes all older step folders, complete
 * or not, except the one DIR/latest names. Only names of the form
 * step-NNNNNNNN are touched; meta.json goes first, so a removal cut short
 * leaves an incomplete folder that a later rotation removes. Call after
 * ckpt_publish. ZT_ERR_USAGE (keep < 1), ZT_ERR_CHECKPOINT (DIR/latest
 * missing or malformed), ZT_ERR_IO, ZT_ERR_NOMEM. */
zt_status ckpt_rotate(const char *dir, int keep);

/* Removes the checkpoint folder `dir` and everything in it (rm -r, links
 * not followed); a missing one is no error. For a checkpoint written only
 * to be read once (a run's final export). ZT_ERR_IO, ZT_ERR_NOMEM. */
zt_status ckpt_remove(const char *dir);

/* Checks a step folder completely: meta.json (strict), then for each rank
 * its shard file's presence, size, header (format, rank and world), file
 * checksum and every section checksum. On success the metadata goes to
 * *meta_out if it is not NULL (free with ckpt_meta_free); on error
 * *meta_out is zeroed. ZT_ERR_CHECKPOINT naming the file and the problem
 * (a folder without meta.json: "STEP_DIR/meta.json: missing: the
 * checkpoint was never completed"), ZT_ERR_IO (no such folder, unreadable
 * files), ZT_ERR_NOMEM. */
zt_status ckpt_validate(const char *step_dir, struct ckpt_meta *meta_out);

#endif
