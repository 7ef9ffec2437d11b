/* common/json.c — the JSON reader and writer declared in json.h.
 *
 * Recursive descent over bytes it does not trust. Containers are built in
 * place: a member slot is appended (zeroed, with a NULL key) before it is
 * parsed, so json_free releases a half-built tree completely and an error
 * anywhere needs no unwinding code of its own. Strings are sized by a
 * first pass to the closing quote; integers are accumulated exactly and
 * only fractions and exponents go through strtod (see json.h for why).
 */
#include "json.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct parser {
    const struct json_source *src;
    const unsigned char *p;
    size_t len, i;
    int depth;
};

static zt_status bad(const struct parser *ps, size_t at, const char *what)
{
    const struct json_source *src = ps->src;
    if (src->part)
        return zt_error_set(src->code, "%s: %s is not valid JSON at byte %zu: %s", src->path,
                            src->part, at, what);
    return zt_error_set(src->code, "%s: not valid JSON at byte %zu: %s", src->path, at, what);
}

static zt_status nomem(const struct parser *ps)
{
    return zt_error_set(ZT_ERR_NOMEM, "%s: out of memory while reading the JSON", ps->src->path);
}

static void skip_blank(struct parser *ps)
{
    while (ps->i < ps->len && (ps->p[ps->i] == ' ' || ps->p[ps->i] == '\t' ||
                               ps->p[ps->i] == '\n' || ps->p[ps->i] == '\r'))
        ps->i++;
}

/* The byte at the cursor, or -1 at the end. */
static int cur(const struct parser *ps)
{
    return ps->i < ps->len ? ps->p[ps->i] : -1;
}

static int is_digit(int c)
{
    return c >= '0' && c <= '9';
}

/* ---- UTF-8 ---- */

/* Length of the valid UTF-8 sequence at p (n bytes available), 0 if the
 * bytes there are not one: overlong forms, surrogates and code points past
 * U+10FFFF are refused. */
static size_t utf8_seq(const unsigned char *p, size_t n)
{
    unsigned c = p[0];
    size_t len;
    unsigned cp, min;
    if (c < 0x80)
        return 1;
    if (c >= 0xc2 && c <= 0xdf)
        len = 2, cp = c & 0x1f, min = 0x80;
    else if (c >= 0xe0 && c <= 0xef)
        len = 3, cp = c & 0x0f, min = 0x800;
    else if (c >= 0xf0 && c <= 0xf4)
        len = 4, cp = c & 0x07, min = 0x10000;
    else
        return 0;
    if (n < len)
        return 0;
    for (size_t k = 1; k < len; k++) {
        if ((p[k] & 0xc0) != 0x80)
            return 0;
        cp = (cp << 6) | (p[k] & 0x3f);
    }
    if (cp < min || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff))
        return 0;
    return len;
}

size_t json_utf8_check(const char *s, size_t n)
{
    const unsigned char *p = (const unsigned char *)s;
    size_t i = 0;
    while (i < n) {
        size_t k = utf8_seq(p + i, n - i);
        if (!k)
            return i;
        i += k;
    }
    return n;
}

static size_t put_utf8(char *o, unsigned cp)
{
    if (cp < 0x80) {
        o[0] = (char)cp;
        return 1;
    }
    if (cp < 0x800) {
        o[0] = (char)(0xc0 | (cp >> 6));
        o[1] = (char)(0x80 | (cp & 0x3f));
        return 2;
    }
    if (cp < 0x10000) {
        o[0] = (char)(0xe0 | (cp >> 12));
        o[1] = (char)(0x80 | ((cp >> 6) & 0x3f));
        o[2] = (char)(0x80 | (cp & 0x3f));
        return 3;
    }
    o[0] = (char)(0xf0 | (cp >> 18));
    o[1] = (char)(0x80 | ((cp >> 12) & 0x3f));
    o[2] = (char)(0x80 | ((cp >> 6) & 0x3f));
    o[3] = (char)(0x80 | (cp & 0x3f));
    return 4;
}

/* ---- strings ---- */

