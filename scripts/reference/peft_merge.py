#!/usr/bin/python3
"""peft_merge.py — merge a PEFT LoRA adapter into Hugging Face weights as
PEFT's merge_and_unload() does, in float64 with PyTorch, and compare the
result with a merged model written by `zerotrain export --merge`.

For every adapted module the adapter folder (adapter_config.json and
adapter_model.safetensors, as PeftModel.save_pretrained or `zerotrain export
--adapter` writes them) holds base_model.model.<module>.lora_A.weight [r, in]
and .lora_B.weight [out, r]; PEFT's LoraLayer.get_delta_weight is

    delta = transpose(B @ A, fan_in_fan_out) * (lora_alpha / r)

(fan_in_fan_out for GPT-2's Conv1D, whose weight is stored [in, out]), and
merging adds it to <module>.weight. Here W, A and B are widened to float64,
the sum is formed in float64 and rounded to float32 once, which is what
zerotrain computes (worker/lora.h, lora_merge); the comparison allows one
float32 rounding step (the summation order of B @ A may differ).

The base file may name a module with or without its model prefix
("transformer.h.0.attn.c_attn.weight" or "h.0.attn.c_attn.weight"), as
Hugging Face's files do; the merged file is compared tensor by tensor under
the same rule (the base's buffers, which a merged model leaves out, are not
compared), and a tensor no adapter touches must equal the base's.

Reads safetensors with the standard library and torch.frombuffer (no
safetensors or peft package needed). Exit status 0 when everything agrees,
1 otherwise, with one line per differing tensor.

Usage: /usr/bin/python3 scripts/reference/peft_merge.py --base BASE.safetensors
           --adapter ADAPTER_DIR --merged MERGED.safetensors
"""
import argparse
import json
import os
import struct
import sys

import torch

DTYPES = {"F32": torch.float32, "F16": torch.float16, "BF16": torch.bfloat16, "F64": torch.float64}
PREFIX = "base_model.model."


def read_safetensors(path):
    """{name: float64 tensor} of a safetensors file."""
    with open(path, "rb") as f:
        data = f.read()
    (n,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8 : 8 + n])
    body = memoryview(data)[8 + n :]
    out = {}
    for name, info in header.items():
        if name == "__metadata__" or info["dtype"] not in DTYPES:
            continue
        begin, end = info["data_offsets"]
        raw = bytearray(body[begin:end])
        t = torch.frombuffer(raw, dtype=DTYPES[info["dtype"]]) if raw else torch.zeros(0)
        out[name] = t.reshape(info["shape"]).to(torch.float64)
    return out


def find(tensors, name):
    """The key of `name` in tensors, with or without its first component."""
    if name in tensors:
        return name
    bare = name.split(".", 1)[1] if "." in name else name
    return bare if bare in tensors else None


def merge(base, adapter, config):
    scaling = config["lora_alpha"] / config["r"]
    merged = dict(base)
    for name, a in adapter.items():
        if not name.endswith(".lora_A.weight"):
            continue
        module = name[len(PREFIX) : -len(".lora_A.weight")]
        b = adapter[name.replace(".lora_A.", ".lora_B.")]
        key = find(base, module + ".weight")
        if key is None:
            raise SystemExit(f"the base has no weight for {module}")
        delta = b @ a
        if config.get("fan_in_fan_out"):
            delta = delta.T
        merged[key] = (base[key] + delta * scaling).to(torch.float32).to(torch.float64)
    return merged


def compare(want, got):
    """Every tensor of the merged file against the reference's."""
    bad = 0
    for name, g in got.items():
        key = find(want, name)
        if key is None:
            print(f"{name}: not in the base")
            bad += 1
            continue
        w = want[key]
        if g.shape != w.shape:
            print(f"{name}: shape {list(g.shape)}, expected {list(w.shape)}")
            bad += 1
            continue
        ulp = torch.finfo(torch.float32).eps * w.abs().clamp(min=torch.finfo(torch.float32).tiny)
        over = (g - w).abs() > ulp
        if bool(over.any()):
            print(f"{name}: {int(over.sum())} of {w.numel()} elements differ by more than one "
                  f"rounding step (largest {float((g - w).abs().max()):.3g})")
            bad += 1
    return bad


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--base", required=True)
    p.add_argument("--adapter", required=True)
    p.add_argument("--merged", required=True)
    args = p.parse_args()
    with open(os.path.join(args.adapter, "adapter_config.json")) as f:
        config = json.load(f)
    if config.get("peft_type") != "LORA":
        raise SystemExit("not a LoRA adapter")
    base = read_safetensors(args.base)
    adapter = read_safetensors(os.path.join(args.adapter, "adapter_model.safetensors"))
    want = merge(base, adapter, config)
    bad = compare(want, read_safetensors(args.merged))
    print(f"{len(want)} base tensors, {len(adapter) // 2} adapted: "
          f"{'all agree' if not bad else f'{bad} differ'}")
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
