# flat_hooks.c: the hooks both model suites run the passes with.
zt_test(test_model SOURCES test_model.c flat_hooks.c LIBS zt_worker)
zt_test(test_precision SOURCES test_precision.c LIBS zt_worker)
zt_test(test_llama SOURCES test_llama.c flat_hooks.c LIBS zt_worker)
zt_test(test_lora SOURCES test_lora.c flat_hooks.c LIBS zt_worker)
zt_test(test_qlora SOURCES test_qlora.c LIBS zt_worker)
zt_test(test_tensor_parallel SOURCES test_tensor_parallel.c LIBS zt_worker)
