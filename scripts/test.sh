#!/usr/bin/env bash
# Installs what is missing, fetches GPT-2's vocabulary and the reference
# tokenizers for the tokenizer tests, builds, and runs the suite twice: the
# whole of it in a release build, then, in a build under AddressSanitizer
# and UndefinedBehaviorSanitizer, every suite but those labelled nosanitize
# (tests/CMakeLists.txt says which and why). ZT_TEST_SANITIZE=0 skips the
# second pass, ZT_TEST_SANITIZE=all runs every suite there. Both replay the
# fuzz targets' corpus and kept findings; where clang's libFuzzer is
# installed each target then fuzzes for ZT_TEST_FUZZ_SECONDS (default 4; 0
# skips it).
#
# usage: scripts/test.sh [--quick]
#   --quick  the release build's suites but the slow ones (label "slow":
#            those that train through the binary many times), no sanitizer
#            pass, no fuzzing: every module's unit suites in 2-3 minutes
set -euo pipefail
quick=0
case ${1:-} in
  --quick) quick=1 ;;
  "") ;;
  *) sed -n '/^# usage:/,/^[^#]/p' "$0" | sed '$d; s/^# \{0,1\}//' >&2; exit 2 ;;
esac
source "$(dirname "$0")/env.sh"
"$ZT_ROOT/scripts/deps.sh"
# GPT-2's vocabulary for the BPE suite (test_bpe reads ZT_GPT2_VOCAB_DIR):
# fetched and verified once, then taken from the cache.
export ZT_GPT2_VOCAB_DIR=${ZT_GPT2_VOCAB_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/zerotrain/gpt2}
"$ZT_ROOT/scripts/gpt2_vocab.sh" "$ZT_GPT2_VOCAB_DIR"
# Llama 3's, Llama 2's, Mistral's, cl100k's and o200k's vocabularies and the
# npm encoders test_tokenizers compares with (it reads ZT_TOKENIZERS_DIR).
export ZT_TOKENIZERS_DIR=${ZT_TOKENIZERS_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/zerotrain/tokenizers}
"$ZT_ROOT/scripts/tokenizers.sh" all --dir "$ZT_TOKENIZERS_DIR"

echo "== release build"
zt_build "$ZT_ROOT/build"
if [ "$quick" = 1 ]; then
  (cd "$ZT_ROOT/build" && ctest --output-on-failure -j "$ZT_JOBS" -LE slow)
  exit 0
fi
(cd "$ZT_ROOT/build" && ctest --output-on-failure -j "$ZT_JOBS")

sanitize=${ZT_TEST_SANITIZE:-1}
if [ "$sanitize" != 0 ]; then
  echo "== AddressSanitizer + UndefinedBehaviorSanitizer build"
  # CPU path only: the CUDA libraries are compiled and linked by the first
  # build, and without a GPU they add nothing here but their own leaks.
  zt_build "$ZT_ROOT/build-asan" -DZT_SANITIZE=ON -DCMAKE_BUILD_TYPE=RelWithDebInfo -DZT_CUDA=OFF
  export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=0}
  export LSAN_OPTIONS=suppressions=$ZT_ROOT/tests/lsan.supp:print_suppressions=0
  export UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
  subset=(-LE nosanitize)
  [ "$sanitize" = all ] && subset=()
  (cd "$ZT_ROOT/build-asan" && ctest --output-on-failure -j "$ZT_JOBS" "${subset[@]}")
fi

fuzz_seconds=${ZT_TEST_FUZZ_SECONDS:-4}
if [ "$fuzz_seconds" != 0 ] && "$ZT_ROOT/scripts/fuzz.sh" --check; then
  echo "== fuzz targets, ${fuzz_seconds} s each"
  "$ZT_ROOT/scripts/fuzz.sh" "$fuzz_seconds"
fi