/* Four hex digits at p (at least 4 bytes) into *v; 0 if they are not. */
static int hex4(const unsigned char *p, unsigned *v)
{
    *v = 0;
    for (int k = 0; k < 4; k++) {
        unsigned c = p[k], d;
        if (c >= '0' && c <= '9')
            d = c - '0';
        else if ((c | 0x20) >= 'a' && (c | 0x20) <= 'f')
            d = (c | 0x20) - 'a' + 10;
        else
            return 0;
        *v = *v * 16 + d;
    }
    return 1;
}

/* The \u escape whose backslash is at `at` (the cursor is past the 'u'),
 * a surrogate pair joined, into *cp. */
static zt_status unicode_escape(struct parser *ps, size_t at, unsigned *cp)
{
    unsigned hi, lo;
    if (ps->len - ps->i < 4 || !hex4(ps->p + ps->i, &hi))
        return bad(ps, at, "\\u must be followed by 4 hex digits");
    ps->i += 4;
    if (hi >= 0xdc00 && hi <= 0xdfff)
        return bad(ps, at, "unpaired surrogate in a \\u escape");
    if (hi >= 0xd800 && hi <= 0xdbff) {
        if (ps->len - ps->i < 6 || ps->p[ps->i] != '\\' || ps->p[ps->i + 1] != 'u' ||
            !hex4(ps->p + ps->i + 2, &lo) || lo < 0xdc00 || lo > 0xdfff)
            return bad(ps, at, "unpaired surrogate in a \\u escape");
        ps->i += 6;
        hi = 0x10000 + ((hi - 0xd800) << 10) + (lo - 0xdc00);
    }
    if (hi == 0)
        return bad(ps, at, "\\u0000 is not allowed in a string");
    *cp = hi;
    return ZT_OK;
}

/* One escape (cursor on the backslash) decoded into o; *n gets its bytes. */
static zt_status escape(struct parser *ps, char *o, size_t *n)
{
    static const char from[] = "\"\\/bfnrt", to[] = "\"\\/\b\f\n\r\t";
    size_t at = ps->i++;
    int c = cur(ps);
    if (c < 0)
        return bad(ps, at, "unterminated string");
    ps->i++;
    if (c == 'u') {
        unsigned cp = 0;
        ZT_TRY(unicode_escape(ps, at, &cp));
        *n = put_utf8(o, cp);
        return ZT_OK;
    }
    const char *m = c ? strchr(from, c) : NULL;
    if (!m)
        return bad(ps, at, "unknown escape");
    *o = to[m - from];
    *n = 1;
    return ZT_OK;
}

/* The string whose opening quote is at the cursor, decoded into a new
 * buffer (*out). A first pass finds the closing quote (skipping escaped
 * bytes) to size the buffer: decoding only shrinks text, and no escape or
 * UTF-8 sequence can contain that quote, so decoding ends exactly on it. */
static zt_status parse_string(struct parser *ps, char **out)
{
    size_t start = ps->i, end = start + 1;
    while (end < ps->len && ps->p[end] != '"')
        end += ps->p[end] == '\\' ? 2 : 1;
    if (end >= ps->len)
        return bad(ps, start, "unterminated string");
    char *buf = malloc(end - start);
    if (!buf)
        return nomem(ps);
    size_t n = 0;
    zt_status st = ZT_OK;
    for (ps->i = start + 1; ps->i < end && st == ZT_OK;) {
        int c = ps->p[ps->i];
        size_t k = 0;
        if (c == '\\')
            st = escape(ps, buf + n, &k);
        else if (c < 0x20)
            st = bad(ps, ps->i, "control character in a string");
        else if (!(k = utf8_seq(ps->p + ps->i, end - ps->i)))
            st = bad(ps, ps->i, "invalid UTF-8");
        else {
            memcpy(buf + n, ps->p + ps->i, k);
            ps->i += k;
        }
        n += k;
    }
    if (st != ZT_OK) {
        free(buf);
        return st;
    }
    ZT_ASSERT(ps->i == end && n < end - start);
    ps->i = end + 1;
    buf[n] = '\0';
    *out = buf;
    return ZT_OK;
}

