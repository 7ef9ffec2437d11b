# Hugging Face GPT-2 import and export through formats/hf_weights.h: names
# and layouts checked with the plain safetensors reader, round trips in
# F32, F16 and BF16, one file and sharded, the committed file written by
# the standard-library Python writer, and every way a file can contradict
# the configuration. hfutil.c holds what the Hugging Face suites share.
zt_test(test_hf_gpt2 SOURCES test_hf_gpt2.c hfutil.c LIBS zt_formats)
