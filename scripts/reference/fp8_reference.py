#!/usr/bin/env python3
"""fp8_reference.py — the E4M3 and E5M2 formats from their definitions.

Writes tests/data/fp8_tables.txt, which tests/test_fp8.c checks the codec
(common/fp8.c) against. Regenerate with

    /usr/bin/python3 scripts/reference/fp8_reference.py > tests/data/fp8_tables.txt

Nothing here is shared with the C code: every value is an exact Fraction
built from the bit fields as the OCP 8-bit floating point specification
defines them, and encoding is a search over the sorted finite values with
exact comparisons (no float arithmetic, no bit tricks):

  E4M3 ("E4M3FN"): bias 7, 3 mantissa bits, no infinities, NaN only at
      S.1111.111; subnormals (exponent field 0) are m/8 * 2^(1-7).
  E5M2: bias 15, 2 mantissa bits, infinities S.11111.00, NaNs
      S.11111.{01,10,11}; subnormals m/4 * 2^(1-15).

Encoding, zerotrain's rules (common/fp8.h): round to nearest, ties to the
value whose code is even; a value beyond the largest finite one (after
rounding, and infinity) saturates to ±max finite; NaN gives E4M3 0x7f and
E5M2 0x7e with the input's sign; zero and values rounding to zero keep their
sign.

The file's lines:
  decode FORMAT CODE VALUE    VALUE a Python float.hex(), or nan / inf / -inf
  encode FORMAT BITS CODE     BITS the float32 input's bit pattern (hex)
The encode inputs: every finite value of the format, both signs; every
midpoint between neighbours (positive and negative) and the float32 values
just above and below each; values beyond the largest finite; half the
smallest subnormal and its float32 neighbours; tiny values and float32
subnormals; ±0, ±inf and NaNs.
"""
from fractions import Fraction
import math
import struct
import sys

FORMATS = {
    # name: (exponent bits, mantissa bits, bias, IEEE-like infinities)
    "e4m3": (4, 3, 7, False),
    "e5m2": (5, 2, 15, True),
}


def decode(fmt, code):
    """The exact value of code: a Fraction, or 'nan', 'inf', '-inf'."""
    e_bits, m_bits, bias, ieee = FORMATS[fmt]
    sign = -1 if code & 0x80 else 1
    exp = (code >> m_bits) & ((1 << e_bits) - 1)
    man = code & ((1 << m_bits) - 1)
    all_ones = (1 << e_bits) - 1
    if ieee and exp == all_ones:
        return "nan" if man else ("inf" if sign > 0 else "-inf")
    if not ieee and exp == all_ones and man == (1 << m_bits) - 1:
        return "nan"
    if exp == 0:
        mag = Fraction(man, 1 << m_bits) * Fraction(2) ** (1 - bias)
    else:
        mag = (1 + Fraction(man, 1 << m_bits)) * Fraction(2) ** (exp - bias)
    return sign * mag


def finite_positive(fmt):
    """(value, code) of every finite value >= 0, ascending."""
    out = [(decode(fmt, c), c) for c in range(0x80)]
    return sorted((v, c) for v, c in out if not isinstance(v, str))


def f32_bits(x):
    return struct.unpack("<I", struct.pack("<f", x))[0]


def f32_from_bits(u):
    return struct.unpack("<f", struct.pack("<I", u))[0]


def f32_exact(fr):
    """The float32 holding Fraction fr, which must be representable."""
    x = f32_from_bits(f32_bits(float(fr)))
    assert Fraction(x) == fr, fr
    return x


def next_up(x):
    """The next float32 above x (x finite)."""
    u = f32_bits(x)
    if u == 0x80000000:
        return f32_from_bits(1)
    return f32_from_bits(u + 1 if u < 0x80000000 else u - 1)


def next_down(x):
    return -next_up(-x)


def encode(fmt, x):
    """The code of float x by the rules above, from the sorted values."""
    _, _, _, ieee = FORMATS[fmt]
    nan_code = 0x7E if ieee else 0x7F
    sign = 0x80 if math.copysign(1.0, x) < 0 else 0
    if math.isnan(x):
        return sign | nan_code
    table = finite_positive(fmt)
    top_value, top_code = table[-1]
    if math.isinf(x):
        return sign | top_code
    a = abs(Fraction(x))
    if a >= top_value:
        return sign | top_code
    for (lo, lo_code), (hi, hi_code) in zip(table, table[1:]):
        if lo <= a < hi:
            if a - lo < hi - a:
                return sign | lo_code
            if a - lo > hi - a:
                return sign | hi_code
            return sign | (lo_code if lo_code % 2 == 0 else hi_code)
    raise AssertionError("unreachable")


def encode_inputs(fmt):
    table = finite_positive(fmt)
    values = [v for v, _ in table]
    inputs = []
    for v in values:
        inputs += [f32_exact(v), -f32_exact(v)]
    for lo, hi in zip(values, values[1:]):
        mid = f32_exact((lo + hi) / 2)
        for y in (mid, next_up(mid), next_down(mid)):
            inputs += [y, -y]
    top = f32_exact(values[-1])
    half_min = f32_exact(values[1] / 2)
    step = f32_exact(values[-1] - values[-2])
    for y in (next_up(top), top + step / 2, top + step, top * 2, 3.0e38,
              half_min, next_up(half_min), next_down(half_min),
              f32_exact(values[1] / 4), 1e-30, f32_from_bits(1), f32_from_bits(0x7FFFFF),
              0.0):
        inputs += [y, -y]
    inputs += [math.inf, -math.inf]
    nan_bits = [0x7FC00000, 0xFFC00000, 0x7F800001, 0xFFFFFFFF]
    out = [(f32_bits(y), encode(fmt, y)) for y in inputs]
    out += [(b, encode(fmt, f32_from_bits(b))) for b in nan_bits]
    return out


def value_text(v, code):
    """float.hex() of v; the negative zero (0x80) keeps its sign."""
    if isinstance(v, str):
        return v
    return ("-" if v == 0 and code & 0x80 else "") + float(v).hex()


def main():
    w = sys.stdout.write
    w("# written by scripts/reference/fp8_reference.py; do not edit\n")
    for fmt in FORMATS:
        for code in range(256):
            w("decode %s 0x%02x %s\n" % (fmt, code, value_text(decode(fmt, code), code)))
    for fmt in FORMATS:
        for bits, code in encode_inputs(fmt):
            w("encode %s 0x%08x 0x%02x\n" % (fmt, bits, code))


if __name__ == "__main__":
    main()
