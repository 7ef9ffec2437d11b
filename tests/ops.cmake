zt_test(test_ops SOURCES test_ops.c LIBS zt_worker)
