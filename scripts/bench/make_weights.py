#!/usr/bin/python3
"""make_weights.py — random Hugging Face weights of a named shape, for loading at real size.

Writes what save_pretrained writes for a model of that shape, without PyTorch:
DIR/config.json, and the weights as DIR/model-0000k-of-0000N.safetensors with
DIR/model.safetensors.index.json (one DIR/model.safetensors when they fit in
one shard). Tensor names, shapes and the state-dict order are the
architecture's (GPT2LMHeadModel: Conv1D weights [in, out], the tied head left
out; LlamaForCausalLM: nn.Linear weights [out, in], the untied lm_head kept).

Shapes:
  llama2-7b   LlamaForCausalLM, 32 layers, hidden 4096, 32 heads, MLP 11008,
              vocab 32000 (6.74 B parameters, 13.5 GB in bf16)
  gpt2-xl     GPT2LMHeadModel, 48 layers, 1600, 25 heads, vocab 50257
              (1.56 B parameters, 3.1 GB in bf16)
  tiny        GPT2LMHeadModel of configs/tiny.yaml's shape (byte vocabulary,
              4 layers, 128, 4 heads, block 128), for tests
  tiny-llama  LlamaForCausalLM of configs/llama-tiny.yaml's kind (vocab 256,
              4 layers, 128, 4 heads, 2 key-value heads, MLP 512), for tests

Values: matrices normal(0, 0.02), norm weights 1 + normal(0, 0.02), biases
normal(0, 0.02), each tensor drawn from numpy's PCG64 seeded with (seed,
the tensor's place in the state dict), so a tensor's values depend on the
seed and its name only, not on the dtype's rounding or the shard cut. fp32
tensors are stored as drawn; bf16 rounds each fp32 to nearest even.

Sharding is huggingface_hub's: tensors in state-dict order join the current
shard unless it would pass --max-shard-size, which starts the next one; a
tensor larger than the limit alone gets a shard. Within a file the tensors
are in name order, as the safetensors library writes them.

--config-only writes DIR/config.json alone, for `zerotrain plan` and `train --dry-run`, which
read no weights.

Streaming: at most CHUNK elements of one tensor are in memory at a time,
whatever the model. Free disk space is checked before anything is written.
Prints the bytes written and the time taken. Exit status 2 for a usage
error or too little disk space.

  scripts/bench/make_weights.py gpt2-xl --out /tmp/gpt2-xl
  scripts/bench/make_weights.py tiny --out DIR --dtype fp32 --max-shard-size 300KB
"""

import argparse
import json
import os
import shutil
import struct
import sys
import time

try:
    import numpy as np
except ImportError:  # the Debian package: apt-get install python3-numpy
    sys.stderr.write("make_weights.py: needs numpy (Debian: python3-numpy)\n")
    sys.exit(77)

CHUNK = 1 << 24  # elements drawn at a time
DISK_MARGIN = 1 << 30  # what is left free beside the model
STD = 0.02


def gpt2(vocab, block, layers, embd, heads):
    config = {
        "architectures": ["GPT2LMHeadModel"],
        "model_type": "gpt2",
        "activation_function": "gelu_new",
        "vocab_size": vocab,
        "n_positions": block,
        "n_ctx": block,
        "n_embd": embd,
        "n_layer": layers,
        "n_head": heads,
        "layer_norm_epsilon": 1e-05,
        "tie_word_embeddings": True,
    }
    c = embd
    tensors = [("transformer.wte.weight", (vocab, c)), ("transformer.wpe.weight", (block, c))]
    for i in range(layers):
        p = "transformer.h.%d." % i
        tensors += [
            (p + "ln_1.weight", (c,)), (p + "ln_1.bias", (c,)),
            (p + "attn.c_attn.weight", (c, 3 * c)), (p + "attn.c_attn.bias", (3 * c,)),
            (p + "attn.c_proj.weight", (c, c)), (p + "attn.c_proj.bias", (c,)),
            (p + "ln_2.weight", (c,)), (p + "ln_2.bias", (c,)),
            (p + "mlp.c_fc.weight", (c, 4 * c)), (p + "mlp.c_fc.bias", (4 * c,)),
            (p + "mlp.c_proj.weight", (4 * c, c)), (p + "mlp.c_proj.bias", (c,)),
        ]
    tensors += [("transformer.ln_f.weight", (c,)), ("transformer.ln_f.bias", (c,))]
    return config, tensors


