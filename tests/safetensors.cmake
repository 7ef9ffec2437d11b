# Safetensors reader and writer: the committed file written by the
# standard-library Python writer, round trips, partial reads, every
# malformed case and two fault loops. The one source is compiled in so the
# suite does not need the whole coordinator library.
zt_test(test_safetensors SOURCES test_safetensors.c ${PROJECT_SOURCE_DIR}/formats/safetensors.c
  LIBS zt_common)
