# GPU suites: compiled whenever the CUDA Toolkit is found, so CI compiles
# and links them; they skip (exit 77, "SKIP: ..." on stdout) without a device.
if(ZT_HAVE_CUDA)
  zt_test(test_gpu SOURCES test_gpu.c LIBS zt_worker zt_comm RANKS 1 2 TIMEOUT 120)
endif()
# Every op of the compute backend named by ZT_TEST_BACKEND against the CPU
# backend (test_gpu_ops.c), one executable run twice: test_gpu_ops_cpu
# compares the CPU with itself, which proves the harness on every build and
# under the sanitizers; test_gpu_ops runs the CUDA ops and skips (77)
# without a device. Not through zt_test, whose test takes the executable's
# name: the same properties, plus the backend (and no fork for CUDA, whose
# context does not survive one).
add_executable(test_gpu_ops test_gpu_ops.c)
target_link_libraries(test_gpu_ops PRIVATE zt_worker zt_testutil PkgConfig::CHECK)
if(ZT_HAVE_CUDA)
  target_link_libraries(test_gpu_ops PRIVATE CUDA::cudart) # its stream waits
  add_dependencies(test_gpu_ops zt_cuda zt_cuda_comm)
endif()
add_test(NAME test_gpu_ops_cpu COMMAND test_gpu_ops)
set_tests_properties(test_gpu_ops_cpu PROPERTIES TIMEOUT 120 SKIP_RETURN_CODE 77
  ENVIRONMENT "${ZT_TEST_ENV};ZT_TEST_BACKEND=cpu" FIXTURES_REQUIRED zt_outputs)
if(ZT_HAVE_CUDA)
  add_test(NAME test_gpu_ops COMMAND test_gpu_ops)
  set_tests_properties(test_gpu_ops PROPERTIES TIMEOUT 120 SKIP_RETURN_CODE 77
    ENVIRONMENT "${ZT_TEST_ENV};ZT_TEST_BACKEND=cuda;CK_FORK=no" FIXTURES_REQUIRED zt_outputs)
endif()
# Whole training runs on the GPU against the CPU's losses (test_gpu_train.c):
# it launches mpirun itself.
if(ZT_HAVE_CUDA)
  zt_test(test_gpu_train SOURCES test_gpu_train.c LIBS zt_worker TIMEOUT 1200 LAUNCHES_MPI)
endif()
