#!/usr/bin/env python3
"""quant4_reference.py — bitsandbytes' 4-bit block-wise quantisation in float32.

Writes tests/data/quant4_reference.bin for tests/test_quant4.c: a few
tensors, each quantised as NF4 and FP4, with and without double
quantisation, with the packed codes, the block statistics and the
dequantised values. Only the Python standard library is used; every
float32 operation of the kernels is emulated by rounding its exact (or
float64) result to float32 with struct, which gives the float32 result:
a product of two float32 values is exact in float64, and a float64 sum or
quotient of two float32 values rounded to float32 is the float32 sum or
quotient (53 >= 2 * 24 + 2 bits). Nothing is shared with the C code under
test; the dynamic 8-bit map comes from optimizer_reference.py beside this
script.

What is emulated (bitsandbytes-foundation/bitsandbytes at commit 95f9af30:
quantize_4bit and dequantize_4bit in bitsandbytes/functional.py, the CUDA
kernels kQuantizeBlockwise / kQuantizeBlockwiseSmall, kDequantizeBlockwise,
dQuantizeNF4, dQuantizeFP4, dDequantizeFP4Tree and dQuantize in
csrc/kernels.cu):
  - blocks of 64 elements of the flattened tensor, the last one short when
    64 does not divide n; absmax = max |x| over the block (float32);
  - each element is x * inv with inv = 1.0f / absmax rounded to float32
    (a reciprocal, then a multiply: not x / absmax, which differs in the
    last bit often enough to change codes; the "reciprocal" tensor below
    holds values where it does), then the code of dQuantizeNF4's or
    dQuantizeFP4's decision tree, transcribed below as nested ifs with
    their float32 thresholds (x > t goes up, so x == t takes the lower
    branch);
  - codes packed two per byte, element 2k in the high nibble, 2k+1 in the
    low one; an odd n leaves the last low nibble 0;
  - dequantised value: code[q] * absmax in float32, code[] being
    nf4_dequantization_lut, or for FP4 fp4_dequantization_lut[q & 7] times
    (1 - 2 * (q >> 3)), so code 8 is -0.0;
  - double quantisation (compress_statistics=True): offset = mean of the
    absmax values, the differences absmax - offset in float32, then
    quantize_blockwise(blocksize=256) with the signed dynamic map
    (create_dynamic_map(signed=True)): absmax2 = max |d| per 256 values,
    d * (1.0f / absmax2) encoded by dQuantize<0> (the binary search and
    midpoint compare of optimizer_reference.quantize_2d: dQuantize's only
    difference, taking code[0] rather than -1 as the lower neighbour when
    the search never went up, cannot change a code, since it ends at index
    0 then and both answers are 0), and on dequantisation absmax = map[q] * absmax2 (float32),
    then + offset (float32), then code[q] * absmax.

Two rules of zerotrain that are not bitsandbytes' kernel to the bit (both
written out where they apply below, and in worker/quant4.h):
  - a block whose absmax is 0 takes the code of 0 for every element (NF4
    7, FP4 0). The kernel computes 1.0f / 0 = inf and 0 * inf = NaN, which
    fails every comparison of the tree and lands on code 0: for NF4 that is
    -1.0, which dequantises to -0.0 without double quantisation but to
    -(map[q] * absmax2 + offset), not 0, with it. The script prints how
    many codes this changes.
  - the offset is the float64 sum of the absmax values, in block order,
    divided by their count and rounded once to float32 (torch's float32
    mean() reduces in its own order and may differ in the last bit).
A group of 256 scales that all equal the offset has absmax2 0: the
kernel's NaN lands on code 0 of the dynamic map, which dequantises to
-0.0 * 0 + offset = offset, exactly right, so that case follows the kernel.

Output (little-endian, no padding):
  char[8]   "ZTQ4R001"
  float32   nf4_code[16], fp4_code[16]    the code books, by code
  int32     n_tensors
  per tensor:
    char[24]  name, NUL-padded
    int32     n
    float32   x[n]
  int32     n_results
  per result (every tensor as nf4 and fp4, each without and with double
  quantisation, in that order):
    int32     tensor index
    int32     type (0 nf4, 1 fp4)
    int32     double_quant (0 or 1)
    uint8     codes[ceil(n / 2)]
    without double quantisation:
      float32   absmax[B]                  B = ceil(n / 64)
    with it:
      float32   offset
      float32   absmax2[G]                 G = ceil(B / 256)
      uint8     qabsmax[B]
    float32   out[n]                       the dequantised tensor

Usage: python3 scripts/reference/quant4_reference.py --out tests/data/quant4_reference.bin
       python3 scripts/reference/quant4_reference.py --print-codes
"""

