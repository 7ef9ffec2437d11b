#!/usr/bin/python3
"""gpt2_reference.py — PyTorch reference numbers for zerotrain's GPT-2.

Writes a small binary file that the C test reads to check the CPU model's
forward loss, every parameter gradient, and a short AdamW trajectory against
PyTorch. The model is written out explicitly (no nn.Module, no fused
attention) so that each operation maps onto one zerotrain kernel, and it is
evaluated in float64 so the reference is far more precise than the float32
code under test. Parameters and tokens are drawn in float32 / int32 first
and only then widened, so the float32 values stored in the file are exactly
the values the float64 reference used.

Model (GPT-2 as in llm.c): wte [V,C], wpe [maxT,C]; n_layer pre-LayerNorm
blocks x += attn(ln_1(x)); x += mlp(ln_2(x)); attention is a fused qkv
linear [3C,C] + bias whose output splits along the last dim into q, k, v
(in that order), heads being contiguous hs = C/NH chunks of each; causal
softmax(q k^T / sqrt(hs)); output projection [C,C] + bias. MLP: fc [4C,C]
+ bias, GELU (tanh approximation), proj [C,4C] + bias. Final LayerNorm lnf;
logits = x wte^T (tied head); loss = mean cross-entropy over B*T positions.
All LayerNorms use eps 1e-5.

Flat parameter order (matrices row-major in nn.Linear layout [out, in]):
  wte [V,C], wpe [maxT,C],
  per layer: ln_1.weight [C], ln_1.bias [C], attn.qkv.weight [3C,C],
             attn.qkv.bias [3C], attn.proj.weight [C,C], attn.proj.bias [C],
             ln_2.weight [C], ln_2.bias [C], mlp.fc.weight [4C,C],
             mlp.fc.bias [4C], mlp.proj.weight [C,4C], mlp.proj.bias [C],
  lnf.weight [C], lnf.bias [C].

AdamW trajectory: torch.optim.AdamW, lr 1e-2, betas (0.9, 0.999), eps 1e-8,
weight decay 0.1 on 2-D tensors only (wte, wpe, the four matrices of each
layer), no clipping, n_steps steps on the same batch; losses[i] is the loss
before update i, so losses[0] is the reference loss.

Binary file (little-endian):
  char[8]  "ZTREF001"
  int32    V, maxT, n_layer, n_head, n_embd, B, T
  int32    n_params                  (flat total)
  int32    inputs[B*T]               (row-major [B,T])
  int32    targets[B*T]
  float32  params[n_params]          (flat order above)
  float32  loss
  float32  grads[n_params]           (d loss / d params, same order)
  int32    n_steps
  float32  lr, beta1, beta2, eps, weight_decay
  float32  losses[n_steps]

Usage: /usr/bin/python3 scripts/reference/gpt2_reference.py --out tests/data/gpt2_reference.bin
"""

import argparse
import math
import struct
import sys

import torch
import torch.nn.functional as F

MAGIC = b"ZTREF001"
CONFIG = dict(V=64, maxT=16, n_layer=2, n_head=2, n_embd=16, B=2, T=12)
ADAMW = dict(lr=1e-2, beta1=0.9, beta2=0.999, eps=1e-8, weight_decay=0.1)
N_STEPS = 5
LN_EPS = 1e-5


def param_specs(cfg):
    """(name, shape, kind) in the flat order; kind picks the init and decay."""
    V, maxT, C, L = cfg["V"], cfg["maxT"], cfg["n_embd"], cfg["n_layer"]
    specs = [("wte", (V, C), "weight"), ("wpe", (maxT, C), "weight")]
    for l in range(L):
        p = "h%d." % l
        specs += [
            (p + "ln_1.weight", (C,), "ln_weight"),
            (p + "ln_1.bias", (C,), "ln_bias"),
            (p + "attn.qkv.weight", (3 * C, C), "weight"),
            (p + "attn.qkv.bias", (3 * C,), "bias"),
            (p + "attn.proj.weight", (C, C), "weight"),
            (p + "attn.proj.bias", (C,), "bias"),
            (p + "ln_2.weight", (C,), "ln_weight"),
            (p + "ln_2.bias", (C,), "ln_bias"),
            (p + "mlp.fc.weight", (4 * C, C), "weight"),
            (p + "mlp.fc.bias", (4 * C,), "bias"),
            (p + "mlp.proj.weight", (C, 4 * C), "weight"),
            (p + "mlp.proj.bias", (C,), "bias"),
        ]
    specs += [("lnf.weight", (C,), "ln_weight"), ("lnf.bias", (C,), "ln_bias")]
    return specs


