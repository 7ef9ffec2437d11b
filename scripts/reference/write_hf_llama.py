#!/usr/bin/env python3
"""write_hf_llama.py — a Hugging Face LlamaForCausalLM checkpoint from a llama reference file.

An independent writer, standard library only, of what Hugging Face's
save_pretrained writes for a LlamaForCausalLM (safetensors weights and
config.json), so that zerotrain's Llama import and export are checked against
names, shapes, file layouts and sharding they did not produce themselves. It
shares no code with zerotrain or with the other scripts here: it reads the
parameters of a llama_reference.py file (magic "ZTLLAM01"; that script's
docstring has the format) and writes them under Hugging Face's names.

Tensors (C = hidden_size, hs = C / num_attention_heads, I = intermediate_size;
nn.Linear weights [out, in], row-major):
    model.embed_tokens.weight [V, C]
    model.layers.{i}.input_layernorm.weight [C]
    model.layers.{i}.self_attn.q_proj.weight [n_head*hs, C]
    model.layers.{i}.self_attn.k_proj.weight [n_kv_head*hs, C]
    model.layers.{i}.self_attn.v_proj.weight [n_kv_head*hs, C]
    model.layers.{i}.self_attn.o_proj.weight [C, n_head*hs]
    model.layers.{i}.post_attention_layernorm.weight [C]
    model.layers.{i}.mlp.gate_proj.weight [I, C]
    model.layers.{i}.mlp.up_proj.weight [I, C]
    model.layers.{i}.mlp.down_proj.weight [C, I]
    model.norm.weight [C]
    lm_head.weight [V, C]            (omitted when tie_word_embeddings, as
                                      save_pretrained drops the tied copy)
Values: the reference file's float32 parameters. --dtype f32 (default) stores
them as they are; bf16 and f16 round each float32 to nearest even (F16 by
struct '<e', BF16 by rounding the low 16 bits of the float32 away).

Each .safetensors file is laid out as the safetensors library (Rust core,
used by safetensors.torch.save_file) lays it out: uint64 little-endian header
length, then compact JSON (separators "," and ":") holding "__metadata__"
{"format": "pt"} first and then one entry per tensor, {"dtype", "shape",
"data_offsets"} in that key order, tensors sorted by name (all share one
dtype, so the library's dtype-alignment key does not reorder them); the
header is padded with spaces to a multiple of 8 bytes; the data follows in
the same sorted-name order.

Modes:
  --out DIR              DIR/model.safetensors and DIR/config.json.
  --out DIR --shards N   DIR/model-0000k-of-0000N.safetensors (k = 1 .. N,
                         five digits), DIR/model.safetensors.index.json and
                         DIR/config.json. The tensors are split as
                         huggingface_hub's split_torch_state_dict_into_shards
                         splits them: in state-dict order (embed_tokens; per
                         layer q, k, v, o, gate, up, down, input_layernorm,
                         post_attention_layernorm, the modules' registration
                         order; norm; lm_head) a tensor joins the current
                         shard unless that would take the shard past
                         max_shard_size bytes, then it starts the next (a
                         tensor larger than max_shard_size gets a shard of its
                         own). max_shard_size is the smallest byte count not
                         below total/N for which this gives at most N shards;
                         fewer than N is an error.
                         The index is {"metadata": {"total_size": bytes of all
                         tensor data}, "weight_map": {name: file}}, written
                         as transformers writes it: json.dumps(indent=2,
                         sort_keys=True) and a newline.
config.json: a LlamaConfig as transformers writes it (json.dumps(indent=2,
sort_keys=True) and a newline): architectures ["LlamaForCausalLM"],
model_type "llama", the sizes from the reference file (max_position_embeddings
is its maxT), rms_norm_eps and rope_theta as the shortest decimals that round
to its float32 values, tie_word_embeddings, hidden_act "silu", torch_dtype
(float32, bfloat16 or float16 after --dtype), attention_bias false, and
LlamaConfig's remaining defaults (attention_dropout, bos/eos_token_id,
head_dim, initializer_range, mlp_bias, pretraining_tp, rope_scaling,
transformers_version, use_cache).

Usage:
  python3 scripts/reference/write_hf_llama.py tests/data/llama_reference.bin --out tests/data/hf_llama_micro
  python3 scripts/reference/write_hf_llama.py tests/data/llama_reference.bin --shards 3 --out tests/data/hf_llama_sharded
  python3 scripts/reference/write_hf_llama.py tests/data/llama_reference_tied.bin --out tests/data/hf_llama_tied
"""

import argparse
import json
import os
import struct
import sys

