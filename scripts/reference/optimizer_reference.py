#!/usr/bin/env python3
"""optimizer_reference.py — float64 reference trajectories of the optimizers.

Runs each optimizer case below for five updates on the test model of
tests/data/gpt2_reference.bin and writes the loss before every update and
the full parameter vector after it, for tests/test_optim_reference.c. Only
the Python standard library is used: the GPT-2 forward and backward are
written out here op by op in float64 (plain lists of floats), and every
optimizer is written from its documented algorithm, so nothing is shared
with the C code under test or with the PyTorch script that made the input
file.

Input (read, not changed): tests/data/gpt2_reference.bin, whose layout,
model and flat parameter order scripts/reference/gpt2_reference.py
documents: V=64, maxT=16, n_layer=2, n_head=2, n_embd=16, B=2, T=12, 7872
float32 parameters (widened to Python floats here), the batch, and the
float64 PyTorch loss and gradients rounded to float32. Before anything else
the hand-written model must reproduce that loss and every gradient to 1e-5
(relative to the tensor's largest |gradient|); the script stops otherwise.
The "adamw" case must also reproduce the file's five AdamW losses.

Model: wte [V,C] + wpe [maxT,C] embeddings; per layer x += attn(ln_1(x)),
x += mlp(ln_2(x)) (pre-LayerNorm, eps 1e-5); attention is a fused qkv
linear [3C,C] whose output splits into q, k, v, head h being columns
[h*hs, (h+1)*hs) of each; causal softmax(q k^T / sqrt(hs)) v; projection
[C,C]. MLP: fc [4C,C], GELU (tanh approximation), proj [C,4C]. Final
LayerNorm, logits = x wte^T (tied head), mean cross-entropy over B*T.

Every case starts from the file's parameters, takes 5 updates on the file's
batch (the same batch each time), no gradient clipping, no schedule.
losses[i] is the loss before update i (so losses[0] is the file's loss).
Weight decay applies to the 2-D tensors only: wte, wpe and per layer
attn.qkv.weight, attn.proj.weight, mlp.fc.weight, mlp.proj.weight; never to
biases or LayerNorm parameters (the rule of gpt2_reference.py). t is the
1-based update count, g the gradient, p the parameter, state starts at 0.

The key bias (elements [C, 2C) of each attn.qkv.bias) gets gradient exactly
0 at every update: softmax is invariant to adding one constant to a row of
scores, so the loss does not depend on it and its exact gradient is 0, but
the computed one is rounding noise (about 1e-18 here, far larger in
float32) that Adam, Lion and Adafactor would turn into a full step of
arbitrary sign. The C test zeroes the same elements of the engine's
gradients.

  case             optimizer and hyperparameters
  adamw            torch.optim.AdamW: lr 1e-2, betas (0.9, 0.999), eps 1e-8,
                   weight_decay 0.1.  p *= 1 - lr*wd; m = b1 m + (1-b1) g;
                   v = b2 v + (1-b2) g^2; p -= lr/(1-b1^t) * m /
                   (sqrt(v)/sqrt(1-b2^t) + eps)
  adam             torch.optim.Adam (L2): lr 1e-2, betas (0.9, 0.999), eps
                   1e-8, weight_decay 0.1.  g += wd p, then Adam as above
                   without the decoupled decay
  sgd              torch.optim.SGD: lr 0.1, momentum 0, weight_decay 0.1.
                   g += wd p; p -= lr g
  sgd_momentum     torch.optim.SGD: lr 0.1, momentum 0.9, dampening 0.1,
                   weight_decay 0.1.  g += wd p; buf = g at t = 1, else
                   mu buf + (1 - dampening) g; p -= lr buf
  sgd_nesterov     torch.optim.SGD: lr 0.1, momentum 0.9, dampening 0,
                   nesterov, weight_decay 0.1.  as above, p -= lr (g + mu buf)
  lion             Lion (Chen et al. 2023, lucidrains/lion-pytorch): lr 1e-3,
                   betas (0.9, 0.99), weight_decay 0.1.  p *= 1 - lr*wd;
                   c = b1 m + (1-b1) g; p -= lr sign(c) (sign(0) = 0);
                   m = b2 m + (1-b2) g
  adafactor        transformers.optimization.Adafactor: lr 1e-2,
                   relative_step False, scale_parameter True, warmup_init
                   False, eps (1e-30, 1e-3), clip_threshold 1.0, decay_rate
                   -0.8, beta1 None, weight_decay 0.1 (2-D tensors only)
  adafactor_beta1  the same with beta1 0.9
  adamw8bit        bitsandbytes.optim.AdamW8bit (block-wise, 256 per block):
                   lr 1e-2, betas (0.9, 0.999), eps 1e-8, weight_decay 0.1,
                   min_8bit_size 256

Adafactor, per tensor, at update t (Hugging Face's step(); rms(x) =
sqrt(mean(x^2)) over the tensor):
  lr_t = max(eps2, rms(p)) * lr            (p before this update)
  beta2t = 1 - t^decay_rate;  u = g^2 + eps1
  2-D [rows, cols] (every 2-D tensor, as laid out in the flat order):
    row = beta2t row + (1-beta2t) mean_cols(u)     (length rows)
    col = beta2t col + (1-beta2t) mean_rows(u)     (length cols)
    u_ij = g_ij / sqrt(row_i / mean(row)) / sqrt(col_j)
  otherwise: v = beta2t v + (1-beta2t) u;  u = g / sqrt(v)
  u /= max(1, rms(u) / clip_threshold);  u *= lr_t
  with beta1: m = beta1 m + (1-beta1) u;  u = m
  p -= wd * lr_t * p   (decaying tensors; before the update, from the old p)
  p -= u

AdamW8bit follows bitsandbytes' CUDA kernel, the library's reference
implementation (bitsandbytes-foundation/bitsandbytes at commit 95f9af30):
kOptimizerStatic8bit2StateBlockwise<T, ADAM, 256, 1> (launched with one
element per thread, csrc/ops.cu) and quantize_2D in csrc/kernels.cu, the
maps of create_dynamic_map in bitsandbytes/functional.py, and
Optimizer2State.init_state in bitsandbytes/optim/optimizer.py. (The
library's CPU fallback, bitsandbytes/backends/cpu/ops.py, differs: it
decays before the step and rounds with torch.bucketize, without the sign
rule below.)
  - A tensor with fewer than min_8bit_size (256) elements keeps float32 m
    and v and is updated by the 32-bit kernel; here those are exactly the
    1-D tensors, which have no weight decay, so they follow "adamw" above.
    (The 32-bit kernel would apply a decay after the step, like the 8-bit
    one.) Every 2-D tensor has >= 256 elements and is quantised.
  - A quantised tensor keeps one byte per element for m and for v and one
    float32 absmax per block of 256 elements of the tensor's own index
    space (element 0 starts block 0; a last short block is allowed). Bytes
    and absmax start at 0, so both moments start at 0.
  - m uses the signed dynamic map (create_dynamic_map(signed=True)), v the
    unsigned one (signed=False): 256 sorted float32 codes each, below.
  - Per block and update: dequantise m = code1[byte] * absmax1[block],
    v = code2[byte] * absmax2[block]; m = b1 m + (1-b1) g; v = b2 v +
    (1-b2) g^2 (full precision); the parameter update uses these updated,
    not yet re-quantised values:
        p += -lr sqrt(1-b2^t) / (1-b1^t) * m / (sqrt(v) + sqrt(1-b2^t) eps)
    (the same step as AdamW's) and THEN, for a decaying tensor,
        p *= 1 - lr * wd
    (after the step, unlike torch.optim.AdamW, which decays first).
  - New absmax of the block = max |m| (resp. |v|) over the block's updated
    values. In a short last block the kernel also reduces over the
    missing elements, loaded as gradient 0, m byte 128, v byte 0: they
    contribute b1 * code1[128] * old absmax1 (tiny) to the m maximum and 0
    to v's; reproduced here.
  - Each value is stored as quantize_2D(code, value / absmax): a binary
    search over the sorted codes that starts at pivot 127 and moves by
    64, 32, ..., 1 (x > code[pivot]: go up, remembering pivot as the lower
    neighbour; else down, remembering the upper one; the lower bound starts
    at -1 for the signed map and 0 for the unsigned, the upper at 1). At
    the final pivot p: if x > code[p], return the upper neighbour when x >
    (upper + code[p]) / 2, else p; otherwise return the lower neighbour when
    x < (lower + code[p]) / 2, else p. That is the nearest code, a tie
    keeping p. For m, if the chosen code's sign bit differs from m's, the
    index moves one step towards m's sign (+1 for m > 0, -1 otherwise), so
    a small m never stores as a code of the other sign (code1[127] is +0.0:
    a negative m that rounds to 0 becomes code1[126]).
  The midpoints are computed in float32, as the kernel does; everything
  else here is float64.

The dynamic maps: create_dynamic_map computes its codes in float32 through
torch.linspace, and the last bit of some of them depends on the PyTorch
build (how linspace is vectorised and whether its multiply-adds are fused).
The codes here are those of PyTorch 1.13 as Debian packages it (x86-64,
AVX2), reproduced by float32 emulation in dynamic_map(); they are checked
against the exact values of the formula (within two float32 units in the
last place; 90 signed and 99 unsigned codes are not the float32 nearest to
the exact value, so an implementation should take the codes from
--print-maps, which prints both maps as C arrays, rather than round the
formula itself).

Margins. Two cases make discrete choices: Lion's sign and AdamW8bit's
codes. The script prints the smallest |c| of Lion relative to its tensor's
largest, and how close an AdamW8bit value came to a rounding midpoint (in
code steps); a choice that close may go the other way in float32, and one
code step of a moment moves a parameter by much more than 1e-4 of its
tensor, so a float32 implementation of AdamW8bit may differ from this
reference in a few elements after the first update.

Output (little-endian, no padding):
  char[8]   "ZTOPT001"
  int32     n_params
  int32     n_cases
  per case:
    char[24]  name, NUL-padded ("adamw", ...)
    int32     n_updates (5)
    float32   losses[n_updates]
    float32   params_after[n_updates][n_params]   (flat order)
The initial parameters and the batch are those of gpt2_reference.bin.

Usage: python3 scripts/reference/optimizer_reference.py --out tests/data/optimizer_reference.bin
"""