def llama(vocab, block, layers, embd, heads, kv_heads, inter):
    config = {
        "architectures": ["LlamaForCausalLM"],
        "model_type": "llama",
        "hidden_act": "silu",
        "vocab_size": vocab,
        "max_position_embeddings": block,
        "hidden_size": embd,
        "intermediate_size": inter,
        "num_hidden_layers": layers,
        "num_attention_heads": heads,
        "num_key_value_heads": kv_heads,
        "rms_norm_eps": 1e-05,
        "rope_theta": 10000.0,
        "rope_scaling": None,
        "attention_bias": False,
        "mlp_bias": False,
        "tie_word_embeddings": False,
    }
    c, kv = embd, embd // heads * kv_heads
    tensors = [("model.embed_tokens.weight", (vocab, c))]
    for i in range(layers):
        p = "model.layers.%d." % i
        tensors += [
            (p + "self_attn.q_proj.weight", (c, c)), (p + "self_attn.k_proj.weight", (kv, c)),
            (p + "self_attn.v_proj.weight", (kv, c)), (p + "self_attn.o_proj.weight", (c, c)),
            (p + "mlp.gate_proj.weight", (inter, c)), (p + "mlp.up_proj.weight", (inter, c)),
            (p + "mlp.down_proj.weight", (c, inter)),
            (p + "input_layernorm.weight", (c,)), (p + "post_attention_layernorm.weight", (c,)),
        ]
    tensors += [("model.norm.weight", (c,)), ("lm_head.weight", (vocab, c))]
    return config, tensors


SHAPES = {
    "llama2-7b": lambda: llama(32000, 4096, 32, 4096, 32, 32, 11008),
    "gpt2-xl": lambda: gpt2(50257, 1024, 48, 1600, 25),
    "tiny": lambda: gpt2(256, 128, 4, 128, 4),
    "tiny-llama": lambda: llama(256, 128, 4, 128, 4, 2, 512),
}
DTYPES = {"bf16": ("BF16", 2, "bfloat16"), "fp32": ("F32", 4, "float32")}
UNITS = {"": 1, "B": 1, "KB": 10**3, "MB": 10**6, "GB": 10**9, "KIB": 2**10, "MIB": 2**20,
         "GIB": 2**30}


def parse_size(text):
    t = text.strip().upper()
    digits = t.rstrip("KMGIB")
    if not digits.isdigit() or t[len(digits):] not in UNITS:
        raise argparse.ArgumentTypeError("%r is not a size (e.g. 2GB, 300KB, 5000000)" % text)
    return int(digits) * UNITS[t[len(digits):]]


def numel(shape):
    n = 1
    for d in shape:
        n *= d
    return n


def cut_shards(tensors, esize, limit):
    """huggingface_hub's split: lists of tensor indices, one per shard."""
    shards, current, size = [], [], 0
    for i, (_, shape) in enumerate(tensors):
        nbytes = numel(shape) * esize
        if nbytes > limit:
            shards.append([i])
            continue
        if current and size + nbytes > limit:
            shards.append(current)
            current, size = [], 0
        current.append(i)
        size += nbytes
    if current or not shards:
        shards.append(current)
    return shards


def values(seed, index, name, n):
    """The tensor's values, CHUNK fp32 elements at a time."""
    rng = np.random.Generator(np.random.PCG64([seed, index]))
    norm = name.endswith(("ln_1.weight", "ln_2.weight", "ln_f.weight", "norm.weight"))
    for lo in range(0, n, CHUNK):
        x = rng.standard_normal(min(CHUNK, n - lo), dtype=np.float32)
        x *= np.float32(STD)
        if norm:
            x += np.float32(1.0)
        yield x


