#!/usr/bin/env python3
"""write_hf_gpt2.py — a GPT-2 safetensors file in Hugging Face's layout.

An independent writer, standard library only, of what Hugging Face's GPT2Model
state dict looks like once saved with safetensors, so that zerotrain's import
(formats/hf_gpt2.c) is checked against names, shapes and Conv1D layouts it
did not produce itself.

Tensors, in this order (C = n_embd, T = block size, i = 0 .. layers-1):
    wte.weight [vocab, C], wpe.weight [T, C],
    h.i.ln_1.weight [C], h.i.ln_1.bias [C],
    h.i.attn.c_attn.weight [C, 3C], h.i.attn.c_attn.bias [3C],
    h.i.attn.c_proj.weight [C, C], h.i.attn.c_proj.bias [C],
    h.i.ln_2.weight [C], h.i.ln_2.bias [C],
    h.i.mlp.c_fc.weight [C, 4C], h.i.mlp.c_fc.bias [4C],
    h.i.mlp.c_proj.weight [4C, C], h.i.mlp.c_proj.bias [C],
    ln_f.weight [C], ln_f.bias [C].
The four Conv1D weights (c_attn, c_proj, c_fc, mlp.c_proj) are [in, out], as
Hugging Face stores them. With --buffers, each layer is followed by the
attention buffers older transformers versions save: h.i.attn.bias
[1, 1, T, T] (the lower-triangular causal mask, 1.0 on and below the
diagonal, 0.0 above) and h.i.attn.masked_bias (a scalar, -10000.0), both F32.

Values: element j (row-major, in the layout above) of the parameter tensor at
position k of that list (buffers not counted: wte is k = 0, ln_f.bias is
k = 2 + 12 * layers + 1) is 0.02 * sin(1.3 * k + 0.01 * j), computed in
double and rounded to the nearest float32. F16 and BF16 round that float32
value again, to nearest even.

Header: keys in data order, json.dumps's default separators, metadata
{"format": "pt"}, padded with spaces to a multiple of 8 bytes.

--heads is only checked to divide --embd: no shape depends on it.

Usage:
    python3 scripts/reference/write_hf_gpt2.py --vocab 256 --block 32 --layers 2 \\
        --heads 2 --embd 32 --buffers --out tests/data/hf_gpt2_micro.safetensors
"""

import argparse
import json
import math
import struct

BLOCK_TENSORS = [
    # (suffix, shape in multiples of C)
    ("ln_1.weight", [1]),
    ("ln_1.bias", [1]),
    ("attn.c_attn.weight", [1, 3]),
    ("attn.c_attn.bias", [3]),
    ("attn.c_proj.weight", [1, 1]),
    ("attn.c_proj.bias", [1]),
    ("ln_2.weight", [1]),
    ("ln_2.bias", [1]),
    ("mlp.c_fc.weight", [1, 4]),
    ("mlp.c_fc.bias", [4]),
    ("mlp.c_proj.weight", [4, 1]),
    ("mlp.c_proj.bias", [1]),
]


def parameters(vocab, block, layers, embd):
    """[(name, shape)] of the parameters, in data order."""
    out = [("wte.weight", [vocab, embd]), ("wpe.weight", [block, embd])]
    for i in range(layers):
        for suffix, mul in BLOCK_TENSORS:
            out.append(("h.%d.%s" % (i, suffix), [m * embd for m in mul]))
    out += [("ln_f.weight", [embd]), ("ln_f.bias", [embd])]
    return out


def numel(shape):
    n = 1
    for d in shape:
        n *= d
    return n


def f32(x):
    """x rounded to the nearest float32, as a Python float (exact)."""
    return struct.unpack("<f", struct.pack("<f", x))[0]


def pack(dtype, values):
    if dtype == "F32":
        return struct.pack("<%df" % len(values), *values)
    if dtype == "F16":
        return struct.pack("<%de" % len(values), *[f32(v) for v in values])
    out = []
    for (u,) in struct.iter_unpack("<I", struct.pack("<%df" % len(values), *values)):
        out.append(((u + 0x7FFF + ((u >> 16) & 1)) >> 16) & 0xFFFF)
    return struct.pack("<%dH" % len(out), *out)


def formula(k, n):
    return [0.02 * math.sin(1.3 * k + 0.01 * j) for j in range(n)]


def tensors(args):
    """[(name, dtype, shape, bytes)] in data order."""
    out = []
    params = parameters(args.vocab, args.block, args.layers, args.embd)
    for k, (name, shape) in enumerate(params):
        out.append((name, args.dtype, shape, pack(args.dtype, formula(k, numel(shape)))))
        if args.buffers and name.endswith(".mlp.c_proj.bias"):
            layer = name[: -len("mlp.c_proj.bias")]
            t = args.block
            mask = [1.0 if c <= r else 0.0 for r in range(t) for c in range(t)]
            out.append((layer + "attn.bias", "F32", [1, 1, t, t], pack("F32", mask)))
            out.append((layer + "attn.masked_bias", "F32", [], pack("F32", [-10000.0])))
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--vocab", type=int, required=True)
    ap.add_argument("--block", type=int, required=True)
    ap.add_argument("--layers", type=int, required=True)
    ap.add_argument("--heads", type=int, required=True)
    ap.add_argument("--embd", type=int, required=True)
    ap.add_argument("--dtype", choices=["F32", "F16", "BF16"], default="F32")
    ap.add_argument("--buffers", action="store_true",
                    help="also write the attn.bias / attn.masked_bias buffers")
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    if args.embd % args.heads:
        ap.error("--embd must be a multiple of --heads")

    header, data, offset = {}, [], 0
    for name, dtype, shape, raw in tensors(args):
        header[name] = {"dtype": dtype, "shape": shape,
                        "data_offsets": [offset, offset + len(raw)]}
        data.append(raw)
        offset += len(raw)
    header["__metadata__"] = {"format": "pt"}
    text = json.dumps(header).encode("utf-8")
    text += b" " * (-len(text) % 8)
    with open(args.out, "wb") as f:
        f.write(struct.pack("<Q", len(text)))
        f.write(text)
        for raw in data:
            f.write(raw)


if __name__ == "__main__":
    main()