import argparse
import math
import struct
import sys

REF_MAGIC = b"ZTREF001"
OUT_MAGIC = b"ZTOPT001"
LN_EPS = 1e-5
N_UPDATES = 5
NAME_BYTES = 24
GELU_S = math.sqrt(2.0 / math.pi)

CASES = [
    ("adamw", "adamw", dict(lr=1e-2, beta1=0.9, beta2=0.999, eps=1e-8, weight_decay=0.1)),
    ("adam", "adam", dict(lr=1e-2, beta1=0.9, beta2=0.999, eps=1e-8, weight_decay=0.1)),
    ("sgd", "sgd", dict(lr=0.1, momentum=0.0, dampening=0.0, nesterov=False, weight_decay=0.1)),
    ("sgd_momentum", "sgd",
     dict(lr=0.1, momentum=0.9, dampening=0.1, nesterov=False, weight_decay=0.1)),
    ("sgd_nesterov", "sgd",
     dict(lr=0.1, momentum=0.9, dampening=0.0, nesterov=True, weight_decay=0.1)),
    ("lion", "lion", dict(lr=1e-3, beta1=0.9, beta2=0.99, weight_decay=0.1)),
    ("adafactor", "adafactor",
     dict(lr=1e-2, eps1=1e-30, eps2=1e-3, clip_threshold=1.0, decay_rate=-0.8, beta1=None,
          weight_decay=0.1)),
    ("adafactor_beta1", "adafactor",
     dict(lr=1e-2, eps1=1e-30, eps2=1e-3, clip_threshold=1.0, decay_rate=-0.8, beta1=0.9,
          weight_decay=0.1)),
    ("adamw8bit", "adamw8bit",
     dict(lr=1e-2, beta1=0.9, beta2=0.999, eps=1e-8, weight_decay=0.1, min_8bit_size=256,
          block=256)),
]


