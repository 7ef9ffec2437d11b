# Data module: token files, tokenizer, datasets, split, sampler (including
# its world-size independence, checked without MPI) and the core of
# `zerotrain prepare` (cli/prepare.c), whose one source is compiled in so
# that this suite does not need the command line's library. The binary test case runs
# zerotrain under mpirun to check exit codes and messages on every rank.
zt_test(test_data SOURCES test_data.c ${PROJECT_SOURCE_DIR}/cli/prepare.c LIBS zt_data
        TIMEOUT 600 LAUNCHES_MPI)

# GPT-2's byte-level BPE behind the tokenizer table: ids against an
# independent reference (tests/data/gpt2_bpe_reference.txt), round trips,
# broken vocabulary folders, an allocation fault loop, and `zerotrain prepare
# --tokenizer gpt2` through the binary. It reads the vocabulary that
# scripts/gpt2_vocab.sh fetches (scripts/test.sh runs it first) from
# $ZT_GPT2_VOCAB_DIR or the script's default cache folder, and fails saying
# so when it is missing.
zt_test(test_bpe SOURCES test_bpe.c LIBS zt_data TIMEOUT 300)
zt_wrap_alloc(test_bpe)

# JSONL instruction data: parsing and its errors, the loss mask in both
# layouts, the whole-window split, the sampler's masked targets and counts.
zt_test(test_jsonl SOURCES test_jsonl.c LIBS zt_data TIMEOUT 120)

# The tokenizer.json and tiktoken rows of the tokenizer table: ids against
# the npm packages' own encoders (run with node by scripts/tokenizers/
# reference.mjs) on tests/data/tokenizer_corpus.json for llama3, llama2,
# mistral, cl100k and o200k, round trips, 4-byte token files from prepare,
# `zerotrain tokenize`, and broken or unsupported files. It reads the
# vocabularies scripts/tokenizers.sh fetches (scripts/test.sh runs it first)
# from $ZT_TOKENIZERS_DIR or the script's default cache folder, and fails
# saying so when they are missing.
zt_test(test_tokenizers SOURCES test_tokenizers.c LIBS zt_data TIMEOUT 900)
# Unicode NFC (data/nfc.h, Qwen2's normalizer) against Python's unicodedata on
# every code point and random strings of marks and Hangul, and hand-written forms.
zt_test(test_nfc SOURCES test_nfc.c LIBS zt_data TIMEOUT 600)
