#!/usr/bin/env python3
"""write_safetensors.py — a small safetensors file for zerotrain's reader test.

An independent writer of the Hugging Face safetensors format that uses only
the Python standard library (struct for the little-endian bytes, json for the
header), so that the C reader is checked against a file it did not write.

Layout: uint64 little-endian header length N, N bytes of JSON, data section.
The JSON maps each tensor name to {"dtype", "shape", "data_offsets"} with
offsets relative to the data section, plus "__metadata__" (string values).

What the file exercises:
  - F32, F16, BF16 and F64 tensors, 2-D, 1-D and 0-D (a scalar), an empty
    tensor (shape [3, 0]) and an I32 tensor;
  - header keys written sorted by name while the data is laid out in the
    order of TENSORS below, so header order and data order differ;
  - json.dumps's default separators (", ", ": ") and ASCII-only output, so
    the tensor name with "é", "😀" and a quote arrives as \\u00e9, a
    \\ud83d\\ude00 surrogate pair and \\";
  - metadata with escapes; the header padded with spaces to a multiple of 8.

Values: element i (row-major) of the tensor at position k of TENSORS is
sin(k * 100 + i) computed in double. F64 stores it as is; F32 rounds it to
nearest even (struct '<f'); F16 and BF16 round that F32 value again, to
nearest even, as a float32 model is exported: F16 by struct '<e', BF16 by
rounding the lower half of the F32 bits away. (Rounding the double straight
to F16 would differ now and then: sin(300) lies just below a tie that the
F32 rounding lands on.) The I32 tensor holds 7 * i - 10. The "specials"
tensor holds the F16 edge values of SPECIALS.

Usage: python3 scripts/reference/write_safetensors.py --out tests/data/reference.safetensors
"""

import argparse
import json
import math
import struct

# (name, dtype, shape), in data order; k is the position in this list.
TENSORS = [
    ("wte", "F32", [5, 7]),
    ("h.0.attn.c_attn.bias", "F32", [7]),
    ("h.0.mlp.c_fc.weight", "F16", [6, 4]),
    ("h.0.ln_1.weight", "F16", [9]),
    ("h.0.mlp.c_proj.weight", "BF16", [4, 6]),
    ("ln_f.bias", "BF16", [11]),
    ("scalar", "F32", []),
    ("empty", "F16", [3, 0]),
    ("position_ids", "I32", [4]),
    ("uni.\u00e9.\U0001F600 \"q\"", "F32", [2, 3]),
    ("wpe", "F64", [3]),
    ("specials", "F16", [9]),
]

# Zero, negative zero, one, a negative value, the largest finite F16, the
# smallest subnormal, the largest subnormal, a value that rounds to zero,
# and infinity.
SPECIALS = [0.0, -0.0, 1.0, -2.5, 65504.0, 2.0**-24, 2.0**-14 - 2.0**-24, 1e-8, math.inf]

METADATA = {"format": "pt", "generator": "write_safetensors.py",
            "note": "tab\there, quote \" and \u00e9"}


def f32(x):
    """x rounded to the nearest float32, as a Python float (exact)."""
    return struct.unpack("<f", struct.pack("<f", x))[0]


def bf16_bits(x):
    """The BF16 bits of double x: to F32 first, then round to nearest even."""
    (u,) = struct.unpack("<I", struct.pack("<f", x))
    return ((u + 0x7FFF + ((u >> 16) & 1)) >> 16) & 0xFFFF


def pack_value(dtype, x):
    if dtype == "F32":
        return struct.pack("<f", x)
    if dtype == "F16":
        return struct.pack("<e", f32(x))
    if dtype == "BF16":
        return struct.pack("<H", bf16_bits(x))
    if dtype == "F64":
        return struct.pack("<d", x)
    raise ValueError(dtype)


def tensor_bytes(k, name, dtype, shape):
    n = 1
    for d in shape:
        n *= d
    if name == "specials":
        return b"".join(pack_value(dtype, v) for v in SPECIALS)
    if dtype == "I32":
        return b"".join(struct.pack("<i", 7 * i - 10) for i in range(n))
    return b"".join(pack_value(dtype, math.sin(k * 100 + i)) for i in range(n))


def build():
    header = {"__metadata__": METADATA}
    data = b""
    for k, (name, dtype, shape) in enumerate(TENSORS):
        b = tensor_bytes(k, name, dtype, shape)
        header[name] = {"dtype": dtype, "shape": shape,
                        "data_offsets": [len(data), len(data) + len(b)]}
        data += b
    text = json.dumps(header, sort_keys=True).encode("utf-8")
    text += b" " * (-len(text) % 8)
    return struct.pack("<Q", len(text)) + text + data


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", required=True, help="output .safetensors path")
    args = ap.parse_args()
    blob = build()
    with open(args.out, "wb") as f:
        f.write(blob)
    print("wrote %d bytes to %s" % (len(blob), args.out))


if __name__ == "__main__":
    main()