# ----------------------------------------------------------------------------
# The input file and the parameter layout


def read_reference(path):
    """The contents of gpt2_reference.bin as a dict (floats widened)."""
    with open(path, "rb") as f:
        data = f.read()
    at = 0

    def take(fmt):
        nonlocal at
        size = struct.calcsize(fmt)
        if at + size > len(data):
            sys.exit("%s: truncated" % path)
        vals = struct.unpack_from(fmt, data, at)
        at += size
        return vals

    if data[:8] != REF_MAGIC:
        sys.exit("%s: not a ZTREF001 file" % path)
    at = 8
    V, maxT, L, NH, C, B, T = take("<7i")
    (n,) = take("<i")
    ref = dict(V=V, maxT=maxT, n_layer=L, n_head=NH, n_embd=C, B=B, T=T, n_params=n)
    ref["inputs"] = list(take("<%di" % (B * T)))
    ref["targets"] = list(take("<%di" % (B * T)))
    ref["params"] = list(take("<%df" % n))
    (ref["loss"],) = take("<f")
    ref["grads"] = list(take("<%df" % n))
    (n_steps,) = take("<i")
    ref["adamw_hparams"] = take("<5f")
    ref["adamw_losses"] = list(take("<%df" % n_steps))
    if at != len(data):
        sys.exit("%s: %d bytes after the end" % (path, len(data) - at))
    return ref


def param_specs(cfg):
    """(name, (rows, cols)) in the flat order; cols is 1 for vectors, whose
    shape is then (n,) for the decay and factoring rules."""
    V, maxT, C, L = cfg["V"], cfg["maxT"], cfg["n_embd"], cfg["n_layer"]
    specs = [("wte", (V, C)), ("wpe", (maxT, C))]
    for l in range(L):
        h = "h%d." % l
        specs += [
            (h + "ln_1.weight", (C,)), (h + "ln_1.bias", (C,)),
            (h + "attn.qkv.weight", (3 * C, C)), (h + "attn.qkv.bias", (3 * C,)),
            (h + "attn.proj.weight", (C, C)), (h + "attn.proj.bias", (C,)),
            (h + "ln_2.weight", (C,)), (h + "ln_2.bias", (C,)),
            (h + "mlp.fc.weight", (4 * C, C)), (h + "mlp.fc.bias", (4 * C,)),
            (h + "mlp.proj.weight", (C, 4 * C)), (h + "mlp.proj.bias", (C,)),
        ]
    specs += [("lnf.weight", (C,)), ("lnf.bias", (C,))]
    return specs


class Layout:
    """Offsets of the tensors in the flat parameter vector."""

    def __init__(self, cfg):
        self.tensors = []  # (name, shape, offset, numel)
        self.by_name = {}
        off = 0
        for name, shape in param_specs(cfg):
            numel = shape[0] * (shape[1] if len(shape) == 2 else 1)
            self.tensors.append((name, shape, off, numel))
            self.by_name[name] = (shape, off, numel)
            off += numel
        self.n_params = off

    def vector(self, flat, name):
        _, off, numel = self.by_name[name]
        return flat[off:off + numel]

    def matrix(self, flat, name):
        (rows, cols), off, _ = self.by_name[name]
        return [flat[off + r * cols:off + (r + 1) * cols] for r in range(rows)]


# ----------------------------------------------------------------------------
# The model, one function per op. Activations are lists of rows (one row per
# position b*T + t); a forward returns what its backward needs.


def dot(a, b):
    return sum(x * y for x, y in zip(a, b))


def transpose(rows):
    return [list(col) for col in zip(*rows)]


def encoder_forward(wte, wpe, inputs, T):
    return [[a + b for a, b in zip(wte[tok], wpe[i % T])] for i, tok in enumerate(inputs)]


def encoder_backward(dx, inputs, T, dwte, dwpe):
    for i, tok in enumerate(inputs):
        for c, d in enumerate(dx[i]):
            dwte[tok][c] += d
            dwpe[i % T][c] += d


def layernorm_forward(x, w, b):
    out, cache = [], []
    for row in x:
        n = len(row)
        mean = sum(row) / n
        var = sum((v - mean) ** 2 for v in row) / n
        rstd = 1.0 / math.sqrt(var + LN_EPS)
        xhat = [(v - mean) * rstd for v in row]
        out.append([xh * wi + bi for xh, wi, bi in zip(xhat, w, b)])
        cache.append((xhat, rstd))
    return out, cache


