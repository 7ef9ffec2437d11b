# Hugging Face Llama import and export through formats/hf_weights.h: names
# and shapes checked with the plain readers, round trips tied and untied,
# one file and sharded, the committed checkpoints of the independent
# writer (one file, three shards and an index, tied) against the reference
# parameters, and every way a file can contradict the configuration.
zt_test(test_hf_llama SOURCES test_hf_llama.c hfutil.c LIBS zt_formats)