import argparse
import math
import os
import random
import struct
import sys
from fractions import Fraction

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from optimizer_reference import c_hex, dynamic_map, f32, quantize_2d  # noqa: E402

MAGIC = b"ZTQ4R001"
NAME_BYTES = 24
BLOCK = 64
GROUP = 256
NF4, FP4 = 0, 1
TYPE_NAMES = ("nf4", "fp4")


def f32_literal(text):
    """The float32 a C compiler gives the literal `text` + "f": the nearest
    float32 to the exact decimal, ties to even (not float(text) rounded
    again, which could round twice)."""
    exact = Fraction(text)
    guess = f32(float(text))
    bits = struct.unpack("<I", struct.pack("<f", guess))[0]
    best = None
    for b in (bits - 1, bits, bits + 1):
        cand = struct.unpack("<f", struct.pack("<I", b & 0xFFFFFFFF))[0]
        if not math.isfinite(cand):
            continue
        key = (abs(Fraction(cand) - exact), b & 1)
        if best is None or key < best[0]:
            best = (key, cand)
    return best[1]


# ---- the code books and trees of csrc/kernels.cu

NF4_LUT = [f32_literal(s) for s in (
    "-1.0", "-0.6961928009986877", "-0.5250730514526367", "-0.39491748809814453",
    "-0.28444138169288635", "-0.18477343022823334", "-0.09105003625154495", "0.0",
    "0.07958029955625534", "0.16093020141124725", "0.24611230194568634",
    "0.33791524171829224", "0.44070982933044434", "0.5626170039176941",
    "0.7229568362236023", "1.0")]

FP4_MAGNITUDES = [f32_literal(s) for s in (
    "0.0", "0.005208333333", "0.66666667", "1.0", "0.33333333", "0.5", "0.16666667", "0.25")]


def fp4_decode(q):
    """dDequantizeFP4Tree: the magnitude of bits 0-2 times 1 - 2 * sign."""
    sign = 1.0 - 2 * ((q & 0b1000) >> 3)
    return f32(FP4_MAGNITUDES[q & 0b111] * sign)


FP4_LUT = [fp4_decode(q) for q in range(16)]


def T(text):
    return f32_literal(text)


NF4_TREE = {k: T(v) for k, v in dict(
    root="0.03979014977812767", r="0.3893125355243683", rr="0.6427869200706482",
    rrr="0.8614784181118011", rrl="0.5016634166240692", rl="0.2035212516784668",
    rlr="0.2920137718319893", rll="0.1202552504837513", l="-0.33967943489551544",
    lr="-0.13791173323988914", lrr="-0.045525018125772476", lrl="-0.23460740596055984",
    ll="-0.6106329262256622", llr="-0.4599952697753906", lll="-0.8480964004993439").items()}


def nf4_tree(x):
    """dQuantizeNF4, node for node."""
    t = NF4_TREE
    if x > t["root"]:
        if x > t["r"]:
            if x > t["rr"]:
                return 0b1111 if x > t["rrr"] else 0b1110
            return 0b1101 if x > t["rrl"] else 0b1100
        if x > t["rl"]:
            return 0b1011 if x > t["rlr"] else 0b1010
        return 0b1001 if x > t["rll"] else 0b1000
    if x > t["l"]:
        if x > t["lr"]:
            return 0b0111 if x > t["lrr"] else 0b0110
        return 0b0101 if x > t["lrl"] else 0b0100
    if x > t["ll"]:
        return 0b0011 if x > t["llr"] else 0b0010
    return 0b0001 if x > t["lll"] else 0b0000