def layernorm_backward(dy, cache, w, dw, db):
    dx = []
    for drow, (xhat, rstd) in zip(dy, cache):
        n = len(drow)
        dxhat = [d * wi for d, wi in zip(drow, w)]
        mean_d = sum(dxhat) / n
        mean_dx = sum(d * xh for d, xh in zip(dxhat, xhat)) / n
        dx.append([rstd * (d - mean_d - xh * mean_dx) for d, xh in zip(dxhat, xhat)])
        for c in range(n):
            dw[c] += drow[c] * xhat[c]
            db[c] += drow[c]
    return dx


def linear_forward(x, W, b):
    """x [N, in] times W^T for W [out, in] (nn.Linear layout), plus b (or None)."""
    if b is None:
        return [[dot(row, wr) for wr in W] for row in x]
    return [[dot(row, wr) + bo for wr, bo in zip(W, b)] for row in x]


def linear_backward(dy, x, W, dW, db):
    """Returns dx; adds to dW [out, in] and db (or None)."""
    Wt = transpose(W)
    dx = [[dot(drow, wcol) for wcol in Wt] for drow in dy]
    dyt, xt = transpose(dy), transpose(x)
    for o, dcol in enumerate(dyt):
        for i, xcol in enumerate(xt):
            dW[o][i] += dot(dcol, xcol)
        if db is not None:
            db[o] += sum(dcol)
    return dx


def attention_forward(qkv, B, T, C, NH):
    """Causal multi-head attention over the fused qkv rows [B*T, 3C]."""
    hs = C // NH
    scale = 1.0 / math.sqrt(hs)
    y = [[0.0] * C for _ in range(B * T)]
    probs = {}
    for b in range(B):
        for h in range(NH):
            q0, k0, v0 = h * hs, C + h * hs, 2 * C + h * hs
            for t in range(T):
                q = qkv[b * T + t][q0:q0 + hs]
                s = [dot(q, qkv[b * T + u][k0:k0 + hs]) * scale for u in range(t + 1)]
                mx = max(s)
                e = [math.exp(v - mx) for v in s]
                z = sum(e)
                p = [v / z for v in e]
                probs[b, h, t] = p
                out = y[b * T + t]
                for u in range(t + 1):
                    vu = qkv[b * T + u][v0:v0 + hs]
                    for d in range(hs):
                        out[h * hs + d] += p[u] * vu[d]
    return y, probs


def attention_backward(dy, qkv, probs, B, T, C, NH):
    hs = C // NH
    scale = 1.0 / math.sqrt(hs)
    dqkv = [[0.0] * (3 * C) for _ in range(B * T)]
    for b in range(B):
        for h in range(NH):
            q0, k0, v0 = h * hs, C + h * hs, 2 * C + h * hs
            for t in range(T):
                p = probs[b, h, t]
                dyh = dy[b * T + t][h * hs:(h + 1) * hs]
                dp = [dot(dyh, qkv[b * T + u][v0:v0 + hs]) for u in range(t + 1)]
                inner = dot(p, dp)
                q = qkv[b * T + t][q0:q0 + hs]
                dq = dqkv[b * T + t]
                for u in range(t + 1):
                    dvu = dqkv[b * T + u]
                    ds = p[u] * (dp[u] - inner) * scale
                    ku = qkv[b * T + u][k0:k0 + hs]
                    for d in range(hs):
                        dvu[v0 + d] += p[u] * dyh[d]
                        dq[q0 + d] += ds * ku[d]
                        dvu[k0 + d] += ds * q[d]
    return dqkv


def gelu_forward(x):
    return [[0.5 * v * (1.0 + math.tanh(GELU_S * (v + 0.044715 * v ** 3))) for v in row]
            for row in x]


def gelu_backward(dy, x):
    dx = []
    for drow, row in zip(dy, x):
        out = []
        for d, v in zip(drow, row):
            th = math.tanh(GELU_S * (v + 0.044715 * v ** 3))
            dth = (1.0 - th * th) * GELU_S * (1.0 + 3.0 * 0.044715 * v * v)
            out.append(d * (0.5 * (1.0 + th) + 0.5 * v * dth))
        dx.append(out)
    return dx


def residual_add(a, b):
    return [[u + v for u, v in zip(ra, rb)] for ra, rb in zip(a, b)]


def crossentropy_forward(logits, targets):
    """Mean cross-entropy; returns the loss and the softmax probabilities."""
    total, probs = 0.0, []
    for row, tgt in zip(logits, targets):
        mx = max(row)
        e = [math.exp(v - mx) for v in row]
        z = sum(e)
        total += math.log(z) + mx - row[tgt]
        probs.append([v / z for v in e])
    return total / len(targets), probs


def crossentropy_backward(probs, targets):
    n = len(targets)
    dlogits = []
    for p, tgt in zip(probs, targets):
        d = [v / n for v in p]
        d[tgt] -= 1.0 / n
        dlogits.append(d)
    return dlogits


def zeros_like_param(lay, flat, name):
    shape = lay.by_name[name][0]
    if len(shape) == 2:
        return [[0.0] * shape[1] for _ in range(shape[0])]
    return [0.0] * shape[0]


