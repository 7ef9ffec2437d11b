# GPU suites: compiled whenever the CUDA Toolkit is found, so CI compiles
# and links them; they skip (exit 77, "SKIP: ..." on stdout) without a device.
if(ZT_HAVE_CUDA)
  zt_test(test_gpu SOURCES test_gpu.c LIBS zt_worker zt_comm RANKS 1 2 TIMEOUT 120)
endif()
