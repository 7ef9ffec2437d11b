# Hugging Face GPT-2 import and export: names and layouts checked with the
# plain safetensors reader, round trips in F32, F16 and BF16, the committed
# file written by the standard-library Python writer, and every way a file
# can contradict the configuration. The two sources are compiled in so the
# suite does not need the whole coordinator library.
zt_test(test_hf_gpt2 SOURCES test_hf_gpt2.c ${PROJECT_SOURCE_DIR}/formats/hf_gpt2.c
  ${PROJECT_SOURCE_DIR}/formats/safetensors.c LIBS zt_worker)
