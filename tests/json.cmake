# The JSON reader on its own: every kind of value, the exact 64-bit integer
# range, escapes, UTF-8, repeated keys, the nesting limit, error bytes, and
# two fault loops (every prefix of a document, the N-th allocation), so
# malloc, calloc and realloc are wrapped as in ckpt.cmake.
zt_test(test_json SOURCES test_json.c LIBS zt_common)
zt_wrap_alloc(test_json)
