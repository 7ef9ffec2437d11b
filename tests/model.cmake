zt_test(test_model SOURCES test_model.c LIBS zt_worker)