def loss_and_grads(cfg, lay, flat, inputs, targets):
    """Forward and backward of the model at parameters `flat`; returns the
    mean loss and the flat gradient."""
    B, T, C, NH, L = cfg["B"], cfg["T"], cfg["n_embd"], cfg["n_head"], cfg["n_layer"]
    M, v = lay.matrix, lay.vector
    g = {name: zeros_like_param(lay, flat, name) for name, _, _, _ in lay.tensors}
    wte = M(flat, "wte")

    # forward
    x = encoder_forward(wte, M(flat, "wpe"), inputs, T)
    layers = []
    for l in range(L):
        h = "h%d." % l
        a1, c1 = layernorm_forward(x, v(flat, h + "ln_1.weight"), v(flat, h + "ln_1.bias"))
        qkv = linear_forward(a1, M(flat, h + "attn.qkv.weight"), v(flat, h + "attn.qkv.bias"))
        att, probs = attention_forward(qkv, B, T, C, NH)
        proj = linear_forward(att, M(flat, h + "attn.proj.weight"), v(flat, h + "attn.proj.bias"))
        x2 = residual_add(x, proj)
        a2, c2 = layernorm_forward(x2, v(flat, h + "ln_2.weight"), v(flat, h + "ln_2.bias"))
        fc = linear_forward(a2, M(flat, h + "mlp.fc.weight"), v(flat, h + "mlp.fc.bias"))
        ge = gelu_forward(fc)
        mp = linear_forward(ge, M(flat, h + "mlp.proj.weight"), v(flat, h + "mlp.proj.bias"))
        layers.append((a1, c1, qkv, att, probs, a2, c2, fc, ge))
        x = residual_add(x2, mp)
    xf, cf = layernorm_forward(x, v(flat, "lnf.weight"), v(flat, "lnf.bias"))
    logits = linear_forward(xf, wte, None)
    loss, probs_ce = crossentropy_forward(logits, targets)

    # backward
    dlogits = crossentropy_backward(probs_ce, targets)
    dxf = linear_backward(dlogits, xf, wte, g["wte"], None)
    dx = layernorm_backward(dxf, cf, v(flat, "lnf.weight"), g["lnf.weight"], g["lnf.bias"])
    for l in reversed(range(L)):
        h = "h%d." % l
        a1, c1, qkv, att, probs, a2, c2, fc, ge = layers[l]
        dge = linear_backward(dx, ge, M(flat, h + "mlp.proj.weight"), g[h + "mlp.proj.weight"],
                              g[h + "mlp.proj.bias"])
        dfc = gelu_backward(dge, fc)
        da2 = linear_backward(dfc, a2, M(flat, h + "mlp.fc.weight"), g[h + "mlp.fc.weight"],
                              g[h + "mlp.fc.bias"])
        dx2 = residual_add(dx, layernorm_backward(da2, c2, v(flat, h + "ln_2.weight"),
                                                  g[h + "ln_2.weight"], g[h + "ln_2.bias"]))
        datt = linear_backward(dx2, att, M(flat, h + "attn.proj.weight"),
                               g[h + "attn.proj.weight"], g[h + "attn.proj.bias"])
        dqkv = attention_backward(datt, qkv, probs, B, T, C, NH)
        da1 = linear_backward(dqkv, a1, M(flat, h + "attn.qkv.weight"), g[h + "attn.qkv.weight"],
                              g[h + "attn.qkv.bias"])
        dx = residual_add(dx2, layernorm_backward(da1, c1, v(flat, h + "ln_1.weight"),
                                                  g[h + "ln_1.weight"], g[h + "ln_1.bias"]))
    encoder_backward(dx, inputs, T, g["wte"], g["wpe"])

    grads = []
    for name, shape, _, _ in lay.tensors:
        grads += [e for row in g[name] for e in row] if len(shape) == 2 else g[name]
    return loss, grads


def self_check(cfg, lay, ref):
    """The hand-written model against the file's PyTorch loss and gradients."""
    loss, grads = loss_and_grads(cfg, lay, ref["params"], ref["inputs"], ref["targets"])
    rel = abs(loss - ref["loss"]) / abs(ref["loss"])
    print("self-check: loss %.10f vs file %.10f (rel %.1e)" % (loss, ref["loss"], rel))
    if rel > 1e-5:
        sys.exit("self-check FAILED: the loss differs from gpt2_reference.bin")
    worst = 0.0
    for name, _, off, numel in lay.tensors:
        want = ref["grads"][off:off + numel]
        scale = max(abs(w) for w in want)
        diff = max(abs(a - b) for a, b in zip(grads[off:off + numel], want))
        if scale == 0.0 or diff > 1e-5 * scale:
            sys.exit("self-check FAILED: %s gradient max diff %.3e vs max |grad| %.3e"
                     % (name, diff, scale))
        worst = max(worst, diff / scale)
    print("self-check: every gradient within %.1e of the tensor's largest |grad|" % worst)


# ----------------------------------------------------------------------------
# Optimizers. Each is a class with `update(name, shape, p, g, decay, t)`
# that returns the tensor's new values (lists of floats, flat), keeping its
# per-tensor state in self.state[name].


def rms(x):
    return math.sqrt(sum(v * v for v in x) / len(x))


def sign(x):
    return (x > 0.0) - (x < 0.0)


