#!/usr/bin/python3
"""torch_gpt2.py — PyTorch side of the zerotrain throughput benchmark.

With --family llama it trains the same Llama-style decoder as zerotrain
instead (RMSNorm eps 1e-5, rotary embedding in Hugging Face's rotate-half
form, grouped-query attention with --n-kv-head heads repeated as repeat_kv
does, SwiGLU MLP of --intermediate columns, no biases, untied head), the
model written out as Hugging Face's LlamaForCausalLM computes it.

By default it trains the same GPT-2 as zerotrain (pre-LayerNorm blocks, fused qkv, GELU
tanh, tied head, learned positions) in float32 on CPU, with the same
optimizer setup (AdamW, betas 0.9/0.999, weight decay 0.01 on 2-D tensors
only, gradient clipping at norm 1.0), and reports the median step time so
that the two implementations can be compared at equal work. It runs alone
or as one rank of several started by `mpirun -np N` (no torchrun): the rank
and world size come from Open MPI's environment, ranks meet over gloo on
127.0.0.1, and DistributedDataParallel averages gradients. Each rank uses
--threads intra-op threads (default 1, matching one zerotrain worker per
core).

Data: a zerotrain token file (40-byte header, see data/data.h), parsed and
verified here with struct; each rank draws its own random windows of
seq_len + 1 tokens. Windows are drawn before the clock starts, so the step
time covers zero_grad, forward, backward (with the gradient all-reduce,
which DDP overlaps with it), clipping and the optimizer step.

With --zero1 (several ranks) the optimizer is torch.distributed.optim's
ZeroRedundancyOptimizer over AdamW: each rank keeps and updates its shard
of the optimizer state and broadcasts its updated parameters, PyTorch's
ZeRO stage 1, still under DDP's gradient all-reduce.

Output on rank 0, one line each:
  torch ms_per_step=<median ms> tokens_per_s=<global tokens per second>
  torch breakdown fwd_ms=... bwd_ms=... opt_ms=... (medians; bwd includes
      the all-reduce) plus the parameter count, ranks, threads and rank 0's
      first and last training loss (a sanity check that it learns).
  torch memory rss_peak_mib=... import_mib=... (rank 0's peak resident
      memory, and what it was once torch was imported, before any model:
      the difference is what training used)

Usage:
  /usr/bin/python3 scripts/bench/torch_gpt2.py --tokens FILE --n-layer 4 --n-head 4 \
      --n-embd 128 --seq-len 128 --block-size 128 --vocab 256 --micro-batch 8 \
      --steps 20 --warmup 3 --lr 1e-3
  mpirun -np 2 /usr/bin/python3 scripts/bench/torch_gpt2.py ...   (same options)
"""

import argparse
import math
import os
import resource
import statistics
import struct
import sys
import time

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

# Resident memory once torch is imported: the interpreter and the library,
# which a C program does not carry.
IMPORT_RSS_KIB = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss

TOKFILE_MAGIC = b"ZTTOKENS"
TOKFILE_VERSION = 1
TOKFILE_HEADER = struct.Struct("<8sIIIIQQ")  # magic, version, width, vocab, reserved, count, fnv
FNV_OFFSET = 0xCBF29CE484222325
FNV_PRIME = 0x100000001B3
MASK64 = 0xFFFFFFFFFFFFFFFF


def fnv1a64(data):
    h = FNV_OFFSET
    for b in data:
        h = ((h ^ b) * FNV_PRIME) & MASK64
    return h