MAGIC = b"ZTLLAM01"
DTYPES = {  # option -> (safetensors dtype, bytes per element, torch_dtype)
    "f32": ("F32", 4, "float32"),
    "bf16": ("BF16", 2, "bfloat16"),
    "f16": ("F16", 2, "float16"),
}


class Reader:
    def __init__(self, blob):
        self.blob, self.pos = blob, 0

    def take(self, fmt, count=1):
        size = struct.calcsize("<%d%s" % (count, fmt))
        if self.pos + size > len(self.blob):
            raise ValueError("file ends early")
        out = struct.unpack_from("<%d%s" % (count, fmt), self.blob, self.pos)
        self.pos += size
        return list(out)


def read_reference(path):
    """(config dict, flat float32 parameters as Python floats)."""
    with open(path, "rb") as f:
        blob = f.read()
    if blob[:8] != MAGIC:
        raise ValueError("%s: not a llama reference file (magic %r)" % (path, blob[:8]))
    r = Reader(blob)
    r.pos = 8
    keys = ["V", "maxT", "n_layer", "n_head", "n_kv_head", "n_embd", "intermediate_size",
            "tie_word_embeddings", "B", "T"]
    cfg = dict(zip(keys, r.take("i", len(keys))))
    cfg["rope_theta"], cfg["rms_norm_eps"] = r.take("f", 2)
    (n_params,) = r.take("i")
    r.take("i", 2 * cfg["B"] * cfg["T"])            # inputs, targets
    params = r.take("f", n_params)
    return cfg, params


def hf_tensors(cfg):
    """[(Hugging Face name, shape)] in the reference file's flat order."""
    V, C, I = cfg["V"], cfg["n_embd"], cfg["intermediate_size"]
    if C % cfg["n_head"] or cfg["n_head"] % cfg["n_kv_head"]:
        raise ValueError("head counts do not divide the sizes")
    hs = C // cfg["n_head"]
    nq, nkv = cfg["n_head"] * hs, cfg["n_kv_head"] * hs
    out = [("model.embed_tokens.weight", [V, C])]
    for i in range(cfg["n_layer"]):
        p = "model.layers.%d." % i
        out += [
            (p + "input_layernorm.weight", [C]),
            (p + "self_attn.q_proj.weight", [nq, C]),
            (p + "self_attn.k_proj.weight", [nkv, C]),
            (p + "self_attn.v_proj.weight", [nkv, C]),
            (p + "self_attn.o_proj.weight", [C, nq]),
            (p + "post_attention_layernorm.weight", [C]),
            (p + "mlp.gate_proj.weight", [I, C]),
            (p + "mlp.up_proj.weight", [I, C]),
            (p + "mlp.down_proj.weight", [C, I]),
        ]
    out.append(("model.norm.weight", [C]))
    if not cfg["tie_word_embeddings"]:
        out.append(("lm_head.weight", [V, C]))
    return out


def state_dict_order(names, n_layer):
    """The names in LlamaForCausalLM.state_dict() order."""
    order = ["model.embed_tokens.weight"]
    for i in range(n_layer):
        p = "model.layers.%d." % i
        order += [p + s for s in (
            "self_attn.q_proj.weight", "self_attn.k_proj.weight", "self_attn.v_proj.weight",
            "self_attn.o_proj.weight", "mlp.gate_proj.weight", "mlp.up_proj.weight",
            "mlp.down_proj.weight", "input_layernorm.weight", "post_attention_layernorm.weight")]
    order += ["model.norm.weight", "lm_head.weight"]
    present = set(names)
    out = [n for n in order if n in present]
    assert len(out) == len(names)
    return out


def numel(shape):
    n = 1
    for d in shape:
        n *= d
    return n


def encode(values, dtype):
    """Little-endian bytes of float32 values in the safetensors dtype."""
    raw = struct.pack("<%df" % len(values), *values)
    if dtype == "F32":
        return raw
    if dtype == "F16":
        return struct.pack("<%de" % len(values), *values)
    bits = []
    for (u,) in struct.iter_unpack("<I", raw):
        bits.append(((u + 0x7FFF + ((u >> 16) & 1)) >> 16) & 0xFFFF)
    return struct.pack("<%dH" % len(bits), *bits)


def safetensors_bytes(tensors):
    """tensors: {name: (dtype, shape, bytes)} -> the file, as the library writes it."""
    header = {"__metadata__": {"format": "pt"}}
    data, offset = [], 0
    for name in sorted(tensors):
        dtype, shape, raw = tensors[name]
        header[name] = {"dtype": dtype, "shape": shape,
                        "data_offsets": [offset, offset + len(raw)]}
        data.append(raw)
        offset += len(raw)
    text = json.dumps(header, separators=(",", ":")).encode("utf-8")
    text += b" " * (-len(text) % 8)
    return struct.pack("<Q", len(text)) + text + b"".join(data)