class AdamW:
    def __init__(self, hp):
        self.hp, self.state = hp, {}

    def moments(self, name, g):
        hp = self.hp
        m, v = self.state.setdefault(name, ([0.0] * len(g), [0.0] * len(g)))
        for i, gi in enumerate(g):
            m[i] = hp["beta1"] * m[i] + (1.0 - hp["beta1"]) * gi
            v[i] = hp["beta2"] * v[i] + (1.0 - hp["beta2"]) * gi * gi
        return m, v

    def adam_step(self, p, m, v, t):
        hp = self.hp
        bc1 = 1.0 - hp["beta1"] ** t
        sbc2 = math.sqrt(1.0 - hp["beta2"] ** t)
        return [pi - hp["lr"] / bc1 * mi / (math.sqrt(vi) / sbc2 + hp["eps"])
                for pi, mi, vi in zip(p, m, v)]

    def update(self, name, shape, p, g, decay, t):
        if decay:
            p = [pi * (1.0 - self.hp["lr"] * self.hp["weight_decay"]) for pi in p]
        m, v = self.moments(name, g)
        return self.adam_step(p, m, v, t)


class Adam(AdamW):
    def update(self, name, shape, p, g, decay, t):
        if decay:
            g = [gi + self.hp["weight_decay"] * pi for gi, pi in zip(g, p)]
        m, v = self.moments(name, g)
        return self.adam_step(p, m, v, t)


class SGD:
    def __init__(self, hp):
        self.hp, self.state = hp, {}

    def update(self, name, shape, p, g, decay, t):
        hp = self.hp
        if decay:
            g = [gi + hp["weight_decay"] * pi for gi, pi in zip(g, p)]
        if hp["momentum"] != 0.0:
            mu = hp["momentum"]
            if name not in self.state:
                buf = list(g)
            else:
                buf = [mu * b + (1.0 - hp["dampening"]) * gi
                       for b, gi in zip(self.state[name], g)]
            self.state[name] = buf
            g = [gi + mu * b for gi, b in zip(g, buf)] if hp["nesterov"] else buf
        return [pi - hp["lr"] * gi for pi, gi in zip(p, g)]


class Lion:
    def __init__(self, hp):
        self.hp, self.state = hp, {}
        self.min_margin = float("inf")  # smallest |c| / max |c| of a tensor seen

    def update(self, name, shape, p, g, decay, t):
        hp = self.hp
        m = self.state.setdefault(name, [0.0] * len(g))
        if decay:
            p = [pi * (1.0 - hp["lr"] * hp["weight_decay"]) for pi in p]
        c = [hp["beta1"] * mi + (1.0 - hp["beta1"]) * gi for mi, gi in zip(m, g)]
        top = max(abs(ci) for ci in c)
        for ci in c:
            if ci != 0.0 and top > 0.0:
                self.min_margin = min(self.min_margin, abs(ci) / top)
        p = [pi - hp["lr"] * sign(ci) for pi, ci in zip(p, c)]
        self.state[name] = [hp["beta2"] * mi + (1.0 - hp["beta2"]) * gi for mi, gi in zip(m, g)]
        return p


class Adafactor:
    def __init__(self, hp):
        self.hp, self.state = hp, {}

    def update(self, name, shape, p, g, decay, t):
        hp = self.hp
        lr_t = max(hp["eps2"], rms(p)) * hp["lr"]
        beta2t = 1.0 - t ** hp["decay_rate"]
        sq = [gi * gi + hp["eps1"] for gi in g]
        st = self.state.setdefault(name, {})
        if len(shape) == 2:
            rows, cols = shape
            row = st.setdefault("row", [0.0] * rows)
            col = st.setdefault("col", [0.0] * cols)
            for r in range(rows):
                mean_r = sum(sq[r * cols:(r + 1) * cols]) / cols
                row[r] = beta2t * row[r] + (1.0 - beta2t) * mean_r
            for c in range(cols):
                mean_c = sum(sq[r * cols + c] for r in range(rows)) / rows
                col[c] = beta2t * col[c] + (1.0 - beta2t) * mean_c
            row_mean = sum(row) / rows
            u = [g[r * cols + c] / math.sqrt(row[r] / row_mean) / math.sqrt(col[c])
                 for r in range(rows) for c in range(cols)]
        else:
            v = st.setdefault("v", [0.0] * len(g))
            for i in range(len(g)):
                v[i] = beta2t * v[i] + (1.0 - beta2t) * sq[i]
            u = [gi / math.sqrt(vi) for gi, vi in zip(g, v)]
        clip = max(1.0, rms(u) / hp["clip_threshold"])
        u = [ui / clip * lr_t for ui in u]
        if hp["beta1"] is not None:
            m = st.setdefault("m", [0.0] * len(g))
            for i in range(len(u)):
                m[i] = hp["beta1"] * m[i] + (1.0 - hp["beta1"]) * u[i]
            u = list(m)
        if decay:
            p = [pi - hp["weight_decay"] * lr_t * pi for pi in p]
        return [pi - ui for pi, ui in zip(p, u)]


# ---- bitsandbytes' 8-bit block-wise AdamW


def f32(x):
    """x rounded to the nearest float32 (ties to even), as a Python float."""
    return struct.unpack("<f", struct.pack("<f", x))[0]


def f32_fma(a, b, c):
    """a * b + c rounded once to float32 (a fused multiply-add); a, b, c are
    float32 values, whose product is exact in float64 (24 + 24 bits), so the
    only rounding that matters is the final one: float64 sum then float32
    rounding is exact unless the float64 sum itself rounds, which a
    fraction avoids."""
    from fractions import Fraction
    return f32(float(Fraction(a) * Fraction(b) + Fraction(c)))