def read_tokens(path, vocab, verify_checksum):
    """Reads and checks a zerotrain token file; returns an int64 tensor of ids."""
    with open(path, "rb") as f:
        raw = f.read()
    if len(raw) < TOKFILE_HEADER.size:
        raise ValueError("%s: shorter than the %d-byte header" % (path, TOKFILE_HEADER.size))
    magic, version, width, file_vocab, reserved, count, checksum = TOKFILE_HEADER.unpack_from(raw)
    if magic != TOKFILE_MAGIC:
        raise ValueError("%s: magic: not a token file" % path)
    if version != TOKFILE_VERSION:
        raise ValueError("%s: version: %d, expected %d" % (path, version, TOKFILE_VERSION))
    if width not in (1, 2):
        raise ValueError("%s: width: %d, expected 1 or 2" % (path, width))
    if reserved != 0:
        raise ValueError("%s: reserved: %d, expected 0" % (path, reserved))
    body = memoryview(raw)[TOKFILE_HEADER.size:]
    if len(body) != count * width:
        raise ValueError("%s: size: %d token bytes, header says %d tokens of width %d"
                         % (path, len(body), count, width))
    if verify_checksum and fnv1a64(body) != checksum:
        raise ValueError("%s: checksum: FNV-1a 64 of the tokens does not match" % path)
    ids = np.frombuffer(body, dtype=np.uint8 if width == 1 else np.dtype("<u2"))
    tokens = torch.from_numpy(ids.astype(np.int64))
    if file_vocab > vocab:
        raise ValueError("%s: vocab: file made for %d ids, model has %d" % (path, file_vocab, vocab))
    if count and int(tokens.max()) >= file_vocab:
        raise ValueError("%s: tokens: id %d >= vocab %d" % (path, int(tokens.max()), file_vocab))
    return tokens


class Attention(nn.Module):
    def __init__(self, n_embd, n_head):
        super().__init__()
        self.n_head = n_head
        self.qkv = nn.Linear(n_embd, 3 * n_embd)
        self.proj = nn.Linear(n_embd, n_embd)

    def forward(self, x, causal):
        B, T, C = x.shape
        hs = C // self.n_head
        q, k, v = self.qkv(x).split(C, dim=-1)
        q = q.view(B, T, self.n_head, hs).transpose(1, 2)
        k = k.view(B, T, self.n_head, hs).transpose(1, 2)
        v = v.view(B, T, self.n_head, hs).transpose(1, 2)
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(hs))
        att = att.masked_fill(~causal[:T, :T], float("-inf"))
        y = torch.softmax(att, dim=-1) @ v
        return self.proj(y.transpose(1, 2).contiguous().view(B, T, C))


class Mlp(nn.Module):
    def __init__(self, n_embd):
        super().__init__()
        self.fc = nn.Linear(n_embd, 4 * n_embd)
        self.proj = nn.Linear(4 * n_embd, n_embd)

    def forward(self, x):
        return self.proj(F.gelu(self.fc(x), approximate="tanh"))


class Block(nn.Module):
    def __init__(self, n_embd, n_head):
        super().__init__()
        self.ln_1 = nn.LayerNorm(n_embd, eps=1e-5)
        self.attn = Attention(n_embd, n_head)
        self.ln_2 = nn.LayerNorm(n_embd, eps=1e-5)
        self.mlp = Mlp(n_embd)

    def forward(self, x, causal):
        x = x + self.attn(self.ln_1(x), causal)
        return x + self.mlp(self.ln_2(x))


class Gpt2(nn.Module):
    def __init__(self, vocab, block_size, n_layer, n_head, n_embd):
        super().__init__()
        self.wte = nn.Embedding(vocab, n_embd)
        self.wpe = nn.Embedding(block_size, n_embd)
        self.h = nn.ModuleList([Block(n_embd, n_head) for _ in range(n_layer)])
        self.lnf = nn.LayerNorm(n_embd, eps=1e-5)
        # A plain attribute, not a buffer: DDP would re-broadcast a buffer
        # every step and charge that to the benchmark.
        self.causal = torch.ones(block_size, block_size, dtype=torch.bool).tril()
        self.init_gpt2(n_layer)

    def init_gpt2(self, n_layer):
        """GPT-2 init: N(0, 0.02) for matrices and embeddings, zero biases,
        residual projections scaled by 1/sqrt(2 n_layer)."""
        for name, p in self.named_parameters():
            if p.dim() == 2:
                std = 0.02
                if name.endswith("attn.proj.weight") or name.endswith("mlp.proj.weight"):
                    std /= math.sqrt(2 * n_layer)
                nn.init.normal_(p, 0.0, std)
            elif name.endswith("bias"):
                nn.init.zeros_(p)  # LayerNorm weights keep their default of one

    def forward(self, idx, targets):
        B, T = idx.shape
        x = self.wte(idx) + self.wpe.weight[:T]
        for block in self.h:
            x = block(x, self.causal)
        logits = F.linear(self.lnf(x), self.wte.weight)
        return F.cross_entropy(logits.view(B * T, -1), targets.reshape(B * T))