def encode(x, dtype):
    if dtype == "fp32":
        return x.astype("<f4", copy=False).tobytes()
    u = x.view(np.uint32)
    rounded = (u + np.uint32(0x7FFF) + ((u >> np.uint32(16)) & np.uint32(1))) >> np.uint32(16)
    return rounded.astype("<u2").tobytes()


def write_shard(path, members, tensors, dtype, seed):
    """One .safetensors file of the tensors `members` (indices), in name order."""
    st_dtype, esize, _ = DTYPES[dtype]
    order = sorted(members, key=lambda i: tensors[i][0])
    header, offset = {"__metadata__": {"format": "pt"}}, 0
    for i in order:
        name, shape = tensors[i]
        nbytes = numel(shape) * esize
        header[name] = {"dtype": st_dtype, "shape": list(shape),
                        "data_offsets": [offset, offset + nbytes]}
        offset += nbytes
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)
    tmp = path + ".tmp"
    with open(tmp, "wb") as f:
        f.write(struct.pack("<Q", len(text)))
        f.write(text)
        for i in order:
            name, shape = tensors[i]
            for x in values(seed, i, name, numel(shape)):
                f.write(encode(x, dtype))
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    return 8 + len(text) + offset


def write_config(out, config):
    with open(os.path.join(out, "config.json"), "w") as f:
        f.write(json.dumps(config, indent=2, sort_keys=True) + "\n")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("shape", choices=sorted(SHAPES))
    ap.add_argument("--out", required=True, help="folder to write (created)")
    ap.add_argument("--dtype", choices=sorted(DTYPES), default="bf16")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--max-shard-size", type=parse_size, default=parse_size("2GB"),
                    help="bytes of tensor data per shard (default 2GB; save_pretrained's is 5GB)")
    ap.add_argument("--config-only", action="store_true",
                    help="write config.json alone (what a plan or a dry run reads)")
    a = ap.parse_args()
    if a.max_shard_size <= 0:
        ap.error("--max-shard-size must be > 0")

    config, tensors = SHAPES[a.shape]()
    config["torch_dtype"] = DTYPES[a.dtype][2]
    if a.config_only:
        os.makedirs(a.out, exist_ok=True)
        write_config(a.out, config)
        return 0
    esize = DTYPES[a.dtype][1]
    total = sum(numel(s) for _, s in tensors) * esize
    os.makedirs(a.out, exist_ok=True)
    free = shutil.disk_usage(a.out).free
    if total + DISK_MARGIN > free:
        sys.stderr.write("make_weights.py: %s: %s needs %.2f GB but the disk has %.2f GB free "
                         "(keeping %.1f GB spare): nothing written\n"
                         % (a.out, a.shape, total / 1e9, free / 1e9, DISK_MARGIN / 1e9))
        return 2

    start = time.monotonic()
    shards = cut_shards(tensors, esize, a.max_shard_size)
    n, written, weight_map = len(shards), 0, {}
    for k, members in enumerate(shards):
        file = "model.safetensors" if n == 1 else "model-%05d-of-%05d.safetensors" % (k + 1, n)
        written += write_shard(os.path.join(a.out, file), members, tensors, a.dtype, a.seed)
        for i in members:
            weight_map[tensors[i][0]] = file
    if n > 1:
        index = {"metadata": {"total_size": total}, "weight_map": weight_map}
        with open(os.path.join(a.out, "model.safetensors.index.json"), "w") as f:
            f.write(json.dumps(index, indent=2, sort_keys=True) + "\n")
    write_config(a.out, config)
    seconds = time.monotonic() - start
    params = sum(numel(s) for _, s in tensors)
    print("%-10s %6s %14s %6s %16s %9s %9s" % ("shape", "dtype", "parameters", "shards",
                                             "bytes written", "seconds", "MB/s"))
    print("%-10s %6s %14d %6d %16d %9.1f %9.1f" % (a.shape, a.dtype, params, n, written, seconds,
                                                 written / 1e6 / max(seconds, 1e-9)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