def init_params(cfg):
    """Draws float32 parameters in flat order from seed 0, returns float64 copies.

    Weights are large (std 0.2) so gradients are far from zero, and biases
    and LayerNorm shifts are non-zero so that a kernel ignoring them fails."""
    params = {}
    for name, shape, kind in param_specs(cfg):
        t = torch.empty(shape, dtype=torch.float32)
        if kind == "weight":
            t.normal_(0.0, 0.2)
        elif kind == "bias" or kind == "ln_bias":
            t.normal_(0.0, 0.05)
        else:
            t.normal_(0.0, 0.1).add_(1.0)
        params[name] = t.to(torch.float64)
    return params


def layernorm(x, w, b):
    return F.layer_norm(x, (x.shape[-1],), w, b, LN_EPS)


def attention(x, qkv_w, qkv_b, proj_w, proj_b, n_head):
    B, T, C = x.shape
    hs = C // n_head
    qkv = x @ qkv_w.t() + qkv_b
    q, k, v = qkv.split(C, dim=-1)
    q = q.view(B, T, n_head, hs).transpose(1, 2)
    k = k.view(B, T, n_head, hs).transpose(1, 2)
    v = v.view(B, T, n_head, hs).transpose(1, 2)
    scores = (q @ k.transpose(-2, -1)) / math.sqrt(hs)
    causal = torch.ones(T, T, dtype=torch.bool).tril()
    scores = scores.masked_fill(~causal, float("-inf"))
    y = torch.softmax(scores, dim=-1) @ v
    y = y.transpose(1, 2).contiguous().view(B, T, C)
    return y @ proj_w.t() + proj_b


def mlp(x, fc_w, fc_b, proj_w, proj_b):
    h = F.gelu(x @ fc_w.t() + fc_b, approximate="tanh")
    return h @ proj_w.t() + proj_b


def forward(p, cfg, inputs, targets):
    """Mean cross-entropy loss of the model on inputs [B,T] against targets."""
    B, T = inputs.shape
    x = p["wte"][inputs] + p["wpe"][:T]
    for l in range(cfg["n_layer"]):
        q = "h%d." % l
        x = x + attention(layernorm(x, p[q + "ln_1.weight"], p[q + "ln_1.bias"]),
                          p[q + "attn.qkv.weight"], p[q + "attn.qkv.bias"],
                          p[q + "attn.proj.weight"], p[q + "attn.proj.bias"], cfg["n_head"])
        x = x + mlp(layernorm(x, p[q + "ln_2.weight"], p[q + "ln_2.bias"]),
                    p[q + "mlp.fc.weight"], p[q + "mlp.fc.bias"],
                    p[q + "mlp.proj.weight"], p[q + "mlp.proj.bias"])
    x = layernorm(x, p["lnf.weight"], p["lnf.bias"])
    logits = x @ p["wte"].t()
    return F.cross_entropy(logits.view(B * T, -1), targets.view(B * T))


def flat(tensors):
    return torch.cat([t.reshape(-1) for t in tensors])


def check_gradients(params, cfg, inputs, targets, grads):
    """Central finite differences on a few entries of several tensors; returns
    the worst relative error so a broken autograd path cannot go unnoticed."""
    h = 1e-6
    picks = [("wte", 5), ("wpe", 3), ("h0.attn.qkv.weight", 100), ("h0.attn.qkv.bias", 40),
             ("h1.mlp.fc.weight", 7), ("h1.ln_2.weight", 2), ("lnf.bias", 9)]
    worst = 0.0
    with torch.no_grad():
        for name, idx in picks:
            t = params[name].view(-1)
            old = t[idx].item()
            t[idx] = old + h
            lp = forward(params, cfg, inputs, targets).item()
            t[idx] = old - h
            lm = forward(params, cfg, inputs, targets).item()
            t[idx] = old
            fd = (lp - lm) / (2 * h)
            an = grads[name].view(-1)[idx].item()
            rel = abs(fd - an) / max(abs(fd), abs(an), 1e-8)
            print("  gradcheck %-20s[%4d] autograd % .10e  finite-diff % .10e  rel %.2e"
                  % (name, idx, an, fd, rel))
            worst = max(worst, rel)
    return worst