class LlamaAttention(nn.Module):
    def __init__(self, n_embd, n_head, n_kv_head):
        super().__init__()
        self.n_head, self.n_kv_head, self.hs = n_head, n_kv_head, n_embd // n_head
        self.q_proj = nn.Linear(n_embd, n_head * self.hs, bias=False)
        self.k_proj = nn.Linear(n_embd, n_kv_head * self.hs, bias=False)
        self.v_proj = nn.Linear(n_embd, n_kv_head * self.hs, bias=False)
        self.o_proj = nn.Linear(n_head * self.hs, n_embd, bias=False)

    @staticmethod
    def rotate_half(x):
        x1, x2 = x.chunk(2, dim=-1)
        return torch.cat((-x2, x1), dim=-1)

    def forward(self, x, causal, cos, sin):
        B, T, _ = x.shape
        q = self.q_proj(x).view(B, T, self.n_head, self.hs).transpose(1, 2)
        k = self.k_proj(x).view(B, T, self.n_kv_head, self.hs).transpose(1, 2)
        v = self.v_proj(x).view(B, T, self.n_kv_head, self.hs).transpose(1, 2)
        q = q * cos[:T] + self.rotate_half(q) * sin[:T]
        k = k * cos[:T] + self.rotate_half(k) * sin[:T]
        group = self.n_head // self.n_kv_head
        k = k.repeat_interleave(group, dim=1)
        v = v.repeat_interleave(group, dim=1)
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(self.hs))
        att = att.masked_fill(~causal[:T, :T], float("-inf"))
        y = torch.softmax(att, dim=-1) @ v
        return self.o_proj(y.transpose(1, 2).contiguous().view(B, T, -1))


class RmsNorm(nn.Module):
    def __init__(self, n, eps=1e-5):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(n))
        self.eps = eps

    def forward(self, x):
        return self.weight * (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps))


class LlamaBlock(nn.Module):
    def __init__(self, n_embd, n_head, n_kv_head, intermediate):
        super().__init__()
        self.input_layernorm = RmsNorm(n_embd)
        self.self_attn = LlamaAttention(n_embd, n_head, n_kv_head)
        self.post_attention_layernorm = RmsNorm(n_embd)
        self.gate_proj = nn.Linear(n_embd, intermediate, bias=False)
        self.up_proj = nn.Linear(n_embd, intermediate, bias=False)
        self.down_proj = nn.Linear(intermediate, n_embd, bias=False)

    def forward(self, x, causal, cos, sin):
        x = x + self.self_attn(self.input_layernorm(x), causal, cos, sin)
        h = self.post_attention_layernorm(x)
        return x + self.down_proj(F.silu(self.gate_proj(h)) * self.up_proj(h))


class Llama(nn.Module):
    def __init__(self, vocab, block_size, n_layer, n_head, n_kv_head, n_embd, intermediate, theta):
        super().__init__()
        self.embed_tokens = nn.Embedding(vocab, n_embd)
        self.layers = nn.ModuleList([LlamaBlock(n_embd, n_head, n_kv_head, intermediate)
                                     for _ in range(n_layer)])
        self.norm = RmsNorm(n_embd)
        self.lm_head = nn.Linear(n_embd, vocab, bias=False)
        self.causal = torch.ones(block_size, block_size, dtype=torch.bool).tril()
        hs = n_embd // n_head
        inv_freq = 1.0 / (theta ** (torch.arange(0, hs, 2, dtype=torch.float32) / hs))
        angles = torch.arange(block_size, dtype=torch.float32)[:, None] * inv_freq[None, :]
        emb = torch.cat((angles, angles), dim=-1)
        self.cos, self.sin = emb.cos(), emb.sin()  # plain attributes, as causal
        for p in self.parameters():
            if p.dim() == 2:
                nn.init.normal_(p, 0.0, 0.02)

    def forward(self, idx, targets):
        B, T = idx.shape
        x = self.embed_tokens(idx)
        for layer in self.layers:
            x = layer(x, self.causal, self.cos, self.sin)
        logits = self.lm_head(self.norm(x))
        return F.cross_entropy(logits.view(B * T, -1), targets.reshape(B * T))


