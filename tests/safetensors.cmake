# Safetensors reader and writer: the committed file written by the
# standard-library Python writer, round trips, partial reads, every
# malformed case and two fault loops. The one source is compiled in so the
# suite does not need the whole coordinator library.
zt_test(test_safetensors SOURCES test_safetensors.c ${PROJECT_SOURCE_DIR}/formats/safetensors.c
  LIBS zt_common)
# Sharded sets: an index against its shards (every contradiction, shard
# names reaching out of the folder, malformed JSON), folders as
# from_pretrained reads them, the writer's cut against huggingface_hub's
# and its index text against json.dumps', Hugging Face's size strings, and
# allocation fault loops (malloc, calloc and realloc wrapped as in
# ckpt.cmake) for opening and writing.
zt_test(test_safetensors_set SOURCES test_safetensors_set.c
  ${PROJECT_SOURCE_DIR}/formats/safetensors.c ${PROJECT_SOURCE_DIR}/formats/safetensors_set.c
  LIBS zt_common)
zt_wrap_alloc(test_safetensors_set)
