zt_test(test_ops SOURCES test_ops.c LIBS zt_worker)
# The CPU's matrix products through oneDNN and OpenBLAS against double loops.
zt_test(test_gemm SOURCES test_gemm.c LIBS zt_worker)
zt_test(test_backend SOURCES test_backend.c LIBS zt_worker)
zt_test(test_device_pool SOURCES test_device_pool.c LIBS zt_worker)
zt_test(test_host_cache SOURCES test_host_cache.c LIBS zt_worker)
# A rank's GPU from its node-local rank: pure, no device needed.
zt_test(test_device_bind SOURCES test_device_bind.c LIBS zt_worker)
zt_test(test_quant4 SOURCES test_quant4.c LIBS zt_worker)
zt_test(test_simd SOURCES test_simd.c LIBS zt_worker TIMEOUT 300)
# The 16-bit (bf16, fp16) forms of the model ops against their fp32 forms.
zt_test(test_ops16 SOURCES test_ops16.c LIBS zt_worker)
# Ring attention (context parallelism) against the unsplit fused attention.
zt_test(test_attention_ring SOURCES test_attention_ring.c LIBS zt_worker)