/* ---- numbers ---- */

/* Digits at the cursor; returns how many. */
static size_t skip_digits(struct parser *ps)
{
    size_t start = ps->i;
    while (is_digit(cur(ps)))
        ps->i++;
    return ps->i - start;
}

/* Accumulates the integer digits of [from, to) exactly; 0 on overflow. */
static int exact_magnitude(const unsigned char *p, size_t from, size_t to, uint64_t *mag)
{
    uint64_t m = 0;
    for (size_t k = from; k < to; k++) {
        unsigned d = p[k] - '0';
        if (m > (UINT64_MAX - d) / 10)
            return 0;
        m = m * 10 + d;
    }
    *mag = m;
    return 1;
}

static zt_status parse_number(struct parser *ps, struct json_value *v)
{
    size_t start = ps->i;
    int neg = cur(ps) == '-';
    ps->i += (size_t)neg;
    size_t int_start = ps->i;
    if (!is_digit(cur(ps)))
        return bad(ps, start, "invalid number");
    if (cur(ps) == '0' && ps->i + 1 < ps->len && is_digit(ps->p[ps->i + 1]))
        return bad(ps, start, "leading zeros are not allowed");
    size_t int_end = int_start + skip_digits(ps);
    int is_int = 1;
    if (cur(ps) == '.') {
        ps->i++;
        is_int = 0;
        if (!skip_digits(ps))
            return bad(ps, start, "a '.' must be followed by digits");
    }
    if (cur(ps) == 'e' || cur(ps) == 'E') {
        ps->i++;
        is_int = 0;
        if (cur(ps) == '+' || cur(ps) == '-')
            ps->i++;
        if (!skip_digits(ps))
            return bad(ps, start, "an exponent must have digits");
    }
    if (is_int) {
        uint64_t mag;
        if (!exact_magnitude(ps->p, int_start, int_end, &mag) || (neg && mag > (uint64_t)1 << 63))
            return bad(ps, start, "integer out of the 64-bit range");
        *v = (struct json_value){
            .type = JSON_INT, .pos = start, .negative = neg && mag, .magnitude = mag};
        v->real = neg ? -(double)mag : (double)mag;
        return ZT_OK;
    }
    size_t n = ps->i - start;
    char *tok = malloc(n + 1);
    if (!tok)
        return nomem(ps);
    memcpy(tok, ps->p + start, n);
    tok[n] = '\0';
    double d = strtod(tok, NULL);
    free(tok);
    if (!isfinite(d))
        return bad(ps, start, "number out of the double range");
    *v = (struct json_value){.type = JSON_REAL, .pos = start, .real = d};
    return ZT_OK;
}

/* ---- values ---- */

static zt_status parse_value(struct parser *ps, struct json_value *v);

/* The nesting error at the cursor, which names the limit. */
static zt_status too_deep(const struct parser *ps)
{
    char what[48];
    snprintf(what, sizeof what, "nesting deeper than %d levels", ps->src->max_depth);
    return bad(ps, ps->i, what);
}

/* Makes room for one more member of a container (and its key). */
static zt_status grow(struct parser *ps, struct json_value *v, size_t *cap, int with_keys)
{
    if (v->n < *cap)
        return ZT_OK;
    size_t n = *cap ? *cap * 2 : 4;
    struct json_value *items = realloc(v->items, n * sizeof *items);
    if (!items)
        return nomem(ps);
    v->items = items;
    if (with_keys) {
        char **keys = realloc(v->keys, n * sizeof *keys);
        if (!keys)
            return nomem(ps);
        v->keys = keys;
    }
    *cap = n;
    return ZT_OK;
}

/* Appends an empty member (and NULL key) first and fills it in place, so
 * that json_free releases a half-parsed container completely. */
