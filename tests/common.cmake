zt_test(test_common SOURCES test_common.c LIBS zt_common)