def parse_args(argv):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--tokens", required=True, help="zerotrain token file")
    ap.add_argument("--family", choices=("gpt2", "llama"), default="gpt2")
    ap.add_argument("--n-kv-head", type=int, default=0, help="llama: default --n-head")
    ap.add_argument("--intermediate", type=int, default=0, help="llama: the SwiGLU width")
    ap.add_argument("--rope-theta", type=float, default=10000.0)
    ap.add_argument("--n-layer", type=int, required=True)
    ap.add_argument("--n-head", type=int, required=True)
    ap.add_argument("--n-embd", type=int, required=True)
    ap.add_argument("--seq-len", type=int, required=True)
    ap.add_argument("--block-size", type=int, default=0, help="default: seq-len")
    ap.add_argument("--vocab", type=int, default=256)
    ap.add_argument("--micro-batch", type=int, required=True, help="sequences per rank per step")
    ap.add_argument("--steps", type=int, default=20, help="timed steps")
    ap.add_argument("--warmup", type=int, default=3, help="untimed steps first")
    ap.add_argument("--lr", type=float, default=1e-3)
    ap.add_argument("--threads", type=int, default=1, help="intra-op threads per rank")
    ap.add_argument("--port", type=int, default=29533, help="rendezvous port on 127.0.0.1")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--zero1", action="store_true",
                    help="ZeroRedundancyOptimizer (ZeRO stage 1) over AdamW; needs several ranks")
    ap.add_argument("--no-checksum", action="store_true", help="skip the FNV-1a check (big files)")
    ap.add_argument("--losses", default="",
                    help="rank 0 writes each step's training loss here, one per line")
    ap.add_argument("--bf16", action="store_true",
                    help="forward under torch.autocast('cpu', bfloat16): bf16 GEMMs with fp32 "
                         "weights and optimizer, what a PyTorch user runs on a CPU with bf16")
    a = ap.parse_args(argv)
    if a.block_size == 0:
        a.block_size = a.seq_len
    if a.n_kv_head == 0:
        a.n_kv_head = a.n_head
    if a.family == "llama" and (a.intermediate < 1 or a.n_head % a.n_kv_head != 0):
        ap.error("llama needs --intermediate >= 1 and --n-head a multiple of --n-kv-head")
    if a.n_embd % a.n_head != 0:
        ap.error("--n-embd must be a multiple of --n-head")
    if a.seq_len > a.block_size:
        ap.error("--seq-len must be <= --block-size")
    if min(a.n_layer, a.n_head, a.n_embd, a.seq_len, a.micro_batch, a.steps, a.threads) < 1:
        ap.error("sizes, --steps and --threads must be >= 1")
    if a.warmup < 0:
        ap.error("--warmup must be >= 0")
    return a


def world_from_env():
    rank = int(os.environ.get("OMPI_COMM_WORLD_RANK", os.environ.get("RANK", "0")))
    size = int(os.environ.get("OMPI_COMM_WORLD_SIZE", os.environ.get("WORLD_SIZE", "1")))
    return rank, size


def make_optimizer(model, lr, zero1):
    decay = [p for p in model.parameters() if p.dim() >= 2]
    no_decay = [p for p in model.parameters() if p.dim() < 2]
    groups = [{"params": decay, "weight_decay": 0.01}, {"params": no_decay, "weight_decay": 0.0}]
    if zero1:
        from torch.distributed.optim import ZeroRedundancyOptimizer
        return ZeroRedundancyOptimizer(groups, optimizer_class=torch.optim.AdamW, lr=lr,
                                       betas=(0.9, 0.999), eps=1e-8)
    return torch.optim.AdamW(groups, lr=lr, betas=(0.9, 0.999), eps=1e-8)


