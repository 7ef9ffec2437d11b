# Data module: token files, tokenizer, datasets, split, sampler (including
# its world-size independence, checked without MPI) and the core of
# `zerotrain prepare`, whose one source is compiled in so that this suite
# does not need the whole coordinator library.
zt_test(test_data SOURCES test_data.c ${PROJECT_SOURCE_DIR}/coordinator/prepare.c LIBS zt_data)
