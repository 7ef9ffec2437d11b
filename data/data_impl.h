/* data/data_impl.h — helpers shared by the data module's files; not part
 * of the public contract (data.h), included only by the sources in data/.
 *
 * The reading code in tokfile.c and dataset.c streams files through one
 * fixed-size chunk so that memory is the token array plus one chunk (a
 * tokenizer that cannot take pieces adds one file), and both grow token
 * buffers the same way; dataset.c also asks the tokenizer table two things
 * data.h does not expose.
 */
#ifndef ZT_DATA_IMPL_H
#define ZT_DATA_IMPL_H

#include <stddef.h>
#include <sys/stat.h>

#include "data.h"

/* Bytes per fread/fwrite: large enough to amortise the calls, small enough
 * to stay out of the way of the token array. */
#define DATA_CHUNK_BYTES ((size_t)1 << 20)

/* Grows b->capacity to hold at least `extra` more tokens (geometric growth,
 * so repeated appends cost amortised O(1) per token). `what` names the
 * input for the message. Errors: ZT_ERR_NOMEM. */
zt_status data_buffer_reserve(struct token_buffer *b, size_t extra, const char *what);

/* The byte tokenizer as an open tokenizer (static: never closed), what
 * dataset_load_with uses when it is given none. */
const struct tokenizer *tokenizer_default(void);

/* Whether the tokenizer may be given a file in pieces cut anywhere (the
 * tokens of the pieces are those of the whole): the byte tokenizer may,
 * GPT-2's BPE may not (a piece boundary would split words). */
int tokenizer_streams(const struct tokenizer *t);

/* "DIR/NAME" in a new string (the caller frees it; NULL when out of
 * memory), with no second slash when dir ends in one. */
char *data_join_path(const char *dir, const char *name);

/* The message for a failed open() or stat() of `path` with errno `err`:
 * "PATH: no such file or directory" for ENOENT, else "PATH: cannot
 * open: <strerror>". Returns ZT_ERR_IO. */
zt_status data_open_error(const char *path, int err);

/* ZT_OK when `path` exists or cannot be told missing; else `code` with
 * "PATH: no such WHAT (HINT)": a tokenizer's missing folder or file is the
 * usual first mistake, and the hint says how to get one. */
zt_status data_check_present(const char *path, const char *what, zt_status code, const char *hint);

/* A list of paths; a zeroed struct is empty. */
struct data_path_list {
    char **v; /* owned strings */
    size_t n, cap;
};

/* Frees the paths and leaves *l empty. */
void data_path_list_free(struct data_path_list *l);

/* Every regular file under the folder `root` (sb: its stat), walked as
 * dataset_load_with describes, sorted by path with strcmp, appended to
 * *files (the caller frees it, on error too). Errors: ZT_ERR_IO, ZT_ERR_DATA
 * ("PATH: folder contains no files", a folder loop), ZT_ERR_NOMEM. */
zt_status data_collect_folder(const char *root, const struct stat *sb,
                              struct data_path_list *files);

/* The names name(0) .. name(count - 1), ", " between them, into buf[n]
 * (NUL-terminated, cut short when it does not fit): what the tables of
 * tokenizers and chat templates list in messages. */
void data_names_join(char *buf, size_t n, size_t count, const char *(*name)(size_t i));

struct json_value;

/* The conversation `messages` (the JSON array of a "messages" line at
 * `where`, "PATH:LINE") rendered by tpl and encoded with tok into *out
 * (emptied first, grown; its mask a new array of out->capacity entries, 1
 * on the tokens that count). Errors: ZT_ERR_CONFIG (exit 2: the user's
 * input to fix) naming where and the field (data.h's list), ZT_ERR_NOMEM. */
zt_status chat_encode(const struct chat_template *tpl, const struct tokenizer *tok,
                      const struct json_value *messages, const char *where,
                      struct token_buffer *out);

#endif
