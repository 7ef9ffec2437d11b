/* tests/fault_alloc.h — fail the N-th allocation, for fault loops.
 *
 * A suite linked with zt_wrap_alloc() (tests/CMakeLists.txt) has malloc,
 * calloc and realloc wrapped at link time (GNU ld --wrap): every call in
 * the suite's own objects, the code under test included, goes through a
 * countdown. Allocations inside shared libraries (libyaml, libc) are not
 * affected. */
#ifndef ZT_TESTS_FAULT_ALLOC_H
#define ZT_TESTS_FAULT_ALLOC_H

/* Makes the n-th allocation from now fail (n >= 1); 0 disarms. */
void fault_alloc_arm(long n);
/* Disarms and returns how many allocations were left before the failure:
 * 0 when it fired. */
long fault_alloc_disarm(void);

#endif
