#!/usr/bin/env bash
# How fast `zerotrain prepare` tokenises with each tokenizer of the table:
# one document of MB megabytes (default 8) made of the texts in
# /usr/share/common-licenses and the multilingual test corpus
# (tests/data/tokenizer_corpus.json) repeated, prepared REPS times (default
# 3) per tokenizer. Prints the CPU and its features, then per tokenizer the
# vocabulary, the tokens made, the time to load the vocabulary (a prepare
# of one byte), the median time of the whole prepare, and MB/s (10^6 bytes
# per second) of the prepare less the load: one core, reading and writing
# included. Needs the vocabularies: scripts/gpt2_vocab.sh and
# scripts/tokenizers.sh all (ZT_GPT2_VOCAB_DIR, ZT_TOKENIZERS_DIR as in
# scripts/test.sh).
# usage: scripts/bench/tokenizers.sh [MB [REPS]]
set -euo pipefail
source "$(dirname "$0")/../env.sh"
mb=${1:-8}
reps=${2:-3}
zt_build "$ZT_ROOT/build" >/dev/null
bin=$ZT_ROOT/build/zerotrain
cache=${XDG_CACHE_HOME:-$HOME/.cache}/zerotrain
gpt2=${ZT_GPT2_VOCAB_DIR:-$cache/gpt2}
root=${ZT_TOKENIZERS_DIR:-$cache/tokenizers}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# The document: licences (English prose) and the corpus (code, CJK, emoji,
# marks, white space), repeated to the size asked.
python3 - "$ZT_ROOT/tests/data/tokenizer_corpus.json" "$tmp/doc.txt" "$mb" <<'PY'
import glob, json, sys
seed = "".join(open(p, encoding="utf-8", errors="replace").read()
               for p in sorted(glob.glob("/usr/share/common-licenses/*")) if not p.endswith("-1.0"))
seed += "\n".join(json.load(open(sys.argv[1], encoding="utf-8")))
data = seed.encode("utf-8")
n = int(float(sys.argv[3]) * 1e6)
open(sys.argv[2], "wb").write((data * (n // len(data) + 1))[:n])
PY
printf 'x' >"$tmp/one.txt"

cpu=$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ *//')
flags=$(grep -m1 '^flags' /proc/cpuinfo)
features=""
for f in avx2 fma avx512f avx512bw amx_tile; do
  [[ " $flags " == *" $f "* ]] && features+="$f "
done
echo "cpu: $cpu"
echo "features: ${features:-none of avx2 fma avx512f avx512bw amx_tile}"
echo "document: $(stat -c %s "$tmp/doc.txt") bytes, prepare median of $reps runs, one core"
echo
printf '%-8s %8s %10s %8s %9s %8s\n' tokenizer vocab tokens load_s prepare_s MB/s

# seconds FILE ARGS...: wall time of one prepare of FILE
seconds() {
  local file=$1 start end
  shift
  start=$(date +%s.%N)
  "$bin" prepare "$@" --out "$tmp/out.tok" "$file" >"$tmp/log" 2>&1 || {
    cat "$tmp/log" >&2
    exit 1
  }
  end=$(date +%s.%N)
  echo "$end - $start" | bc -l
}

median() { sort -g | awk '{a[NR]=$1} END {print (NR%2) ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2}'; }

run() {
  local name=$1 load total
  shift
  load=$(for _ in $(seq "$reps"); do seconds "$tmp/one.txt" "$@"; done | median)
  total=$(for _ in $(seq "$reps"); do seconds "$tmp/doc.txt" "$@"; done | median)
  local vocab tokens
  tokens=$(sed -E 's/wrote ([0-9]+) tokens \(([0-9]+) vocab.*/\1/' "$tmp/log")
  vocab=$(sed -E 's/wrote ([0-9]+) tokens \(([0-9]+) vocab.*/\2/' "$tmp/log")
  printf '%-8s %8s %10s %8.2f %9.2f %8.1f\n' "$name" "$vocab" "$tokens" "$load" "$total" \
    "$(echo "$(stat -c %s "$tmp/doc.txt") / 1000000 / ($total - $load)" | bc -l)"
}

run bytes
run gpt2 --tokenizer gpt2 --tokenizer-dir "$gpt2"
for name in llama3 llama2 mistral; do
  run "$name" --tokenizer hf --tokenizer-dir "$root/$name"
done
run cl100k --tokenizer cl100k --tokenizer-dir "$root/cl100k"
run o200k --tokenizer o200k --tokenizer-dir "$root/o200k"
