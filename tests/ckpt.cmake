# Checkpoint storage: shard files, meta.json, folders (publish, latest,
# rotation), validation of every kind of damage, a crash simulation and
# fault loops (every prefix of meta.json, every header byte of a shard,
# the N-th allocation). Its sources are compiled in, so the suite does not
# wait on the rest of the coordinator. malloc, calloc and realloc are
# wrapped at link time for the allocation fault loop, as in config.cmake.
set(CKPT_SOURCES checkpoint_shard.c checkpoint_meta.c checkpoint_dir.c)
list(TRANSFORM CKPT_SOURCES PREPEND ${PROJECT_SOURCE_DIR}/formats/)
zt_test(test_checkpoint SOURCES test_checkpoint.c ${CKPT_SOURCES} LIBS zt_common)
zt_wrap_alloc(test_checkpoint)
