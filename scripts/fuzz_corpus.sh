#!/usr/bin/env bash
# Rewrites the fuzz targets' seed corpus, tests/fuzz/corpus/<target>/, from
# real files: the repository's configs, machines and test data; the binary
# formats written by zerotrain's own writers (build/tests/fuzz/fuzz_seeds);
# meta.json and an exported config.json from a 2-step run of
# tests/data/micro.yaml; the first merges of GPT-2's vocabulary
# (scripts/gpt2_vocab.sh's cache). Kept small: the fuzzers grow their own
# corpus in a work folder (scripts/fuzz.sh), never here.
#
#   scripts/fuzz_corpus.sh [BUILD_DIR]     (default: build, already built)
set -euo pipefail
source "$(dirname "$0")/env.sh"
build=${1:-$ZT_ROOT/build}
out=$ZT_ROOT/tests/fuzz/corpus
sep=$'\n====8<====\n' # FUZZ_SEPARATOR of tests/fuzz/fuzz.h
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

fresh() { rm -rf "${out:?}/$1"; mkdir -p "$out/$1"; }
join() { # join OUT FILE...: the files with the separator between them
  local dst=$1 first=1; shift
  : >"$dst"
  for f in "$@"; do
    [ $first = 1 ] || printf '%s' "$sep" >>"$dst"
    cat "$f" >>"$dst"
    first=0
  done
}

fresh config
cp "$ZT_ROOT"/configs/{tiny,demo,llama-tiny}.yaml "$ZT_ROOT"/tests/configs/full.yaml \
   "$ZT_ROOT"/tests/data/micro.yaml "$out/config/"
printf '%s' 'tensor_parallel.sequence_parallel=true' >"$work/set1"
printf '%s' 'optimizer.params.betas=[0.9, 0.95]' >"$work/set2"
join "$out/config/micro_with_sets" "$ZT_ROOT/tests/data/micro.yaml" "$work/set1" "$work/set2"

fresh deepspeed # with the data.train a DeepSpeed file lacks, as --set
printf '%s' 'data.train=tokens.bin' >"$work/train"
for f in "$ZT_ROOT"/tests/configs/deepspeed.json "$ZT_ROOT"/tests/data/deepspeed_zero3.json; do
  join "$out/deepspeed/$(basename "$f")" "$f" "$work/train"
done

fresh machine
cp "$ZT_ROOT"/configs/machines/*.yaml "$out/machine/"

fresh jsonl # the first byte picks the window length (fuzz_jsonl.c)
{ printf 'A'; cat "$ZT_ROOT/tests/data/instruct_micro.jsonl"; } >"$out/jsonl/instruct_micro"
printf '\x07{"text": "one document"}\n\n{"text": "two \\u00e9\\n"}\n' >"$out/jsonl/text"

# The binary formats, from zerotrain's writers.
mkdir -p "$work/seeds"
"$build/tests/fuzz/fuzz_seeds" "$work/seeds"
for t in safetensors safetensors_set ckpt_shard tokfile peft; do
  fresh $t
  cp "$work/seeds/$t"/* "$out/$t/"
done
cp "$ZT_ROOT/tests/data/reference.safetensors" "$out/safetensors/"

# meta.json as a run writes it.
run=$work/run
mpirun -n 1 "$build/zerotrain" train "$ZT_ROOT/tests/data/micro.yaml" \
  --set run.steps=2 --set run.output_dir="$run" --set checkpoint.dir="$run/checkpoints" \
  --set checkpoint.every=2 >/dev/null
step=$(ls -d "$run"/checkpoints/step-* | tail -n 1)
fresh ckpt_meta
cp "$step/meta.json" "$out/ckpt_meta/micro.json"

# Hugging Face's config.json of gpt2 (the hub's openai-community/gpt2) and
# the Llama test model's.
fresh hf_config
cat >"$out/hf_config/gpt2.json" <<'JSON'
{
  "activation_function": "gelu_new",
  "architectures": ["GPT2LMHeadModel"],
  "attn_pdrop": 0.1,
  "bos_token_id": 50256,
  "embd_pdrop": 0.1,
  "eos_token_id": 50256,
  "initializer_range": 0.02,
  "layer_norm_epsilon": 1e-05,
  "model_type": "gpt2",
  "n_ctx": 1024,
  "n_embd": 768,
  "n_head": 12,
  "n_layer": 12,
  "n_positions": 1024,
  "resid_pdrop": 0.1,
  "summary_activation": null,
  "summary_first_dropout": 0.1,
  "summary_proj_to_labels": true,
  "summary_type": "cls_index",
  "summary_use_proj": true,
  "task_specific_params": {"text-generation": {"do_sample": true, "max_length": 50}},
  "vocab_size": 50257
}
JSON
cp "$ZT_ROOT/tests/data/hf_llama_micro/config.json" "$out/hf_config/llama.json"

# GPT-2's vocabulary cut to its bytes and first 64 merges (ids 0 .. 319),
# with <|endoftext|> as id 320.
vocab=${ZT_GPT2_VOCAB_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/zerotrain/gpt2}
"$ZT_ROOT/scripts/gpt2_vocab.sh" "$vocab"
python3 - "$vocab" "$work" <<'PY'
import json, sys
vocab, work = sys.argv[1], sys.argv[2]
enc = json.load(open(f"{vocab}/encoder.json", encoding="utf-8"))
keep = {t: i for t, i in enc.items() if i < 320}
keep["<|endoftext|>"] = 320
json.dump(keep, open(f"{work}/encoder.json", "w", encoding="utf-8"), ensure_ascii=False)
lines = open(f"{vocab}/vocab.bpe", encoding="utf-8").read().split("\n")
open(f"{work}/vocab.bpe", "w", encoding="utf-8").write("\n".join(lines[:65]) + "\n")
PY
fresh bpe
join "$out/bpe/gpt2_first_merges" "$work/encoder.json" "$work/vocab.bpe"
printf 'the theory of these'>"$work/text"
join "$out/bpe/gpt2_with_text" "$work/encoder.json" "$work/vocab.bpe" "$work/text"
du -sh "$out"/*
