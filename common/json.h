/* common/json.h — the one JSON reader and writer of zerotrain.
 *
 * Two file formats carry JSON: a checkpoint's meta.json and the header of a
 * safetensors file. Both are read whole and parsed into a tree of
 * struct json_value; the reader of the format then walks the tree, asks for
 * members by name and can say which one is missing, repeated or mistyped,
 * and where (every value keeps its byte offset in the text).
 *
 * The text is untrusted: every index is checked against the end, nesting
 * is limited by the caller, UTF-8 is validated (no overlong forms,
 * surrogates or code points past U+10FFFF), escapes are decoded with
 * surrogate pairs joined, and \u0000 is refused so that every decoded
 * string is a C string. A syntax error names the byte (from 0) where the
 * text stops being JSON.
 *
 * Integers (no fraction, no exponent) come back exact from -2^63 to
 * 2^64 - 1 as a sign and a magnitude, accumulated digit by digit and never
 * passed through double: checksums, seeds, sample counters and byte offsets
 * are 64-bit. Other numbers are doubles (strtod) and must be finite.
 *
 * Ownership: json_parse fills a caller-owned root; everything below it
 * (strings, keys, members) is owned by the tree and released by json_free.
 * Objects keep their members in text order, duplicates included: a format
 * decides whether a repeated key is an error (json_object_get counts them).
 */
#ifndef ZT_COMMON_JSON_H
#define ZT_COMMON_JSON_H

#include <stddef.h>
#include <stdint.h>

#include "status.h"

enum json_type { JSON_NULL, JSON_BOOL, JSON_INT, JSON_REAL, JSON_STRING, JSON_ARRAY, JSON_OBJECT };

struct json_value {
    enum json_type type;
    size_t pos;               /* byte offset of the value's first byte in the text */
    int boolean;              /* BOOL */
    int negative;             /* INT: the value is -magnitude (never set for 0) */
    uint64_t magnitude;       /* INT */
    double real;              /* REAL; also INT, rounded */
    char *str;                /* STRING: owned, NUL-terminated UTF-8 */
    size_t n;                 /* ARRAY, OBJECT: members */
    struct json_value *items; /* ARRAY, OBJECT: n values (owned) */
    char **keys;              /* OBJECT: n keys (owned, NUL-terminated UTF-8) */
};

/* What a parse reports its errors as. Messages read
 * "PATH: not valid JSON at byte N: WHAT", or with `part` set
 * "PATH: PART is not valid JSON at byte N: WHAT". */
struct json_source {
    const char *path; /* names the text (a file) */
    const char *part; /* NULL, or which part of the file the text is ("header") */
    zt_status code;   /* the status of a syntax error (ZT_ERR_DATA, ZT_ERR_CHECKPOINT) */
    int max_depth;    /* arrays and objects nested deeper than this are refused (>= 1) */
};

/* Parses len bytes of text (one value, blanks around it allowed) into
 * *out; free it with json_free. On error *out is zeroed; statuses:
 * src->code for text that is not JSON (message as described for
 * struct json_source, naming the byte), ZT_ERR_NOMEM. */
zt_status json_parse(const struct json_source *src, const char *text, size_t len,
                     struct json_value *out);

/* Frees what v owns and zeroes it; NULL-safe, and safe on a zeroed value. */
void json_free(struct json_value *v);

/* "an integer", "a string", ... for messages; never NULL. */
const char *json_type_name(enum json_type t);

/* The first member of object obj called key, or NULL when there is none;
 * *count (if not NULL) gets how many members have that key, so a caller
 * can refuse repeats. The result is owned by obj. */
const struct json_value *json_object_get(const struct json_value *obj, const char *key,
                                         size_t *count);

/* Index of the first byte of s[0..n) that does not start a valid UTF-8
 * sequence (the rules json_parse applies), or n when all of it is valid. */
size_t json_utf8_check(const char *s, size_t n);

/* ---- writing ----
 *
 * JSON is written into a growing text: meta.json and safetensors headers
 * are built in memory, checked, then written whole. A writer puts its
 * pieces without checking each one: an allocation failure is remembered
 * in `oom`, every later put does nothing, and the writer checks `oom` once
 * at the end. The text is always NUL-terminated once anything is in it. */

/* Zero-initialise; the caller frees p. */
struct json_text {
    char *p; /* len bytes and a NUL (NULL before the first put) */
    size_t len, cap;
    int oom; /* an allocation failed: p holds what came before */
};

/* How a string's control bytes are written. Both escape '"' and '\' with
 * a backslash and write every other byte (valid UTF-8, checked by the
 * caller) as it is. */
enum json_escape {
    JSON_ESCAPE_U,     /* every byte below 0x20 as \u00XX */
    JSON_ESCAPE_SHORT, /* \n, \t and \r as such, the other ones as \u00XX */
};

/* Appends n bytes of s. */
void json_text_put(struct json_text *t, const char *s, size_t n);
/* Appends the C string s. */
void json_text_puts(struct json_text *t, const char *s);
/* Appends the printf-formatted text. */
__attribute__((format(printf, 2, 3))) void json_text_printf(struct json_text *t, const char *fmt,
                                                            ...);
/* Appends s as a JSON string, quotes included, escaped as `e` says. */
void json_text_string(struct json_text *t, const char *s, enum json_escape e);
/* Appends v as the shortest number text that reads back as v exactly,
 * with ".0" when it would look like an integer ("10000.0"), so that it
 * reads back as a real (as Python's repr writes floats). JSON has no NaN
 * or infinity: those are written as null, which every reader takes, and
 * a reader that needs a number then says so. */
void json_text_real(struct json_text *t, double v);
/* Appends the tree v (as json_parse gives it: members in their order,
 * integers exact) on one line, its strings escaped as `e` says. */
void json_text_value(struct json_text *t, const struct json_value *v, enum json_escape e);

#endif
