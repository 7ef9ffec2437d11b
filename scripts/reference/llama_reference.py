#!/usr/bin/env python3
"""llama_reference.py — float64 reference numbers for zerotrain's Llama decoder.

Writes a small binary file that the C tests read to check the CPU Llama
model's forward loss, every parameter gradient, and a short AdamW trajectory.
Python standard library only. The forward follows Hugging Face's
LlamaForCausalLM formulas and is evaluated in float64; the gradients come
from a small reverse-mode automatic differentiation over lists of floats
(each primitive below knows only its own local derivative, the model is a
composition of them), not from a hand-derived backward. Before writing, the
script checks (and stops with status 1 if either fails):
  - the loss against a second, loop-by-loop transcription of the forward in
    the shape of Hugging Face's code (view, transpose, repeat_kv), which
    shares no code with the first: relative difference at most 1e-12;
  - five gradient entries of every tensor (random among those with a
    non-zero gradient, plus one with an exactly zero gradient where there
    is one) against five-point central differences (step 1e-3, truncation
    error O(h^4)) of the float64 loss: relative difference at most 1e-6.

Model (C = n_embd, hs = C / n_head, I = intermediate_size, N = B*T rows):
  x = embed_tokens[inputs]                       (no position embedding)
  per layer:
    a = rms(x, input_layernorm)
    q = rope(a q_proj^T), k = rope(a k_proj^T), v = a v_proj^T
    h = x + o_proj(attn(q, k, v))
    m = rms(h, post_attention_layernorm)
    x = h + (silu(m gate_proj^T) * (m up_proj^T)) down_proj^T
  logits = rms(x, norm) lm_head^T                (lm_head = embed_tokens if tied)
  loss = mean over the N rows of logsumexp(logits) - logits[target]
with
  rms(x, w)    = w * x / sqrt(mean(x^2) + rms_norm_eps)   (over the last dim)
  silu(z)      = z / (1 + exp(-z))
  rope         : per head, inv_freq[i] = 1 / rope_theta^(2i/hs) for i < hs/2;
                 at position t (0 .. T-1 within each sequence) the angle is
                 t * inv_freq[i]; cos and sin are of [angle, angle] (length hs);
                 rope(x) = x * cos + rotate_half(x) * sin,
                 rotate_half(x) = cat(-x[hs/2:], x[:hs/2])
  attn         : q has n_head heads, k and v n_kv_head heads (head h = columns
                 h*hs .. h*hs+hs-1); query head h uses kv head
                 h // (n_head / n_kv_head) (Hugging Face's repeat_kv);
                 y_h = softmax(q_h k^T / sqrt(hs), causal) v per sequence;
                 heads concatenated along the last dim before o_proj.
No biases, except with --qwen2 (Qwen2's attention): q, k and v each get
their bias added after the projection, before the rotary embedding.
Matrices are nn.Linear layout [out, in], row-major.

Flat parameter order:
  embed_tokens.weight [V, C],
  per layer l: input_layernorm.weight [C], self_attn.q_proj.weight [n_head*hs, C],
               self_attn.k_proj.weight [n_kv_head*hs, C],
               self_attn.v_proj.weight [n_kv_head*hs, C],
               self_attn.o_proj.weight [C, n_head*hs],
               post_attention_layernorm.weight [C], mlp.gate_proj.weight [I, C],
               mlp.up_proj.weight [I, C], mlp.down_proj.weight [C, I],
               with --qwen2 then self_attn.q_proj.bias [n_head*hs],
               self_attn.k_proj.bias [n_kv_head*hs], self_attn.v_proj.bias [n_kv_head*hs],
  norm.weight [C],
  lm_head.weight [V, C]                          (only when not tied).

Configurations (B=2, T=12, maxT=16, V=64, n_layer=2, n_head=4, n_embd=16):
  default: n_kv_head 2, intermediate_size 24, rope_theta 10000,
           rms_norm_eps 1e-5, untied, seed 0;
  --tied:  n_kv_head 1, intermediate_size 40, rope_theta 500000,
           rms_norm_eps 1e-6, tie_word_embeddings, seed 1;
  --qwen2: n_kv_head 2, intermediate_size 24, rope_theta 1000000,
           rms_norm_eps 1e-6, tie_word_embeddings, q/k/v biases, seed 2.
Values from random.Random(seed), in this order: every parameter in flat
order, row-major (matrices, embeddings and biases gauss(0, 0.2), norm weights
1 + gauss(0, 0.1)), each rounded to float32 before it is used; then
inputs [B*T] and targets [B*T], each randrange(V). The float32 values in the
file are therefore exactly the values the float64 reference used.
rope_theta and rms_norm_eps are used as the decimal values above (the file
stores them rounded to float32).

AdamW trajectory: torch.optim.AdamW semantics in float64: per step t (from 1)
p -= lr * wd * p (decoupled decay, 2-D tensors only; norm weights get none);
m = b1 m + (1-b1) g; v = b2 v + (1-b2) g^2;
p -= (lr / (1 - b1^t)) * m / (sqrt(v) / sqrt(1 - b2^t) + eps);
lr 1e-2, betas (0.9, 0.999), eps 1e-8, weight_decay 0.1, no clipping, 5 steps
on the same batch; losses[i] is the loss before update i (losses[0] == loss).

Binary file (little-endian, no padding):
  char[8]  "ZTLLAM01" ("ZTLLAM02" with --qwen2)
  int32    V, maxT, n_layer, n_head, n_kv_head, n_embd, intermediate_size,
           tie_word_embeddings, B, T
  int32    attention_bias            (only in ZTLLAM02 files)
  float32  rope_theta, rms_norm_eps
  int32    n_params                  (flat total)
  int32    inputs[B*T]               (row-major [B,T])
  int32    targets[B*T]
  float32  params[n_params]          (flat order above)
  float32  loss
  float32  grads[n_params]           (d loss / d params, same order)
  int32    n_steps
  float32  lr, beta1, beta2, eps, weight_decay
  float32  losses[n_steps]

Usage:
  python3 scripts/reference/llama_reference.py --out tests/data/llama_reference.bin
  python3 scripts/reference/llama_reference.py --tied --out tests/data/llama_reference_tied.bin
  python3 scripts/reference/llama_reference.py --qwen2 --out tests/data/llama_reference_qwen2.bin
"""

