zt_test(test_model SOURCES test_model.c LIBS zt_worker)
zt_test(test_precision SOURCES test_precision.c LIBS zt_worker)
zt_test(test_llama SOURCES test_llama.c LIBS zt_worker)
