# Data module: token files, tokenizer, datasets, split, sampler (including
# its world-size independence, checked without MPI) and the core of
# `zerotrain prepare`, whose one source is compiled in so that this suite
# does not need the whole coordinator library. The binary test case runs
# zerotrain under mpirun to check exit codes and messages on every rank.
zt_test(test_data SOURCES test_data.c ${PROJECT_SOURCE_DIR}/coordinator/prepare.c LIBS zt_data
        TIMEOUT 600 LAUNCHES_MPI)