import argparse
import math
import operator
import random
import struct
import sys
import time

MAGIC = b"ZTLLAM01"
MAGIC_BIAS = b"ZTLLAM02"  # then int32 attention_bias after the ten header integers
BASE = dict(V=64, maxT=16, n_layer=2, n_head=4, n_embd=16, B=2, T=12)
UNTIED = dict(BASE, n_kv_head=2, intermediate_size=24, rope_theta=10000.0,
              rms_norm_eps=1e-5, tie_word_embeddings=0, seed=0)
TIED = dict(BASE, n_kv_head=1, intermediate_size=40, rope_theta=500000.0,
            rms_norm_eps=1e-6, tie_word_embeddings=1, seed=1)
QWEN2 = dict(BASE, n_kv_head=2, intermediate_size=24, rope_theta=1000000.0,
             rms_norm_eps=1e-6, tie_word_embeddings=1, attention_bias=1, seed=2)
ADAMW = dict(lr=1e-2, beta1=0.9, beta2=0.999, eps=1e-8, weight_decay=0.1)
N_STEPS = 5
GRADCHECK_PER_TENSOR = 5
GRADCHECK_TOL = 1e-6


# ---------------------------------------------------------------------------
# Reverse-mode automatic differentiation over flat lists of floats.
#
# A Var holds a flat row-major value list and a shape. Every operation appends
# its result to the tape together with a closure that, given the result's
# gradient, adds its local contribution to its inputs' gradients. backward()
# walks the tape in reverse. Nothing below knows about the model.
# ---------------------------------------------------------------------------

_mul = operator.mul


class Var:
    __slots__ = ("val", "shape", "grad", "back")

    def __init__(self, val, shape, back=None):
        self.val = val
        self.shape = shape
        self.grad = None
        self.back = back


class Tape:
    def __init__(self):
        self.nodes = []

    def leaf(self, val, shape):
        return Var(list(val), tuple(shape))

    def op(self, val, shape, back):
        v = Var(val, tuple(shape), back)
        self.nodes.append(v)
        return v

    def backward(self, out):
        out.grad = [1.0] * len(out.val)
        for node in reversed(self.nodes):
            if node.grad is not None and node.back is not None:
                node.back(node.grad)


def _acc(var, g):
    """var.grad += g (elementwise), creating the buffer on first use."""
    if var.grad is None:
        var.grad = list(g)
    else:
        var.grad = [a + b for a, b in zip(var.grad, g)]


def _rows(vals, ncols):
    return [vals[i:i + ncols] for i in range(0, len(vals), ncols)]


def _transpose(vals, nrows, ncols):
    return [vals[c::ncols] for c in range(ncols)]