def split_shards(order, sizes, max_shard_size):
    """huggingface_hub's split: lists of names, one per shard."""
    shards, current, current_size = [], [], 0
    for name in order:
        size = sizes[name]
        if size > max_shard_size:
            shards.append([name])
            continue
        if current_size + size > max_shard_size:
            shards.append(current)
            current, current_size = [], 0
        current.append(name)
        current_size += size
    if current:
        shards.append(current)
    return shards


def shortest_decimal(x):
    """The shortest decimal (as a Python float) that rounds to float32 x."""
    for digits in range(1, 10):
        y = float("%.*g" % (digits, x))
        if struct.unpack("<f", struct.pack("<f", y))[0] == x:
            return y
    return x


def config_json(cfg, torch_dtype):
    C, nh = cfg["n_embd"], cfg["n_head"]
    conf = {
        "architectures": ["LlamaForCausalLM"],
        "attention_bias": False,
        "attention_dropout": 0.0,
        "bos_token_id": 1,
        "eos_token_id": 2,
        "head_dim": C // nh,
        "hidden_act": "silu",
        "hidden_size": C,
        "initializer_range": 0.02,
        "intermediate_size": cfg["intermediate_size"],
        "max_position_embeddings": cfg["maxT"],
        "mlp_bias": False,
        "model_type": "llama",
        "num_attention_heads": nh,
        "num_hidden_layers": cfg["n_layer"],
        "num_key_value_heads": cfg["n_kv_head"],
        "pretraining_tp": 1,
        "rms_norm_eps": shortest_decimal(cfg["rms_norm_eps"]),
        "rope_scaling": None,
        "rope_theta": shortest_decimal(cfg["rope_theta"]),
        "tie_word_embeddings": bool(cfg["tie_word_embeddings"]),
        "torch_dtype": torch_dtype,
        "transformers_version": "4.46.3",
        "use_cache": True,
        "vocab_size": cfg["V"],
    }
    return json.dumps(conf, indent=2, sort_keys=True) + "\n"


def write(path, blob):
    mode = "w" if isinstance(blob, str) else "wb"
    with open(path, mode) as f:
        f.write(blob)
    print("wrote %s (%d bytes)" % (path, len(blob)))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("reference", help="a llama_reference.py output file")
    ap.add_argument("--out", required=True, help="output directory")
    ap.add_argument("--dtype", choices=sorted(DTYPES), default="f32")
    ap.add_argument("--shards", type=int, default=0,
                    help="write N shard files and an index instead of model.safetensors")
    args = ap.parse_args()
    if args.shards == 1 or args.shards < 0:
        ap.error("--shards must be at least 2 (leave it out for one file)")

    cfg, flat = read_reference(args.reference)
    st_dtype, elem_bytes, torch_dtype = DTYPES[args.dtype]
    specs = hf_tensors(cfg)
    if sum(numel(s) for _, s in specs) != len(flat):
        raise ValueError("n_params %d does not match the configuration" % len(flat))
    tensors, pos = {}, 0
    for name, shape in specs:
        n = numel(shape)
        tensors[name] = (st_dtype, shape, encode(flat[pos:pos + n], st_dtype))
        pos += n

    os.makedirs(args.out, exist_ok=True)
    if not args.shards:
        write(os.path.join(args.out, "model.safetensors"), safetensors_bytes(tensors))
    else:
        sizes = {name: len(t[2]) for name, t in tensors.items()}
        total = sum(sizes.values())
        order = state_dict_order(list(tensors), cfg["n_layer"])
        max_size = -(-total // args.shards)
        while len(split_shards(order, sizes, max_size)) > args.shards:
            max_size += 1
        shards = split_shards(order, sizes, max_size)
        if len(shards) != args.shards:
            raise ValueError("cannot split %d tensors into %d shards"
                             % (len(order), args.shards))
        weight_map = {}
        for k, names in enumerate(shards):
            fname = "model-%05d-of-%05d.safetensors" % (k + 1, len(shards))
            write(os.path.join(args.out, fname),
                  safetensors_bytes({n: tensors[n] for n in names}))
            for n in names:
                weight_map[n] = fname
        index = {"metadata": {"total_size": total}, "weight_map": weight_map}
        write(os.path.join(args.out, "model.safetensors.index.json"),
              json.dumps(index, indent=2, sort_keys=True) + "\n")
        print("max_shard_size %d bytes (total %d, %d shards)" % (max_size, total, len(shards)))
    write(os.path.join(args.out, "config.json"), config_json(cfg, torch_dtype))
    return 0


if __name__ == "__main__":
    sys.exit(main())