static zt_status parse_container(struct parser *ps, struct json_value *v, int is_object)
{
    char close = is_object ? '}' : ']';
    *v = (struct json_value){.type = is_object ? JSON_OBJECT : JSON_ARRAY, .pos = ps->i};
    if (++ps->depth > ps->src->max_depth)
        return too_deep(ps);
    ps->i++;
    skip_blank(ps);
    size_t cap = 0;
    if (cur(ps) == close) {
        ps->i++;
        ps->depth--;
        return ZT_OK;
    }
    for (;;) {
        ZT_TRY(grow(ps, v, &cap, is_object));
        v->items[v->n] = (struct json_value){0};
        if (is_object)
            v->keys[v->n] = NULL;
        v->n++;
        if (is_object) {
            skip_blank(ps);
            if (cur(ps) != '"')
                return bad(ps, ps->i, "expected a string key");
            ZT_TRY(parse_string(ps, &v->keys[v->n - 1]));
            skip_blank(ps);
            if (cur(ps) != ':')
                return bad(ps, ps->i, "expected ':' after the key");
            ps->i++;
        }
        ZT_TRY(parse_value(ps, &v->items[v->n - 1]));
        skip_blank(ps);
        if (cur(ps) == close)
            break;
        if (cur(ps) != ',')
            return bad(ps, ps->i, is_object ? "expected ',' or '}'" : "expected ',' or ']'");
        ps->i++;
    }
    ps->i++;
    ps->depth--;
    return ZT_OK;
}

/* true, false or null at the cursor. */
static zt_status parse_literal(struct parser *ps, struct json_value *v)
{
    static const struct {
        const char *word;
        enum json_type type;
        int boolean;
    } words[] = {{"true", JSON_BOOL, 1}, {"false", JSON_BOOL, 0}, {"null", JSON_NULL, 0}};
    for (size_t k = 0; k < sizeof words / sizeof words[0]; k++) {
        size_t n = strlen(words[k].word);
        if (ps->len - ps->i >= n && memcmp(ps->p + ps->i, words[k].word, n) == 0) {
            *v = (struct json_value){
                .type = words[k].type, .pos = ps->i, .boolean = words[k].boolean};
            ps->i += n;
            return ZT_OK;
        }
    }
    return bad(ps, ps->i, "expected a value");
}

static zt_status parse_value(struct parser *ps, struct json_value *v)
{
    skip_blank(ps);
    int c = cur(ps);
    if (c == '{' || c == '[')
        return parse_container(ps, v, c == '{');
    if (c == '"') {
        *v = (struct json_value){.type = JSON_STRING, .pos = ps->i};
        return parse_string(ps, &v->str);
    }
    if (c == '-' || is_digit(c))
        return parse_number(ps, v);
    return parse_literal(ps, v);
}

zt_status json_parse(const struct json_source *src, const char *text, size_t len,
                     struct json_value *out)
{
    ZT_ASSERT(src && src->path && src->max_depth >= 1);
    struct parser ps = {src, (const unsigned char *)text, len, 0, 0};
    *out = (struct json_value){0};
    zt_status st = parse_value(&ps, out);
    if (st == ZT_OK) {
        skip_blank(&ps);
        if (ps.i != ps.len)
            st = bad(&ps, ps.i, "unexpected text after the value");
    }
    if (st != ZT_OK)
        json_free(out);
    return st;
}

void json_free(struct json_value *v)
{
    if (!v)
        return;
    for (size_t k = 0; k < v->n; k++) {
        json_free(&v->items[k]);
        if (v->keys)
            free(v->keys[k]);
    }
    free(v->items);
    free(v->keys);
    free(v->str);
    *v = (struct json_value){0};
}

const char *json_type_name(enum json_type t)
{
    switch (t) {
    case JSON_NULL:
        return "null";
    case JSON_BOOL:
        return "a boolean";
    case JSON_INT:
        return "an integer";
    case JSON_REAL:
        return "a fractional number";
    case JSON_STRING:
        return "a string";
    case JSON_ARRAY:
        return "an array";
    case JSON_OBJECT:
        return "an object";
    }
    return "an unknown value";
}

const struct json_value *json_object_get(const struct json_value *obj, const char *key,
                                         size_t *count)
{
    ZT_ASSERT(obj->type == JSON_OBJECT);
    const struct json_value *first = NULL;
    size_t seen = 0;
    for (size_t k = 0; k < obj->n; k++) {
        if (strcmp(obj->keys[k], key) != 0)
            continue;
        if (!seen++)
            first = &obj->items[k];
    }
    if (count)
        *count = seen;
    return first;
}