def torch_linspace_f32(start, end, steps):
    """torch.linspace(start, end, steps, dtype=torch.float32) as PyTorch 1.13's
    CPU kernel computes it on AVX2 (aten/src/ATen/native/cpu/RangeFactoriesKernel.cpp):
    step = (end - start) / (steps - 1) in float32; index i < steps // 2 gets
    start + step * i, the others end - step * (steps - i - 1). Blocks of 16
    are vectorised as two vectors of 8 lanes whose first lane is computed
    that way (the multiply-add fused) and lane k as first + k * step (not
    fused); the remaining tail is scalar with the multiply-add fused."""
    s, e = f32(start), f32(end)
    step = f32(f32(e - s) / (steps - 1))
    half = steps // 2

    def one(i):
        return f32_fma(step, float(i), s) if i < half else f32_fma(-step, float(steps - i - 1), e)

    out, i, lanes = [], 0, 8
    while i <= steps - 2 * lanes:
        for first in (i, i + lanes):
            base = one(first)
            out += [base] + [f32(base + f32(step * k)) for k in range(1, lanes)]
        i += 2 * lanes
    return out + [one(j) for j in range(i, steps)]


def dynamic_map(signed):
    """bitsandbytes' create_dynamic_map(signed, max_exponent_bits=7,
    total_bits=8): for i in 0..6, the means of adjacent points of
    linspace(0.1, 1, 2^i + 1) (signed) or linspace(0.1, 1, 2^(i+1) + 1)
    (unsigned), times 10^(i - 6) (and their negatives when signed), plus 0
    and 1, sorted: 256 float32 codes, computed in float32 as torch does."""
    data = []
    for i in range(7):
        items = 2 ** i + 1 if signed else 2 ** (i + 1) + 1
        b = torch_linspace_f32(0.1, 1.0, items)
        means = [f32(f32(b[k] + b[k + 1]) / 2.0) for k in range(items - 1)]
        scale = f32(10.0 ** (i - 6))
        data += [f32(scale * m) for m in means]
        if signed:
            data += [f32(-scale * m) for m in means]
    data += [0.0, 1.0]
    assert len(data) == 256
    data.sort()
    # Each code within one float32 ulp of the exact value of the formula.
    exact = []
    for i in range(7):
        items = 2 ** i + 1 if signed else 2 ** (i + 1) + 1
        for k in range(items - 1):
            val = 10.0 ** (i - 6) * (0.1 + 0.9 * (k + 0.5) / (items - 1))
            exact += [val, -val] if signed else [val]
    exact = sorted(exact + [0.0, 1.0])
    for a, b in zip(data, exact):
        ulp = 2.0 ** (math.frexp(b)[1] - 24) if b != 0.0 else 0.0
        if abs(a - b) > 2.0 * ulp:
            sys.exit("dynamic map: code %r is far from the formula's %r" % (a, b))
    return data


def quantize_2d(code, x, signed):
    """The byte bitsandbytes' quantize_2D (csrc/kernels.cu) stores for x
    (already divided by the block's absmax)."""
    pivot, upper_pivot, lower_pivot = 127, 255, 0
    lower = -1.0 if signed else 0.0
    upper = 1.0
    val = code[pivot]
    step = 64
    while step > 0:
        if x > val:
            lower_pivot, lower = pivot, val
            pivot += step
        else:
            upper_pivot, upper = pivot, val
            pivot -= step
        val = code[pivot]
        step >>= 1
    if x > val:
        return upper_pivot if x > f32((upper + val) * 0.5) else pivot
    return lower_pivot if x < f32((lower + val) * 0.5) else pivot


class AdamW8bit:
    def __init__(self, hp):
        self.hp, self.state = hp, {}
        self.code1 = dynamic_map(signed=True)
        self.code2 = dynamic_map(signed=False)
        self.fp32 = AdamW(hp)  # small tensors: 32-bit states
        self.min_gap = float("inf")  # smallest relative distance to a rounding midpoint

    def note_margin(self, code, x, q):
        """How close x came to switching code (relative to the code spacing)."""
        for nb in (q - 1, q + 1):
            if 0 <= nb < 256 and code[nb] != code[q]:
                mid = (code[nb] + code[q]) / 2.0
                self.min_gap = min(self.min_gap, abs(x - mid) / abs(code[nb] - code[q]))

    def update(self, name, shape, p, g, decay, t):
        hp = self.hp
        n = len(p)
        if n < hp["min_8bit_size"]:
            if decay:
                sys.exit("adamw8bit: %s is small and decays; the 32-bit kernel's decay "
                         "order is not modelled" % name)
            return self.fp32.update(name, shape, p, g, decay, t)
        block = hp["block"]
        n_blocks = (n + block - 1) // block
        st = self.state.setdefault(name, dict(q1=[0] * n, q2=[0] * n, absmax1=[0.0] * n_blocks,
                                              absmax2=[0.0] * n_blocks))
        b1, b2, lr, eps = hp["beta1"], hp["beta2"], hp["lr"], hp["eps"]
        bc1 = 1.0 - b1 ** t
        sbc2 = math.sqrt(1.0 - b2 ** t)
        out = list(p)
        for blk in range(n_blocks):
            lo, hi = blk * block, min(n, (blk + 1) * block)
            a1, a2 = st["absmax1"][blk], st["absmax2"][blk]
            m = [self.code1[st["q1"][i]] * a1 * b1 + (1.0 - b1) * g[i] for i in range(lo, hi)]
            v = [self.code2[st["q2"][i]] * a2 * b2 + (1.0 - b2) * g[i] * g[i]
                 for i in range(lo, hi)]
            for j, i in enumerate(range(lo, hi)):
                out[i] = p[i] - lr * sbc2 / bc1 * m[j] / (math.sqrt(v[j]) + sbc2 * eps)
                if decay:
                    out[i] *= 1.0 - lr * hp["weight_decay"]
            new1 = max(abs(x) for x in m)
            new2 = max(abs(x) for x in v)
            if hi - lo < block:  # the kernel's padding: gradient 0, m byte 128, v byte 0
                new1 = max(new1, abs(self.code1[128] * a1 * b1))
                new2 = max(new2, abs(self.code2[0] * a2 * b2))
            st["absmax1"][blk], st["absmax2"][blk] = new1, new2
            for j, i in enumerate(range(lo, hi)):
                x1 = m[j] / new1 if new1 > 0.0 else 0.0
                x2 = v[j] / new2 if new2 > 0.0 else 0.0
                q1 = quantize_2d(self.code1, x1, True)
                if math.copysign(1.0, self.code1[q1]) != math.copysign(1.0, m[j]):
                    q1 += 1 if m[j] > 0.0 else -1
                q2 = quantize_2d(self.code2, x2, False)
                self.note_margin(self.code1, x1, q1)
                self.note_margin(self.code2, x2, q2)
                st["q1"][i], st["q2"][i] = q1, q2
        return out


