zt_test(test_ops SOURCES test_ops.c LIBS zt_worker)
zt_test(test_backend SOURCES test_backend.c LIBS zt_worker)
zt_test(test_quant4 SOURCES test_quant4.c LIBS zt_worker)
zt_test(test_simd SOURCES test_simd.c LIBS zt_worker TIMEOUT 300)
