#!/usr/bin/python3
"""lora_reference.py — float64 PyTorch reference numbers for LoRA on GPT-2.

The model is gpt2_reference.py's (same config, same base parameters drawn
from seed 0), with LoRA adapters on every linear layer of every block: each
weight W [out, in] gets A [r, in] and B [out, r], and the layer computes

    y = x W^T + b + (alpha / r) * (x A^T) B^T

as PEFT's LoRA Linear does with lora_dropout 0. The base is frozen: only A
and B have gradients. A and B are both drawn non-zero here (PEFT starts B at
zero, which would leave A's gradient zero and the check blind to it).

Adapters are laid out as zerotrain lays them (worker/lora.h): after all base
parameters, for each block in order, for each adapted weight in the block's
order (attn.qkv, attn.proj, mlp.fc, mlp.proj), A then B, row-major.

AdamW trajectory: torch.optim.AdamW over the adapters only, lr 1e-2, betas
(0.9, 0.999), eps 1e-8, weight decay 0.1 (on A and B, matrices, as Hugging
Face's Trainer decays them), no clipping, n_steps steps on the same batch;
losses[i] is the loss before update i.

Before writing, the script checks autograd against central finite
differences on a few adapter entries (relative error at most 1e-6) and that
the base gets no gradient.

Binary file (little-endian):
  char[8]  "ZTLORA01"
  int32    V, maxT, n_layer, n_head, n_embd, B, T, r
  float32  alpha
  int32    n_base, n_adapter         (flat counts)
  int32    inputs[B*T], targets[B*T]
  float32  base[n_base]              (gpt2_reference.py's flat order)
  float32  adapters[n_adapter]       (the order above)
  float32  loss
  float32  grads[n_adapter]          (d loss / d adapters)
  int32    n_steps
  float32  losses[n_steps]

Usage: /usr/bin/python3 scripts/reference/lora_reference.py --out tests/data/lora_reference.bin
"""

import argparse
import math
import os
import struct
import sys

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gpt2_reference as g  # noqa: E402

MAGIC = b"ZTLORA01"
R = 4
ALPHA = 8.0
N_STEPS = 5
ADAPTED = ["attn.qkv", "attn.proj", "mlp.fc", "mlp.proj"]


def adapter_specs(cfg):
    C, L = cfg["n_embd"], cfg["n_layer"]
    shapes = {"attn.qkv": (3 * C, C), "attn.proj": (C, C), "mlp.fc": (4 * C, C),
              "mlp.proj": (C, 4 * C)}
    specs = []
    for l in range(L):
        for m in ADAPTED:
            out, inp = shapes[m]
            specs.append(("h%d.%s.lora_A" % (l, m), (R, inp)))
            specs.append(("h%d.%s.lora_B" % (l, m), (out, R)))
    return specs


def init_adapters(cfg):
    ad = {}
    for name, shape in adapter_specs(cfg):
        t = torch.empty(shape, dtype=torch.float32).normal_(0.0, 0.2)
        ad[name] = t.to(torch.float64)
    return ad


def linear(x, p, ad, name):
    """The adapted linear layer `name` ("h0.attn.qkv") of the block."""
    y = x @ p[name + ".weight"].t() + p[name + ".bias"]
    return y + (ALPHA / R) * ((x @ ad[name + ".lora_A"].t()) @ ad[name + ".lora_B"].t())


def forward(p, ad, cfg, inputs, targets):
    B, T = inputs.shape
    C, NH = cfg["n_embd"], cfg["n_head"]
    hs = C // NH
    x = p["wte"][inputs] + p["wpe"][:T]
    causal = torch.ones(T, T, dtype=torch.bool).tril()
    for l in range(cfg["n_layer"]):
        q = "h%d." % l
        a = g.layernorm(x, p[q + "ln_1.weight"], p[q + "ln_1.bias"])
        qkv = linear(a, p, ad, q + "attn.qkv")
        qq, kk, vv = (t.view(B, T, NH, hs).transpose(1, 2) for t in qkv.split(C, dim=-1))
        scores = (qq @ kk.transpose(-2, -1)) / math.sqrt(hs)
        y = torch.softmax(scores.masked_fill(~causal, float("-inf")), dim=-1) @ vv
        x = x + linear(y.transpose(1, 2).contiguous().view(B, T, C), p, ad, q + "attn.proj")
        m = g.layernorm(x, p[q + "ln_2.weight"], p[q + "ln_2.bias"])
        h = F.gelu(linear(m, p, ad, q + "mlp.fc"), approximate="tanh")
        x = x + linear(h, p, ad, q + "mlp.proj")
    x = g.layernorm(x, p["lnf.weight"], p["lnf.bias"])
    logits = x @ p["wte"].t()
    return F.cross_entropy(logits.view(B * T, -1), targets.view(B * T))