FP4_TREE = [T(s) for s in (
    "0.29166667", "0.583333", "0.8333333", "0.4166667", "0.0859375", "0.20833333",
    "0.00260417")]


def fp4_tree(x):
    """dQuantizeFP4, node for node: the sign bit, then a tree on |x|."""
    t_mid, t_hi, t_top, t_hl, t_lo, t_lh, t_sub = FP4_TREE
    sign = 0b1000 if x < 0 else 0b0000
    x = abs(x)
    if x > t_mid:
        if x > t_hi:
            return (0b0011 if x > t_top else 0b0010) + sign
        return (0b101 if x > t_hl else 0b100) + sign
    if x > t_lo:
        return (0b0111 if x > t_lh else 0b0110) + sign
    return (0b0001 if x > t_sub else 0b0000) + sign


TREES = (nf4_tree, fp4_tree)
LUTS = (NF4_LUT, FP4_LUT)


def check_code_books():
    """The kernels' tables against functional.get_4bit_type's values: NF4
    the same list, FP4 [0, 0.0625, 8, 12, 4, 6, 2, 3] / 12 in float32 (its
    -0 is Python's integer 0, so code 8 is +0.0 there: equal as a value)."""
    fp4 = [0, 0.0625, 8.0, 12.0, 4.0, 6.0, 2.0, 3.0, -0, -0.0625, -8.0, -12.0, -4.0, -6.0,
           -2.0, -3.0]
    for q in range(16):
        if FP4_LUT[q] != f32(fp4[q] / 12.0):
            sys.exit("fp4 code %d: kernel %r, get_4bit_type %r" % (q, FP4_LUT[q], fp4[q] / 12.0))
    # each tree threshold lies between the codes it separates
    for q in range(15):
        lo, hi = NF4_LUT[q], NF4_LUT[q + 1]
        if nf4_tree(lo) != q or nf4_tree(hi) != q + 1:
            sys.exit("nf4 tree misplaces code %d or %d" % (q, q + 1))
    for q in range(16):
        if fp4_tree(FP4_LUT[q]) != q and q != 8:  # -0.0 is not < 0: code 0
            sys.exit("fp4 tree misplaces code %d" % q)


# ---- quantisation


def pack(codes):
    if len(codes) % 2:
        codes = codes + [0]
    return bytes((codes[i] << 4) | codes[i + 1] for i in range(0, len(codes), 2))


def unpack(data, n):
    out = []
    for byte in data:
        out += [byte >> 4, byte & 0xF]
    return out[:n]


class Tally:
    """What the script's notes report."""

    def __init__(self):
        self.zero_block_codes = 0  # codes the zero-block rule changes
        self.reciprocal_codes = 0  # codes x / absmax would have changed


def quantize_4bit(x, kind, tally):
    """(codes, absmax) of kQuantizeBlockwise for blocksize 64."""
    tree = TREES[kind]
    codes, absmax = [], []
    for at in range(0, len(x), BLOCK):
        block = x[at:at + BLOCK]
        amax = max(abs(v) for v in block)
        absmax.append(amax)
        if amax == 0.0:
            # the kernel: inv = 1.0f / 0 = inf, v * inv = NaN, and NaN goes
            # down every branch; zerotrain's rule: the code of 0
            kernel = [tree(v * math.inf) for v in block]
            ours = [tree(0.0) for _ in block]
            tally.zero_block_codes += sum(a != b for a, b in zip(kernel, ours))
            codes += ours
            continue
        inv = f32(1.0 / amax)
        for v in block:
            q = tree(f32(v * inv))
            tally.reciprocal_codes += q != tree(f32(v / amax))
            codes.append(q)
    return codes, absmax


def double_quantize(absmax, dmap):
    """(offset, absmax2, qabsmax) of quantize_4bit(compress_statistics=True)."""
    total = 0.0
    for a in absmax:
        total += a  # float64, in block order
    offset = f32(total / len(absmax))
    centred = [f32(a - offset) for a in absmax]
    absmax2, qabsmax = [], []
    for at in range(0, len(centred), GROUP):
        group = centred[at:at + GROUP]
        amax = max(abs(d) for d in group)
        absmax2.append(amax)
        # amax 0: every d is 0 and the kernel's d * (1/0) is NaN, which goes
        # down every branch to code 0
        inv = f32(1.0 / amax) if amax > 0.0 else math.nan
        qabsmax += [quantize_2d(dmap, f32(d * inv), True) for d in group]
    return offset, absmax2, qabsmax