/* ---- writing ---- */

/* Room for `more` bytes and the NUL; sets oom when there is none. */
static int reserve(struct json_text *t, size_t more)
{
    if (t->oom)
        return 0;
    if (more > SIZE_MAX / 2 - t->len - 1) {
        t->oom = 1;
        return 0;
    }
    if (t->len + more + 1 <= t->cap)
        return 1;
    size_t cap = t->cap ? t->cap : 256;
    while (cap < t->len + more + 1)
        cap *= 2;
    char *p = realloc(t->p, cap);
    if (!p) {
        t->oom = 1;
        return 0;
    }
    t->p = p;
    t->cap = cap;
    return 1;
}

void json_text_put(struct json_text *t, const char *s, size_t n)
{
    if (!reserve(t, n))
        return;
    memcpy(t->p + t->len, s, n);
    t->len += n;
    t->p[t->len] = '\0';
}

void json_text_puts(struct json_text *t, const char *s)
{
    json_text_put(t, s, strlen(s));
}

void json_text_printf(struct json_text *t, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    ZT_ASSERT(n >= 0);
    if (!reserve(t, (size_t)n))
        return;
    va_start(ap, fmt);
    vsnprintf(t->p + t->len, (size_t)n + 1, fmt, ap);
    va_end(ap);
    t->len += (size_t)n;
}

void json_text_string(struct json_text *t, const char *s, enum json_escape e)
{
    json_text_put(t, "\"", 1);
    const char *run = s; /* the bytes since the last escape, written as they are */
    for (const char *c = s; *c; c++) {
        unsigned char u = (unsigned char)*c;
        if (u >= 0x20 && u != '"' && u != '\\')
            continue;
        json_text_put(t, run, (size_t)(c - run));
        run = c + 1;
        const char *esc = u == '"' ? "\\\"" : u == '\\' ? "\\\\" : NULL;
        if (!esc && e == JSON_ESCAPE_SHORT)
            esc = u == '\n' ? "\\n" : u == '\t' ? "\\t" : u == '\r' ? "\\r" : NULL;
        if (esc)
            json_text_puts(t, esc);
        else
            json_text_printf(t, "\\u%04x", u);
    }
    json_text_puts(t, run);
    json_text_put(t, "\"", 1);
}

void json_text_real(struct json_text *t, double v)
{
    if (!isfinite(v)) {
        json_text_puts(t, "null");
        return;
    }
    char buf[40];
    for (int digits = 15; digits <= 17; digits++) {
        snprintf(buf, sizeof buf, "%.*g", digits, v);
        if (strtod(buf, NULL) == v)
            break;
    }
    json_text_puts(t, buf);
    if (!strpbrk(buf, ".eEni"))
        json_text_puts(t, ".0");
}

void json_text_value(struct json_text *t, const struct json_value *v, enum json_escape e)
{
    switch (v->type) {
    case JSON_NULL:
        json_text_puts(t, "null");
        return;
    case JSON_BOOL:
        json_text_puts(t, v->boolean ? "true" : "false");
        return;
    case JSON_INT:
        json_text_printf(t, "%s%llu", v->negative ? "-" : "", (unsigned long long)v->magnitude);
        return;
    case JSON_REAL:
        json_text_real(t, v->real);
        return;
    case JSON_STRING:
        json_text_string(t, v->str, e);
        return;
    case JSON_ARRAY:
    case JSON_OBJECT:
        break;
    }
    const int object = v->type == JSON_OBJECT;
    json_text_puts(t, object ? "{" : "[");
    for (size_t i = 0; i < v->n; i++) {
        json_text_puts(t, i ? ", " : "");
        if (object) {
            json_text_string(t, v->keys[i], e);
            json_text_puts(t, ": ");
        }
        json_text_value(t, &v->items[i], e);
    }
    json_text_puts(t, object ? "}" : "]");
}
