# flat_hooks.c: the hooks both model suites run the passes with.
zt_test(test_model SOURCES test_model.c flat_hooks.c LIBS zt_worker)
zt_test(test_precision SOURCES test_precision.c LIBS zt_worker)
zt_test(test_llama SOURCES test_llama.c flat_hooks.c LIBS zt_worker)
# Generation: the cached forward against the training forward, sampling.
zt_test(test_infer SOURCES test_infer.c flat_hooks.c LIBS zt_worker)
# Generation's forward on tensor-parallel slices against the whole model.
zt_test(test_infer_tp SOURCES test_infer_tp.c LIBS zt_worker zt_comm RANKS 2 4 TIMEOUT 300)
zt_test(test_lora SOURCES test_lora.c flat_hooks.c LIBS zt_worker)
zt_test(test_qlora SOURCES test_qlora.c LIBS zt_worker)
zt_test(test_tensor_parallel SOURCES test_tensor_parallel.c LIBS zt_worker)
# fp8: the E4M3/E5M2 codec against scripts/reference/fp8_reference.py's
# tables, delayed scaling, and the model path's fp8 GEMMs and buffers.
zt_test(test_fp8 SOURCES test_fp8.c LIBS zt_worker)