def dequantize_4bit(codes, absmax, kind):
    lut = LUTS[kind]
    return [f32(lut[q] * absmax[i // BLOCK]) for i, q in enumerate(codes)]


def nested_absmax(offset, absmax2, qabsmax, dmap):
    """dequantize_blockwise(qabsmax, state2), then += offset: two float32
    roundings."""
    return [f32(f32(dmap[q] * absmax2[b // GROUP]) + offset) for b, q in enumerate(qabsmax)]


# ---- the tensors


def gauss(rng, n, sigma):
    return [f32(rng.gauss(0.0, sigma)) for _ in range(n)]


def led_blocks(lead, probes):
    """Whole blocks of `probes`, each led by `lead` (its absmax, larger in
    magnitude than every probe) and padded with zeros."""
    x = []
    for at in range(0, len(probes), BLOCK - 1):
        chunk = [lead] + probes[at:at + BLOCK - 1]
        x += chunk + [0.0] * (BLOCK - len(chunk))
    return x


def threshold_probes():
    """Blocks whose absmax is a power of two (so x * inv is exact) holding
    every NF4 and FP4 threshold times the absmax and the floats next to it
    on both sides; the absmax element leads each block, positive or
    negative."""
    thresholds = sorted(set(NF4_TREE.values()) | set(FP4_TREE) | {-t for t in FP4_TREE})
    x = []
    for k, scale in enumerate((1.0, 4.0, 2.0 ** -3, 2.0 ** 20)):
        probes = []
        for t in thresholds:
            v = f32(t * scale)
            probes += [v, math.nextafter(v, -math.inf), math.nextafter(v, math.inf)]
        x += led_blocks(scale if k % 2 == 0 else -scale, [f32(p) for p in probes])
    return x


def reciprocal_probes():
    """Values near a threshold times a non-power-of-two absmax for which
    x * (1/absmax) and x / absmax fall on different sides of it: the values
    that tell a reciprocal multiply from a division."""
    x = []
    for scale in (f32(3.0), f32(0.7), f32(5.3), f32(1e-3), f32(123.456)):
        inv = f32(1.0 / scale)
        probes = []
        for t in sorted(set(NF4_TREE.values()) | set(FP4_TREE)):
            v = f32(t * scale)
            for _ in range(6):
                v = math.nextafter(v, -math.inf)
            for _ in range(13):
                if (f32(v * inv) > t) != (f32(v / scale) > t):
                    probes.append(v)
                v = math.nextafter(v, math.inf)
        x += led_blocks(scale, probes)
    return x


def scales_tensor(rng):
    """Blocks of very different magnitudes, an all-zero block, a block with
    one non-zero value, a block whose absmax element is negative; 517
    elements (a short, odd last block)."""
    x = []
    for e in (0, 30, -30, 5, -5):
        x += [f32(v * 10.0 ** e) for v in gauss(rng, BLOCK, 1.0)]
    x += [0.0] * BLOCK
    x += [0.0] * 20 + [f32(-2.5e-3)] + [0.0] * (BLOCK - 21)
    neg = gauss(rng, BLOCK, 0.5)
    neg[7] = -4.0
    x += [max(min(v, 3.0), -3.0) for v in neg]
    x += gauss(rng, 5, 1.0)
    return x


def const_blocks_tensor(rng):
    """Three blocks whose absmax is exactly 2: every scale equals the
    offset, so the group's absmax2 is 0."""
    x = []
    for b in range(3):
        block = [max(min(v, 1.9), -1.9) for v in gauss(rng, BLOCK, 1.0)]
        block[b * 5] = 2.0 if b % 2 else -2.0
        x += block
    return x


def groups_tensor(rng):
    """301 blocks (19237 elements: two groups of scales, the second one of
    45; a short, odd last block) with scales spread over [0.01, 2], an
    all-zero block and a block of large values."""
    n = 300 * BLOCK + 37
    x = []
    for at in range(0, n, BLOCK):
        sigma = 10.0 ** rng.uniform(-2.0, 0.3)
        x += gauss(rng, min(BLOCK, n - at), sigma)
    x[17 * BLOCK:18 * BLOCK] = [0.0] * BLOCK
    x[200 * BLOCK:201 * BLOCK] = [f32(v * 40.0) for v in x[200 * BLOCK:201 * BLOCK]]
    return x


def tensors():
    rng = random.Random(20240601)
    return [
        ("gauss_256", gauss(rng, 256, 1.0)),
        ("partial_100", gauss(rng, 100, 0.02)),
        ("odd_77", gauss(rng, 77, 3.0)),
        ("one", [f32(-0.7)]),
        ("thresholds", threshold_probes()),
        ("reciprocal", reciprocal_probes()),
        ("scales", scales_tensor(rng)),
        ("zeros_130", [0.0] * 130),
        ("const_blocks", const_blocks_tensor(rng)),
        ("groups_19237", groups_tensor(rng)),
    ]


# ---- output


def result_bytes(index, x, kind, double_quant, dmap, tally):
    codes, absmax = quantize_4bit(x, kind, tally)
    out = struct.pack("<3i", index, kind, double_quant) + pack(codes)
    if double_quant:
        offset, absmax2, qabsmax = double_quantize(absmax, dmap)
        out += struct.pack("<f", offset) + struct.pack("<%df" % len(absmax2), *absmax2)
        out += bytes(qabsmax)
        absmax = nested_absmax(offset, absmax2, qabsmax, dmap)
    else:
        out += struct.pack("<%df" % len(absmax), *absmax)
    deq = dequantize_4bit(unpack(pack(codes), len(x)), absmax, kind)
    return out + struct.pack("<%df" % len(deq), *deq)


def write_output(path):
    dmap = dynamic_map(signed=True)
    tally = Tally()
    data = [MAGIC, struct.pack("<16f", *NF4_LUT), struct.pack("<16f", *FP4_LUT)]
    ts = tensors()
    data.append(struct.pack("<i", len(ts)))
    for name, x in ts:
        data += [name.encode("ascii").ljust(NAME_BYTES, b"\0"), struct.pack("<i", len(x)),
                 struct.pack("<%df" % len(x), *x)]
    results = []
    for index, (_, x) in enumerate(ts):
        for kind in (NF4, FP4):
            for double_quant in (0, 1):
                results.append(result_bytes(index, x, kind, double_quant, dmap, tally))
    data.append(struct.pack("<i", len(results)))
    data += results
    blob = b"".join(data)
    with open(path, "wb") as f:
        f.write(blob)
    for name, x in ts:
        print("%-14s n %6d  blocks %4d" % (name, len(x), (len(x) + BLOCK - 1) // BLOCK))
    print("codes the zero-block rule changes (the kernel's NaN codes): %d"
          % tally.zero_block_codes)
    print("codes a division instead of the reciprocal multiply would change: %d"
          % tally.reciprocal_codes)
    print("wrote %s: %d tensors, %d results, %d bytes" % (path, len(ts), len(results), len(blob)))


def print_codes():
    for name, lut in zip(TYPE_NAMES, LUTS):
        print("/* %s code book, by code */" % name)
        print("    " + " ".join("%s," % c_hex(v) for v in lut))
    print("/* nf4 thresholds (dQuantizeNF4), ascending */")
    print("    " + " ".join("%s," % c_hex(v) for v in sorted(NF4_TREE.values())))
    print("/* fp4 magnitude thresholds (dQuantizeFP4), ascending */")
    print("    " + " ".join("%s," % c_hex(v) for v in sorted(FP4_TREE)))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", help="output .bin path")
    ap.add_argument("--print-codes", action="store_true",
                    help="print the code books and thresholds as C hex floats and exit")
    args = ap.parse_args()
    check_code_books()
    if args.print_codes:
        print_codes()
        return 0
    if not args.out:
        ap.error("--out is required")
    write_output(args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