def draw_batches(tokens, n, B, T, seed):
    """n batches of B random windows of T + 1 tokens: (inputs, targets) pairs."""
    if tokens.numel() < T + 1:
        raise ValueError("token file holds %d tokens, need at least %d" % (tokens.numel(), T + 1))
    g = torch.Generator().manual_seed(seed)
    offs = torch.arange(T + 1)
    out = []
    for _ in range(n):
        starts = torch.randint(0, tokens.numel() - T, (B,), generator=g)
        w = tokens[starts[:, None] + offs]
        out.append((w[:, :-1].contiguous(), w[:, 1:].contiguous()))
    return out


def train_step(model, opt, params, x, y, bf16):
    """One optimizer step; returns (fwd, bwd, opt) seconds and the loss tensor."""
    t0 = time.perf_counter()
    opt.zero_grad(set_to_none=True)
    with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
        loss = model(x, y)
    t1 = time.perf_counter()
    loss.backward()
    t2 = time.perf_counter()
    torch.nn.utils.clip_grad_norm_(params, 1.0)
    opt.step()
    t3 = time.perf_counter()
    return (t1 - t0, t2 - t1, t3 - t2), loss.detach()


def main(argv):
    a = parse_args(argv)
    rank, world = world_from_env()
    torch.set_num_threads(a.threads)
    try:
        torch.set_num_interop_threads(1)
    except RuntimeError:
        pass

    dist = None
    if world > 1:
        import torch.distributed as dist
        # Every rank is on this host: keep gloo off whatever the hostname resolves to.
        os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")
        dist.init_process_group("gloo", init_method="tcp://127.0.0.1:%d" % a.port,
                                rank=rank, world_size=world)

    tokens = read_tokens(a.tokens, a.vocab, not a.no_checksum)
    torch.manual_seed(a.seed)
    if a.family == "llama":
        model = Llama(a.vocab, a.block_size, a.n_layer, a.n_head, a.n_kv_head, a.n_embd,
                      a.intermediate, a.rope_theta)
    else:
        model = Gpt2(a.vocab, a.block_size, a.n_layer, a.n_head, a.n_embd)
    n_params = sum(p.numel() for p in model.parameters())
    params = list(model.parameters())
    if a.zero1 and dist is None:
        raise ValueError("--zero1 needs several ranks (mpirun -np N)")
    opt = make_optimizer(model, a.lr, a.zero1)
    if dist is not None:
        model = nn.parallel.DistributedDataParallel(model, broadcast_buffers=False)
    model.train()

    batches = draw_batches(tokens, a.warmup + a.steps, a.micro_batch, a.seq_len,
                           a.seed * 1000003 + rank)
    times, losses = [], []
    for i, (x, y) in enumerate(batches):
        t, loss = train_step(model, opt, params, x, y, a.bf16)
        losses.append(loss)
        if i >= a.warmup:
            times.append(t)
    if dist is not None:
        dist.barrier()

    if rank == 0:
        fwd = statistics.median(t[0] for t in times) * 1e3
        bwd = statistics.median(t[1] for t in times) * 1e3
        upd = statistics.median(t[2] for t in times) * 1e3
        step = statistics.median(sum(t) for t in times) * 1e3
        tok_s = world * a.micro_batch * a.seq_len / (step / 1e3)
        print("torch ms_per_step=%.3f tokens_per_s=%.1f" % (step, tok_s))
        print("torch breakdown fwd_ms=%.3f bwd_ms=%.3f opt_ms=%.3f params=%d ranks=%d threads=%d"
              " loss_first=%.4f loss_last=%.4f precision=%s"
              % (fwd, bwd, upd, n_params, world, a.threads, losses[0].item(), losses[-1].item(),
                 "bf16-autocast" if a.bf16 else "fp32"))
        if a.losses:
            with open(a.losses, "w") as f:
                f.writelines("%.8f\n" % l.item() for l in losses)
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        print("torch memory rss_peak_mib=%.1f import_mib=%.1f" % (peak / 1024, IMPORT_RSS_KIB / 1024))
        sys.stdout.flush()
    # No destroy_process_group(): with gloo on torch 1.13, a rank still
    # tearing down after rank 0 (the rendezvous store's host) has exited can
    # spin forever; leaving teardown to process exit after the barrier
    # above does not.
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main(sys.argv[1:]))
    except (OSError, ValueError) as e:
        print("torch_gpt2.py: error: %s" % e, file=sys.stderr)
        sys.exit(1)