def check_gradients(p, ad, cfg, inputs, targets, grads):
    h = 1e-6
    picks = [("h0.attn.qkv.lora_A", 3), ("h0.attn.qkv.lora_B", 17), ("h1.mlp.proj.lora_A", 40),
             ("h1.mlp.fc.lora_B", 9), ("h0.attn.proj.lora_B", 5)]
    worst = 0.0
    with torch.no_grad():
        for name, idx in picks:
            t = ad[name].view(-1)
            old = t[idx].item()
            t[idx] = old + h
            lp = forward(p, ad, cfg, inputs, targets).item()
            t[idx] = old - h
            lm = forward(p, ad, cfg, inputs, targets).item()
            t[idx] = old
            fd = (lp - lm) / (2 * h)
            an = grads[name].view(-1)[idx].item()
            rel = abs(fd - an) / max(abs(fd), abs(an), 1e-8)
            print("  gradcheck %-22s[%3d] autograd % .10e  finite-diff % .10e  rel %.2e"
                  % (name, idx, an, fd, rel))
            worst = max(worst, rel)
    return worst


def trajectory(p, ad, cfg, inputs, targets):
    live = {n: ad[n].clone().requires_grad_(True) for n, _ in adapter_specs(cfg)}
    opt = torch.optim.AdamW(list(live.values()), lr=g.ADAMW["lr"],
                            betas=(g.ADAMW["beta1"], g.ADAMW["beta2"]), eps=g.ADAMW["eps"],
                            weight_decay=g.ADAMW["weight_decay"])
    losses = []
    for _ in range(N_STEPS):
        opt.zero_grad(set_to_none=True)
        loss = forward(p, live, cfg, inputs, targets)
        loss.backward()
        losses.append(loss.item())
        opt.step()
    return losses


def pack(f, fmt, values):
    f.write(struct.pack("<%d%s" % (len(values), fmt), *values))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", required=True, help="output .bin path")
    args = ap.parse_args()

    cfg = g.CONFIG
    torch.manual_seed(0)
    p = g.init_params(cfg)
    inputs = torch.randint(0, cfg["V"], (cfg["B"], cfg["T"]), dtype=torch.int64)
    targets = torch.randint(0, cfg["V"], (cfg["B"], cfg["T"]), dtype=torch.int64)
    ad = init_adapters(cfg)

    for t in list(p.values()) + list(ad.values()):
        t.requires_grad_(True)
    for t in p.values():
        t.requires_grad_(False)
    loss = forward(p, ad, cfg, inputs, targets)
    loss.backward()
    grads = {n: ad[n].grad.detach().clone() for n, _ in adapter_specs(cfg)}
    for t in ad.values():
        t.grad = None
        t.requires_grad_(False)
    if any(t.grad is not None for t in p.values()):
        print("the base got a gradient", file=sys.stderr)
        return 1

    print("loss %.10f" % loss.item())
    worst = check_gradients(p, ad, cfg, inputs, targets, grads)
    if worst > 1e-6:
        print("gradient check FAILED: worst relative error %.3e" % worst, file=sys.stderr)
        return 1
    losses = trajectory(p, ad, cfg, inputs, targets)
    if abs(losses[0] - loss.item()) > 1e-12:
        print("trajectory loss 0 differs from the reference loss", file=sys.stderr)
        return 1
    print("adamw losses " + " ".join("%.6f" % x for x in losses))

    base = g.flat([p[n] for n, _, _ in g.param_specs(cfg)]).to(torch.float32)
    names = [n for n, _ in adapter_specs(cfg)]
    adapters = g.flat([ad[n] for n in names]).to(torch.float32)
    gflat = g.flat([grads[n] for n in names]).to(torch.float32)
    with open(args.out, "wb") as f:
        f.write(MAGIC)
        pack(f, "i", [cfg["V"], cfg["maxT"], cfg["n_layer"], cfg["n_head"], cfg["n_embd"],
                      cfg["B"], cfg["T"], R])
        pack(f, "f", [ALPHA])
        pack(f, "i", [base.numel(), adapters.numel()])
        pack(f, "i", inputs.reshape(-1).tolist())
        pack(f, "i", targets.reshape(-1).tolist())
        pack(f, "f", base.tolist())
        pack(f, "f", adapters.tolist())
        pack(f, "f", [loss.item()])
        pack(f, "f", gflat.tolist())
        pack(f, "i", [len(losses)])
        pack(f, "f", losses)
    print("wrote %s: %d base, %d adapter parameters" % (args.out, base.numel(), adapters.numel()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