def adamw_trajectory(params, cfg, inputs, targets, n_steps):
    """Runs n_steps AdamW updates in float64 on copies; returns the loss before each."""
    specs = param_specs(cfg)
    live = {n: params[n].clone().requires_grad_(True) for n, _, _ in specs}
    decay = [live[n] for n, shape, _ in specs if len(shape) == 2]
    no_decay = [live[n] for n, shape, _ in specs if len(shape) != 2]
    opt = torch.optim.AdamW(
        [{"params": decay, "weight_decay": ADAMW["weight_decay"]},
         {"params": no_decay, "weight_decay": 0.0}],
        lr=ADAMW["lr"], betas=(ADAMW["beta1"], ADAMW["beta2"]), eps=ADAMW["eps"])
    losses = []
    for _ in range(n_steps):
        opt.zero_grad(set_to_none=True)
        loss = forward(live, cfg, inputs, targets)
        loss.backward()
        losses.append(loss.item())
        opt.step()
    return losses


def write_file(path, cfg, inputs, targets, params_flat, loss, grads_flat, losses):
    n = params_flat.numel()
    with open(path, "wb") as f:
        f.write(MAGIC)
        f.write(struct.pack("<7i", cfg["V"], cfg["maxT"], cfg["n_layer"], cfg["n_head"],
                            cfg["n_embd"], cfg["B"], cfg["T"]))
        f.write(struct.pack("<i", n))
        f.write(struct.pack("<%di" % inputs.numel(), *inputs.reshape(-1).tolist()))
        f.write(struct.pack("<%di" % targets.numel(), *targets.reshape(-1).tolist()))
        f.write(struct.pack("<%df" % n, *params_flat.tolist()))
        f.write(struct.pack("<f", loss))
        f.write(struct.pack("<%df" % n, *grads_flat.tolist()))
        f.write(struct.pack("<i", len(losses)))
        f.write(struct.pack("<5f", ADAMW["lr"], ADAMW["beta1"], ADAMW["beta2"], ADAMW["eps"],
                            ADAMW["weight_decay"]))
        f.write(struct.pack("<%df" % len(losses), *losses))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", required=True, help="output .bin path")
    args = ap.parse_args()

    cfg = CONFIG
    torch.manual_seed(0)
    params = init_params(cfg)
    inputs = torch.randint(0, cfg["V"], (cfg["B"], cfg["T"]), dtype=torch.int64)
    targets = torch.randint(0, cfg["V"], (cfg["B"], cfg["T"]), dtype=torch.int64)

    specs = param_specs(cfg)
    for t in params.values():
        t.requires_grad_(True)
    loss = forward(params, cfg, inputs, targets)
    loss.backward()
    grads = {n: params[n].grad.detach().clone() for n, _, _ in specs}
    for t in params.values():
        t.grad = None
        t.requires_grad_(False)

    print("loss %.10f  (ln V = %.6f)" % (loss.item(), math.log(cfg["V"])))
    worst = check_gradients(params, cfg, inputs, targets, grads)
    if worst > 1e-6:
        print("gradient check FAILED: worst relative error %.3e" % worst, file=sys.stderr)
        return 1
    print("gradient check ok: worst relative error %.2e" % worst)

    losses = adamw_trajectory(params, cfg, inputs, targets, N_STEPS)
    if abs(losses[0] - loss.item()) > 1e-12:
        print("trajectory loss 0 differs from the reference loss", file=sys.stderr)
        return 1
    print("adamw losses " + " ".join("%.6f" % x for x in losses))

    params_flat = flat([params[n] for n, _, _ in specs]).to(torch.float32)
    grads_flat = flat([grads[n] for n, _, _ in specs]).to(torch.float32)
    write_file(args.out, cfg, inputs, targets, params_flat, loss.item(), grads_flat, losses)
    print("wrote %s: n_params %d" % (args.out, params_flat.numel()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