def linear(tp, x, w):
    """y[n, m] = sum_k x[n, k] w[m, k]  (x [N, K], w [M, K] -> y [N, M])."""
    N, K = x.shape
    M, K2 = w.shape
    assert K == K2
    xr, wr = _rows(x.val, K), _rows(w.val, K)
    y = [sum(map(_mul, a, b)) for a in xr for b in wr]

    def back(g):
        gr = _rows(g, M)                 # [N][M]
        gt = _transpose(g, N, M)         # [M][N]
        wt = _transpose(w.val, M, K)     # [K][M]
        xt = _transpose(x.val, N, K)     # [K][N]
        _acc(x, [sum(map(_mul, gn, wk)) for gn in gr for wk in wt])
        _acc(w, [sum(map(_mul, gm, xk)) for gm in gt for xk in xt])
    return tp.op(y, (N, M), back)


def add(tp, a, b):
    assert a.shape == b.shape

    def back(g):
        _acc(a, g)
        _acc(b, g)
    return tp.op([p + q for p, q in zip(a.val, b.val)], a.shape, back)


def mul(tp, a, b):
    assert a.shape == b.shape

    def back(g):
        _acc(a, [gi * q for gi, q in zip(g, b.val)])
        _acc(b, [gi * p for gi, p in zip(g, a.val)])
    return tp.op([p * q for p, q in zip(a.val, b.val)], a.shape, back)


def mul_const(tp, a, c):
    """a * c elementwise, c a list of constants of a's size."""
    assert len(c) == len(a.val)

    def back(g):
        _acc(a, [gi * ci for gi, ci in zip(g, c)])
    return tp.op([p * ci for p, ci in zip(a.val, c)], a.shape, back)


def add_const(tp, a, c):
    """a + c elementwise, c a list of constants of a's size."""
    assert len(c) == len(a.val)

    def back(g):
        _acc(a, g)
    return tp.op([p + ci for p, ci in zip(a.val, c)], a.shape, back)


def scale(tp, a, s):
    def back(g):
        _acc(a, [gi * s for gi in g])
    return tp.op([p * s for p in a.val], a.shape, back)


def add_scalar(tp, a, s):
    def back(g):
        _acc(a, g)
    return tp.op([p + s for p in a.val], a.shape, back)


def exp(tp, a):
    y = [math.exp(p) for p in a.val]

    def back(g):
        _acc(a, [gi * yi for gi, yi in zip(g, y)])
    return tp.op(y, a.shape, back)


def log(tp, a):
    def back(g):
        _acc(a, [gi / p for gi, p in zip(g, a.val)])
    return tp.op([math.log(p) for p in a.val], a.shape, back)


def power(tp, a, e):
    """a ** e elementwise (a > 0)."""
    def back(g):
        _acc(a, [gi * e * p ** (e - 1.0) for gi, p in zip(g, a.val)])
    return tp.op([p ** e for p in a.val], a.shape, back)


def row_sum(tp, a):
    """[N, M] -> [N, 1], the sum of each row."""
    N, M = a.shape
    rows = _rows(a.val, M)

    def back(g):
        _acc(a, [gi for gi in g for _ in range(M)])
    return tp.op([sum(r) for r in rows], (N, 1), back)


def total(tp, a):
    """Sum of every element -> shape (1,)."""
    def back(g):
        _acc(a, [g[0]] * len(a.val))
    return tp.op([sum(a.val)], (1,), back)