OPTIMIZERS = dict(adamw=AdamW, adam=Adam, sgd=SGD, lion=Lion, adafactor=Adafactor,
                  adamw8bit=AdamW8bit)


# ----------------------------------------------------------------------------


def zero_key_bias_grads(cfg, lay, grads):
    """Sets the gradient of the key part of every attn.qkv.bias to exact zero.
    Softmax is invariant to adding one constant to a row of scores, so the
    loss does not depend on the key bias and its exact gradient is zero; the
    computed one is rounding noise (about 1e-18 here), which optimizers that
    normalise the gradient (Adam, Lion's sign, Adafactor) would turn into a
    full step of arbitrary sign."""
    C = cfg["n_embd"]
    for l in range(cfg["n_layer"]):
        _, off, _ = lay.by_name["h%d.attn.qkv.bias" % l]
        grads[off + C:off + 2 * C] = [0.0] * C


def run_case(cfg, lay, ref, kind, hp):
    """N_UPDATES updates from the file's parameters; returns the losses and
    the parameters after each update, and the optimizer."""
    opt = OPTIMIZERS[kind](hp)
    flat = list(ref["params"])
    losses, after = [], []
    for t in range(1, N_UPDATES + 1):
        loss, grads = loss_and_grads(cfg, lay, flat, ref["inputs"], ref["targets"])
        zero_key_bias_grads(cfg, lay, grads)
        losses.append(loss)
        new = []
        for name, shape, off, numel in lay.tensors:
            new += opt.update(name, shape, flat[off:off + numel], grads[off:off + numel],
                              len(shape) == 2, t)
        flat = new
        after.append(list(flat))
    return losses, after, opt


def c_hex(x):
    """x (a float32 value) as a C99 hexadecimal float constant: -0x1.fc6666p-1f."""
    mant, _, exp = float.hex(x).partition("p")
    mant = mant.rstrip("0").rstrip(".")
    return "%sp%sf" % (mant, exp)


def print_maps():
    for signed in (True, False):
        codes = dynamic_map(signed)
        print("/* create_dynamic_map(signed=%s) */" % signed)
        print("static const float %s[256] = {" % ("dynamic_signed" if signed else "dynamic_unsigned"))
        for k in range(0, 256, 4):
            print("    " + " ".join("%s," % c_hex(c) for c in codes[k:k + 4]))
        print("};")


def write_output(path, n_params, results):
    with open(path, "wb") as f:
        f.write(OUT_MAGIC)
        f.write(struct.pack("<ii", n_params, len(results)))
        for name, losses, after in results:
            f.write(name.encode("ascii").ljust(NAME_BYTES, b"\0"))
            f.write(struct.pack("<i", len(losses)))
            f.write(struct.pack("<%df" % len(losses), *losses))
            for vec in after:
                f.write(struct.pack("<%df" % n_params, *vec))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--ref", default="tests/data/gpt2_reference.bin",
                    help="input: the GPT-2 reference file (default %(default)s)")
    ap.add_argument("--out", help="output .bin path")
    ap.add_argument("--print-maps", action="store_true",
                    help="print the two dynamic maps as C arrays and exit")
    args = ap.parse_args()
    if args.print_maps:
        print_maps()
        return 0
    if not args.out:
        ap.error("--out is required")

    ref = read_reference(args.ref)
    cfg = ref
    lay = Layout(cfg)
    if lay.n_params != ref["n_params"]:
        sys.exit("layout has %d parameters, the file %d" % (lay.n_params, ref["n_params"]))
    self_check(cfg, lay, ref)

    results = []
    for name, kind, hp in CASES:
        losses, after, opt = run_case(cfg, lay, ref, kind, hp)
        note = ""
        if isinstance(opt, Lion):
            note = "  (smallest |c|/max|c| %.1e)" % opt.min_margin
        if isinstance(opt, AdamW8bit):
            note = "  (closest to a rounding midpoint: %.1e of a code step)" % opt.min_gap
        print("%-16s losses %s%s" % (name, " ".join("%.6f" % x for x in losses), note))
        if name == "adamw":
            for i, (a, b) in enumerate(zip(losses, ref["adamw_losses"])):
                if abs(a - b) > 1e-6 * abs(b):
                    sys.exit("self-check FAILED: adamw loss %d %.8f vs the file's %.8f"
                             % (i, a, b))
        results.append((name, losses, after))
    write_output(args.out, lay.n_params, results)
    print("wrote %s: %d cases, n_params %d" % (args.out, len(results), lay.n_params))
    return 0


if __name__ == "__main__":
    sys.exit(main())