def mul_rows(tp, a, r):
    """y[n, m] = a[n, m] * r[n]  (a [N, M], r [N, 1])."""
    N, M = a.shape
    assert len(r.val) == N
    y = [p * r.val[i // M] for i, p in enumerate(a.val)]

    def back(g):
        _acc(a, [gi * r.val[i // M] for i, gi in enumerate(g)])
        _acc(r, [sum(map(_mul, g[n * M:(n + 1) * M], a.val[n * M:(n + 1) * M]))
                 for n in range(N)])
    return tp.op(y, a.shape, back)


def add_cols(tp, a, c):
    """y[n, m] = a[n, m] + c[m]  (a [N, M], c [M])."""
    N, M = a.shape
    assert len(c.val) == M
    y = [p + c.val[i % M] for i, p in enumerate(a.val)]

    def back(g):
        _acc(a, list(g))
        _acc(c, [sum(g[m::M]) for m in range(M)])
    return tp.op(y, a.shape, back)


def mul_cols(tp, a, c):
    """y[n, m] = a[n, m] * c[m]  (a [N, M], c [M])."""
    N, M = a.shape
    assert len(c.val) == M
    y = [p * c.val[i % M] for i, p in enumerate(a.val)]

    def back(g):
        _acc(a, [gi * c.val[i % M] for i, gi in enumerate(g)])
        _acc(c, [sum(map(_mul, g[m::M], a.val[m::M])) for m in range(M)])
    return tp.op(y, a.shape, back)


def gather(tp, a, idx, shape, sign=None):
    """y[j] = sign[j] * a[idx[j]]: slicing, transposes, reshapes, repeats."""
    if sign is None:
        y = [a.val[i] for i in idx]
    else:
        y = [s * a.val[i] for i, s in zip(idx, sign)]

    def back(g):
        ga = [0.0] * len(a.val)
        if sign is None:
            for i, gi in zip(idx, g):
                ga[i] += gi
        else:
            for i, s, gi in zip(idx, sign, g):
                ga[i] += s * gi
        _acc(a, ga)
    return tp.op(y, shape, back)


def concat(tp, parts, shape):
    """Flat concatenation of parts, viewed as shape."""
    y = [p for part in parts for p in part.val]

    def back(g):
        off = 0
        for part in parts:
            n = len(part.val)
            _acc(part, g[off:off + n])
            off += n
    return tp.op(y, shape, back)


# ---------------------------------------------------------------------------
# The model, written with the primitives above.
# ---------------------------------------------------------------------------

def param_specs(cfg):
    """(name, shape, kind) in the flat order; kind picks the init and decay."""
    V, C, I = cfg["V"], cfg["n_embd"], cfg["intermediate_size"]
    hs = C // cfg["n_head"]
    nq, nkv = cfg["n_head"] * hs, cfg["n_kv_head"] * hs
    specs = [("embed_tokens.weight", (V, C), "matrix")]
    for l in range(cfg["n_layer"]):
        p = "layers.%d." % l
        specs += [
            (p + "input_layernorm.weight", (C,), "norm"),
            (p + "self_attn.q_proj.weight", (nq, C), "matrix"),
            (p + "self_attn.k_proj.weight", (nkv, C), "matrix"),
            (p + "self_attn.v_proj.weight", (nkv, C), "matrix"),
            (p + "self_attn.o_proj.weight", (C, nq), "matrix"),
            (p + "post_attention_layernorm.weight", (C,), "norm"),
            (p + "mlp.gate_proj.weight", (I, C), "matrix"),
            (p + "mlp.up_proj.weight", (I, C), "matrix"),
            (p + "mlp.down_proj.weight", (C, I), "matrix"),
        ]
        if cfg.get("attention_bias"):
            specs += [
                (p + "self_attn.q_proj.bias", (nq,), "bias"),
                (p + "self_attn.k_proj.bias", (nkv,), "bias"),
                (p + "self_attn.v_proj.bias", (nkv,), "bias"),
            ]
    specs.append(("norm.weight", (C,), "norm"))
    if not cfg["tie_word_embeddings"]:
        specs.append(("lm_head.weight", (V, C), "matrix"))
    return specs


def numel(shape):
    n = 1
    for d in shape:
        n *= d
    return n


def f32(x):
    """x rounded to the nearest float32, as a Python float (exact)."""
    return struct.unpack("<f", struct.pack("<f", x))[0]


def draw(cfg):
    """Parameters (dict name -> list of floats), inputs and targets."""
    rng = random.Random(cfg["seed"])
    params = {}
    for name, shape, kind in param_specs(cfg):
        n = numel(shape)
        if kind in ("matrix", "bias"):
            params[name] = [f32(rng.gauss(0.0, 0.2)) for _ in range(n)]
        else:
            params[name] = [f32(1.0 + rng.gauss(0.0, 0.1)) for _ in range(n)]
    BT = cfg["B"] * cfg["T"]
    inputs = [rng.randrange(cfg["V"]) for _ in range(BT)]
    targets = [rng.randrange(cfg["V"]) for _ in range(BT)]
    return params, inputs, targets


class Constants:
    """Index maps and constant tables that depend only on the configuration."""

    def __init__(self, cfg):
        B, T, C = cfg["B"], cfg["T"], cfg["n_embd"]
        nh, nkv = cfg["n_head"], cfg["n_kv_head"]
        hs = C // nh
        half = hs // 2
        N = B * T
        self.hs = hs
        inv_freq = [1.0 / cfg["rope_theta"] ** (2.0 * i / hs) for i in range(half)]

        def rope_tables(nheads):
            width = nheads * hs
            cos, sin, idx, sign = [], [], [], []
            for n in range(N):
                t = n % T
                for c in range(width):
                    h, d = divmod(c, hs)
                    ang = t * inv_freq[d % half]
                    cos.append(math.cos(ang))
                    sin.append(math.sin(ang))
                    if d < half:        # rotate_half: first half is -x[d + hs/2]
                        idx.append(n * width + h * hs + d + half)
                        sign.append(-1.0)
                    else:               # second half is x[d - hs/2]
                        idx.append(n * width + h * hs + d - half)
                        sign.append(1.0)
            return cos, sin, idx, sign

        self.rope_q = rope_tables(nh)
        self.rope_k = rope_tables(nkv)

        def head_rows(width, b, h):
            """Indices of the [T, hs] block of head h, sequence b, in [N, width]."""
            return [(b * T + t) * width + h * hs + d for t in range(T) for d in range(hs)]

        def head_rows_t(width, b, h):
            """The same block transposed to [hs, T]."""
            return [(b * T + t) * width + h * hs + d for d in range(hs) for t in range(T)]

        group = nh // nkv
        self.q_blocks = {(b, h): head_rows(nh * hs, b, h) for b in range(B) for h in range(nh)}
        self.k_blocks = {(b, h): head_rows(nkv * hs, b, h // group)
                         for b in range(B) for h in range(nh)}
        self.vt_blocks = {(b, h): head_rows_t(nkv * hs, b, h // group)
                          for b in range(B) for h in range(nh)}
        self.mask = [1.0 if j <= i else 0.0 for i in range(T) for j in range(T)]
        # The per-(b, h) outputs are concatenated in (b, h) order, each [T, hs];
        # this gathers them into [N, nh*hs] with head h in columns h*hs ...
        merge = []
        for b in range(B):
            for t in range(T):
                for h in range(nh):
                    base = (b * nh + h) * T * hs
                    merge.extend(base + t * hs + d for d in range(hs))
        self.merge = merge


def rmsnorm(tp, x, w, eps):
    N, C = x.shape
    ms = scale(tp, row_sum(tp, mul(tp, x, x)), 1.0 / C)
    r = power(tp, add_scalar(tp, ms, eps), -0.5)
    return mul_cols(tp, mul_rows(tp, x, r), w)


def rope(tp, x, tables):
    cos, sin, idx, sign = tables
    rot = gather(tp, x, idx, x.shape, sign)
    return add(tp, mul_const(tp, x, cos), mul_const(tp, rot, sin))


def silu(tp, z):
    sig = power(tp, add_scalar(tp, exp(tp, scale(tp, z, -1.0)), 1.0), -1.0)
    return mul(tp, z, sig)


def attention(tp, q, k, v, cfg, K):
    B, T = cfg["B"], cfg["T"]
    nh, hs = cfg["n_head"], K.hs
    inv_sqrt = 1.0 / math.sqrt(hs)
    outs = []
    for b in range(B):
        for h in range(nh):
            qb = gather(tp, q, K.q_blocks[(b, h)], (T, hs))
            kb = gather(tp, k, K.k_blocks[(b, h)], (T, hs))
            vt = gather(tp, v, K.vt_blocks[(b, h)], (hs, T))
            s = scale(tp, linear(tp, qb, kb), inv_sqrt)           # [T, T]
            # Softmax over j <= i. The subtracted row maxima are constants:
            # softmax does not depend on them, so the gradient is unchanged.
            shift = []
            for i in range(T):
                m = max(s.val[i * T:i * T + i + 1])
                shift.extend([-m] * T)
            e = mul_const(tp, exp(tp, add_const(tp, s, shift)), K.mask)
            p = mul_rows(tp, e, power(tp, row_sum(tp, e), -1.0))
            outs.append(linear(tp, p, vt))                        # [T, hs]
    cat = concat(tp, outs, (B * nh * T * hs,))
    return gather(tp, cat, K.merge, (B * T, nh * hs))


def forward(tp, P, cfg, K, inputs, targets):
    """Mean cross-entropy of the model; P maps names to Vars."""
    N, C, V = cfg["B"] * cfg["T"], cfg["n_embd"], cfg["V"]
    eps = cfg["rms_norm_eps"]
    x = gather(tp, P["embed_tokens.weight"],
               [tok * C + c for tok in inputs for c in range(C)], (N, C))
    for l in range(cfg["n_layer"]):
        p = "layers.%d." % l
        a = rmsnorm(tp, x, P[p + "input_layernorm.weight"], eps)
        def proj(name):
            y = linear(tp, a, P[p + "self_attn.%s_proj.weight" % name])
            if cfg.get("attention_bias"):
                y = add_cols(tp, y, P[p + "self_attn.%s_proj.bias" % name])
            return y
        q = rope(tp, proj("q"), K.rope_q)
        k = rope(tp, proj("k"), K.rope_k)
        v = proj("v")
        h = add(tp, x, linear(tp, attention(tp, q, k, v, cfg, K),
                              P[p + "self_attn.o_proj.weight"]))
        m = rmsnorm(tp, h, P[p + "post_attention_layernorm.weight"], eps)
        gate = silu(tp, linear(tp, m, P[p + "mlp.gate_proj.weight"]))
        up = linear(tp, m, P[p + "mlp.up_proj.weight"])
        x = add(tp, h, linear(tp, mul(tp, gate, up), P[p + "mlp.down_proj.weight"]))
    x = rmsnorm(tp, x, P["norm.weight"], eps)
    head = P["embed_tokens.weight"] if cfg["tie_word_embeddings"] else P["lm_head.weight"]
    logits = linear(tp, x, head)                                  # [N, V]
    shift = []
    for n in range(N):
        shift.extend([-max(logits.val[n * V:(n + 1) * V])] * V)
    z = add_const(tp, logits, shift)
    lse = log(tp, row_sum(tp, exp(tp, z)))                        # [N, 1]
    picked = gather(tp, z, [n * V + targets[n] for n in range(N)], (N, 1))
    nll = add(tp, lse, scale(tp, picked, -1.0))
    return scale(tp, total(tp, nll), 1.0 / N)


def loss_and_grads(params, cfg, K, inputs, targets, want_grads=True):
    tp = Tape()
    P = {name: tp.leaf(params[name], shape) for name, shape, _ in param_specs(cfg)}
    loss = forward(tp, P, cfg, K, inputs, targets)
    if not want_grads:
        return loss.val[0], None
    tp.backward(loss)
    grads = {}
    for name, shape, _ in param_specs(cfg):
        g = P[name].grad
        grads[name] = g if g is not None else [0.0] * numel(shape)
    return loss.val[0], grads


def plain_loss(params, cfg, inputs, targets):
    """The same loss transcribed a second time, loop by loop over tokens and
    heads in the shape of Hugging Face's modeling code (view, transpose,
    repeat_kv), sharing nothing with forward() but the parameter dict. Only
    used to check forward()."""
    B, T, C, V = cfg["B"], cfg["T"], cfg["n_embd"], cfg["V"]
    nh, nkv, I = cfg["n_head"], cfg["n_kv_head"], cfg["intermediate_size"]
    hs, eps = C // nh, cfg["rms_norm_eps"]
    n_rep = nh // nkv

    def mat(name, rows, cols):
        w = params[name]
        return [w[r * cols:(r + 1) * cols] for r in range(rows)]

    def lin(vec, w, bias=None):
        y = [sum(wi * xi for wi, xi in zip(row, vec)) for row in w]
        return y if bias is None else [e + b for e, b in zip(y, bias)]

    def bias_of(name):
        return params[name] if cfg.get("attention_bias") else None

    def rms(vec, w):
        var = sum(e * e for e in vec) / len(vec)
        return [wi * e / math.sqrt(var + eps) for wi, e in zip(w, vec)]

    def rotary(vec, t):
        inv = [1.0 / (cfg["rope_theta"] ** (j / hs)) for j in range(0, hs, 2)]
        emb = [t * f for f in inv] + [t * f for f in inv]
        rot = [-e for e in vec[hs // 2:]] + vec[:hs // 2]
        return [e * math.cos(a) + r * math.sin(a) for e, r, a in zip(vec, rot, emb)]

    emb = mat("embed_tokens.weight", V, C)
    head = emb if cfg["tie_word_embeddings"] else mat("lm_head.weight", V, C)
    total_nll = 0.0
    for b in range(B):
        xs = [list(emb[inputs[b * T + t]]) for t in range(T)]
        for l in range(cfg["n_layer"]):
            p = "layers.%d." % l
            wq = mat(p + "self_attn.q_proj.weight", nh * hs, C)
            wk = mat(p + "self_attn.k_proj.weight", nkv * hs, C)
            wv = mat(p + "self_attn.v_proj.weight", nkv * hs, C)
            wo = mat(p + "self_attn.o_proj.weight", C, nh * hs)
            a = [rms(x, params[p + "input_layernorm.weight"]) for x in xs]
            # [T, heads, hs] after view; rope per head at position t.
            bq, bk, bv = (bias_of(p + "self_attn.%s_proj.bias" % n) for n in "qkv")
            q = [[rotary(lin(a[t], wq, bq)[h * hs:(h + 1) * hs], t) for h in range(nh)]
                 for t in range(T)]
            k = [[rotary(lin(a[t], wk, bk)[h * hs:(h + 1) * hs], t) for h in range(nkv)]
                 for t in range(T)]
            v = [[lin(a[t], wv, bv)[h * hs:(h + 1) * hs] for h in range(nkv)] for t in range(T)]
            # repeat_kv: head h of the expanded k, v is kv head h // n_rep.
            k = [[k[t][h // n_rep] for h in range(nh)] for t in range(T)]
            v = [[v[t][h // n_rep] for h in range(nh)] for t in range(T)]
            attn = []
            for t in range(T):
                row = []
                for h in range(nh):
                    sc = [sum(qi * ki for qi, ki in zip(q[t][h], k[u][h])) / math.sqrt(hs)
                          for u in range(t + 1)]
                    mx = max(sc)
                    w = [math.exp(s - mx) for s in sc]
                    z = sum(w)
                    row += [sum(w[u] / z * v[u][h][d] for u in range(t + 1))
                            for d in range(hs)]
                attn.append(row)
            hid = [[x + o for x, o in zip(xs[t], lin(attn[t], wo))] for t in range(T)]
            wg = mat(p + "mlp.gate_proj.weight", I, C)
            wu = mat(p + "mlp.up_proj.weight", I, C)
            wd = mat(p + "mlp.down_proj.weight", C, I)
            xs = []
            for t in range(T):
                m = rms(hid[t], params[p + "post_attention_layernorm.weight"])
                act = [g / (1.0 + math.exp(-g)) * u for g, u in zip(lin(m, wg), lin(m, wu))]
                xs.append([e + d for e, d in zip(hid[t], lin(act, wd))])
        for t in range(T):
            logits = lin(rms(xs[t], params["norm.weight"]), head)
            mx = max(logits)
            lse = mx + math.log(sum(math.exp(z - mx) for z in logits))
            total_nll += lse - logits[targets[b * T + t]]
    return total_nll / (B * T)


# ---------------------------------------------------------------------------
# Self-check, optimizer, file.
# ---------------------------------------------------------------------------

def check_gradients(params, cfg, K, inputs, targets, grads):
    """Five-point central differences on GRADCHECK_PER_TENSOR entries of every
    tensor (drawn among the entries with a non-zero gradient) plus one entry
    with an exactly zero gradient where the tensor has any. Returns the worst
    relative error."""
    rng = random.Random(12345)
    h = 1e-3
    worst = 0.0
    for name, shape, _ in param_specs(cfg):
        g = grads[name]
        nonzero = [i for i, x in enumerate(g) if x != 0.0]
        zero = [i for i, x in enumerate(g) if x == 0.0]
        picks = rng.sample(nonzero, min(GRADCHECK_PER_TENSOR, len(nonzero)))
        if zero:
            picks.append(rng.choice(zero))
        t = params[name]
        for idx in picks:
            old = t[idx]
            f = []
            for step in (2.0, 1.0, -1.0, -2.0):
                t[idx] = old + step * h
                f.append(loss_and_grads(params, cfg, K, inputs, targets, False)[0])
            t[idx] = old
            fd = (8.0 * (f[1] - f[2]) - (f[0] - f[3])) / (12.0 * h)
            an = g[idx]
            denom = max(abs(fd), abs(an))
            rel = abs(fd - an) / denom if denom > 1e-12 else 0.0
            print("  gradcheck %-40s[%4d] autodiff % .12e  finite-diff % .12e  rel %.2e"
                  % (name, idx, an, fd, rel))
            worst = max(worst, rel)
    return worst


def adamw_trajectory(params, cfg, K, inputs, targets, n_steps):
    """n_steps AdamW updates in float64 on copies; returns the loss before each."""
    specs = param_specs(cfg)
    live = {n: list(params[n]) for n, _, _ in specs}
    m = {n: [0.0] * len(live[n]) for n, _, _ in specs}
    v = {n: [0.0] * len(live[n]) for n, _, _ in specs}
    lr, b1, b2 = ADAMW["lr"], ADAMW["beta1"], ADAMW["beta2"]
    eps, wd = ADAMW["eps"], ADAMW["weight_decay"]
    losses = []
    for step in range(1, n_steps + 1):
        loss, grads = loss_and_grads(live, cfg, K, inputs, targets)
        losses.append(loss)
        bc1 = 1.0 - b1 ** step
        bc2_sqrt = math.sqrt(1.0 - b2 ** step)
        step_size = lr / bc1
        for name, shape, _ in specs:
            p, g, mn, vn = live[name], grads[name], m[name], v[name]
            decay = wd if len(shape) == 2 else 0.0
            for i in range(len(p)):
                p[i] *= 1.0 - lr * decay
                mn[i] = b1 * mn[i] + (1.0 - b1) * g[i]
                vn[i] = b2 * vn[i] + (1.0 - b2) * g[i] * g[i]
                p[i] -= step_size * mn[i] / (math.sqrt(vn[i]) / bc2_sqrt + eps)
    return losses


def write_file(path, cfg, inputs, targets, params_flat, loss, grads_flat, losses):
    n = len(params_flat)
    with open(path, "wb") as f:
        f.write(MAGIC_BIAS if cfg.get("attention_bias") else MAGIC)
        f.write(struct.pack("<10i", cfg["V"], cfg["maxT"], cfg["n_layer"], cfg["n_head"],
                            cfg["n_kv_head"], cfg["n_embd"], cfg["intermediate_size"],
                            cfg["tie_word_embeddings"], cfg["B"], cfg["T"]))
        if cfg.get("attention_bias"):
            f.write(struct.pack("<i", 1))
        f.write(struct.pack("<2f", cfg["rope_theta"], cfg["rms_norm_eps"]))
        f.write(struct.pack("<i", n))
        f.write(struct.pack("<%di" % len(inputs), *inputs))
        f.write(struct.pack("<%di" % len(targets), *targets))
        f.write(struct.pack("<%df" % n, *params_flat))
        f.write(struct.pack("<f", loss))
        f.write(struct.pack("<%df" % n, *grads_flat))
        f.write(struct.pack("<i", len(losses)))
        f.write(struct.pack("<5f", ADAMW["lr"], ADAMW["beta1"], ADAMW["beta2"], ADAMW["eps"],
                            ADAMW["weight_decay"]))
        f.write(struct.pack("<%df" % len(losses), *losses))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", required=True, help="output .bin path")
    ap.add_argument("--tied", action="store_true",
                    help="the tied-embedding configuration (see the docstring)")
    ap.add_argument("--qwen2", action="store_true",
                    help="the Qwen2-shaped configuration, with q, k and v biases")
    args = ap.parse_args()

    t0 = time.time()
    cfg = QWEN2 if args.qwen2 else TIED if args.tied else UNTIED
    assert cfg["n_embd"] % cfg["n_head"] == 0 and cfg["n_head"] % cfg["n_kv_head"] == 0
    assert (cfg["n_embd"] // cfg["n_head"]) % 2 == 0 and cfg["T"] <= cfg["maxT"]
    K = Constants(cfg)
    params, inputs, targets = draw(cfg)
    specs = param_specs(cfg)

    loss, grads = loss_and_grads(params, cfg, K, inputs, targets)
    print("loss %.10f  (ln V = %.6f)" % (loss, math.log(cfg["V"])))
    plain = plain_loss(params, cfg, inputs, targets)
    if not abs(plain - loss) <= 1e-12 * abs(loss):
        print("forward check FAILED: the loop-by-loop transcription gives %.15f" % plain,
              file=sys.stderr)
        return 1
    print("forward check ok: loop-by-loop transcription %.15f (diff %.1e)"
          % (plain, plain - loss))
    worst = check_gradients(params, cfg, K, inputs, targets, grads)
    if not worst <= GRADCHECK_TOL:
        print("gradient check FAILED: worst relative error %.3e" % worst, file=sys.stderr)
        return 1
    print("gradient check ok: worst relative error %.2e" % worst)

    losses = adamw_trajectory(params, cfg, K, inputs, targets, N_STEPS)
    if losses[0] != loss:
        print("trajectory loss 0 differs from the reference loss", file=sys.stderr)
        return 1
    print("adamw losses " + " ".join("%.6f" % x for x in losses))

    params_flat = [x for n, _, _ in specs for x in params[n]]
    grads_flat = [x for n, _, _ in specs for x in grads[n]]
    write_file(args.out, cfg, inputs, targets, params_flat, loss, grads_flat, losses)
    print("wrote %s: n_params %d (%.1f s)" % (args.out, len(params_flat), time.time() - t0))
    return 0


if __name__ == "__main__":
    sys.exit(main())
