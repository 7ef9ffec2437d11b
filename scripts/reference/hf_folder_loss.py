#!/usr/bin/python3
"""hf_folder_loss.py — load a save_pretrained-style folder the way a user
would, from its config.json alone, and compute a loss with PyTorch.

What from_pretrained(DIR) needs of a folder: config.json naming the
architecture (model_type, architectures) and the shape under the config
class's names, and the weights (model.safetensors, or an index and its
shards) under the state-dict names of that architecture. This script knows
nothing of zerotrain: it builds GPT2LMHeadModel or LlamaForCausalLM's
forward from those names and Hugging Face's definitions (GPT-2: Conv1D
weights [in, out], tanh GELU, LayerNorm with layer_norm_epsilon, tied
head; Llama: RMSNorm with rms_norm_eps, rotary embeddings with
rope_theta in the rotate-half form, SiLU-gated MLP, grouped-query
attention, a head tied or lm_head.weight; Qwen2: Llama's with biases on
q_proj, k_proj and v_proj), in float64.

The data is a byte file cut into consecutive windows of seq_len + 1 bytes
(window w: inputs bytes w*T .. w*T+T-1, targets the next T), the ids being
the bytes. Prints the mean cross-entropy over every target of every
window, as `loss X`.

Reads (and, for the scripts that build folders, writes) safetensors with
the standard library and torch (no transformers or safetensors package
needed).

Usage: /usr/bin/python3 scripts/reference/hf_folder_loss.py DIR DATA SEQ_LEN
"""
import json
import math
import os
import struct
import sys

import torch

DTYPES = {"F32": torch.float32, "F16": torch.float16, "BF16": torch.bfloat16}


def read_safetensors(path):
    with open(path, "rb") as f:
        blob = f.read()
    (n,) = struct.unpack("<Q", blob[:8])
    header = json.loads(blob[8:8 + n])
    body = blob[8 + n:]
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        begin, end = info["data_offsets"]
        t = torch.frombuffer(bytearray(body[begin:end]), dtype=DTYPES[info["dtype"]])
        out[name] = t.reshape(info["shape"]).to(torch.float64)
    return out


def write_safetensors(path, ts):
    """ts (name -> tensor) as one float32 file, laid out as the safetensors
    library writes it: names sorted, compact JSON padded to 8 bytes."""
    header, body = {"__metadata__": {"format": "pt"}}, b""
    for name in sorted(ts):
        data = ts[name].detach().to(torch.float32).contiguous().numpy().astype("<f4").tobytes()
        header[name] = {"dtype": "F32", "shape": list(ts[name].shape),
                        "data_offsets": [len(body), len(body) + len(data)]}
        body += data
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text + body)


def read_weights(folder):
    index = os.path.join(folder, "model.safetensors.index.json")
    if os.path.exists(index):
        with open(index) as f:
            files = sorted(set(json.load(f)["weight_map"].values()))
    else:
        files = ["model.safetensors"]
    weights = {}
    for name in files:
        weights.update(read_safetensors(os.path.join(folder, name)))
    return weights


def strip(weights, prefix):
    """Names without the base model's prefix, as from_pretrained accepts both."""
    return {k[len(prefix):] if k.startswith(prefix) else k: v for k, v in weights.items()}


def causal_attention(q, k, v):
    T, hs = q.shape[1], q.shape[2]
    att = q @ k.transpose(1, 2) / math.sqrt(hs)
    mask = torch.triu(torch.ones(T, T, dtype=torch.bool), diagonal=1)
    att = att.masked_fill(mask, float("-inf")).softmax(-1)
    return att @ v


def gpt2_logits(cfg, w, ids):
    w = strip(w, "transformer.")
    C, H, eps = cfg["n_embd"], cfg["n_head"], cfg["layer_norm_epsilon"]
    assert cfg["activation_function"] == "gelu_new"
    T = ids.shape[0]
    ln = lambda x, p: torch.nn.functional.layer_norm(x, (C,), w[p + ".weight"], w[p + ".bias"], eps)
    x = w["wte.weight"][ids] + w["wpe.weight"][:T]
    for i in range(cfg["n_layer"]):
        p = "h.%d." % i
        qkv = ln(x, p + "ln_1") @ w[p + "attn.c_attn.weight"] + w[p + "attn.c_attn.bias"]
        q, k, v = (t.reshape(T, H, C // H).transpose(0, 1) for t in qkv.split(C, dim=1))
        y = causal_attention(q, k, v).transpose(0, 1).reshape(T, C)
        x = x + y @ w[p + "attn.c_proj.weight"] + w[p + "attn.c_proj.bias"]
        h = ln(x, p + "ln_2") @ w[p + "mlp.c_fc.weight"] + w[p + "mlp.c_fc.bias"]
        h = torch.nn.functional.gelu(h, approximate="tanh")
        x = x + h @ w[p + "mlp.c_proj.weight"] + w[p + "mlp.c_proj.bias"]
    x = ln(x, "ln_f")
    head = w.get("lm_head.weight", w["wte.weight"])
    return x @ head.T


def rmsnorm(x, g, eps):
    return x * torch.rsqrt((x * x).mean(-1, keepdim=True) + eps) * g


def rotate_half(x):
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


def linear(w, name, x, bias):
    """nn.Linear: x W^T, plus the bias where the architecture has one (as
    from_pretrained does, a bias in the file that the class lacks is unused)."""
    y = x @ w[name + ".weight"].T
    return y + w[name + ".bias"] if bias else y


def llama_logits(cfg, w, ids, qkv_bias=None):
    """LlamaForCausalLM's forward; attention_bias puts biases on q, k, v and
    o, Qwen2 (qkv_bias) on q, k and v only."""
    w = strip(w, "model.")
    o_bias = cfg.get("attention_bias", False)
    qkv_bias = o_bias if qkv_bias is None else qkv_bias
    C, H = cfg["hidden_size"], cfg["num_attention_heads"]
    KV = cfg.get("num_key_value_heads", H)
    hs, eps, T = C // H, cfg["rms_norm_eps"], ids.shape[0]
    assert cfg.get("hidden_act", "silu") == "silu" and not cfg.get("rope_scaling")
    inv = 1.0 / (cfg.get("rope_theta", 10000.0) ** (torch.arange(0, hs, 2, dtype=torch.float64) / hs))
    ang = torch.outer(torch.arange(T, dtype=torch.float64), inv)
    cos, sin = torch.cat((ang, ang), -1).cos(), torch.cat((ang, ang), -1).sin()
    rope = lambda t: t * cos + rotate_half(t) * sin
    x = w["embed_tokens.weight"][ids]
    for i in range(cfg["num_hidden_layers"]):
        p = "layers.%d." % i
        h = rmsnorm(x, w[p + "input_layernorm.weight"], eps)
        q = linear(w, p + "self_attn.q_proj", h, qkv_bias).reshape(T, H, hs).transpose(0, 1)
        k = linear(w, p + "self_attn.k_proj", h, qkv_bias).reshape(T, KV, hs).transpose(0, 1)
        v = linear(w, p + "self_attn.v_proj", h, qkv_bias).reshape(T, KV, hs).transpose(0, 1)
        k, v = k.repeat_interleave(H // KV, 0), v.repeat_interleave(H // KV, 0)
        y = causal_attention(rope(q), rope(k), v).transpose(0, 1).reshape(T, C)
        x = x + linear(w, p + "self_attn.o_proj", y, o_bias)
        h = rmsnorm(x, w[p + "post_attention_layernorm.weight"], eps)
        g = torch.nn.functional.silu(h @ w[p + "mlp.gate_proj.weight"].T)
        x = x + (g * (h @ w[p + "mlp.up_proj.weight"].T)) @ w[p + "mlp.down_proj.weight"].T
    x = rmsnorm(x, w["norm.weight"], eps)
    tied = cfg.get("tie_word_embeddings", True)
    head = w["embed_tokens.weight"] if tied else w["lm_head.weight"]
    return x @ head.T


def qwen2_logits(cfg, w, ids):
    assert not cfg.get("use_sliding_window", False)
    return llama_logits(cfg, w, ids, qkv_bias=True)


ARCHITECTURES = {"gpt2": gpt2_logits, "llama": llama_logits, "qwen2": qwen2_logits}


def main():
    folder, data, seq_len = sys.argv[1], sys.argv[2], int(sys.argv[3])
    with open(os.path.join(folder, "config.json")) as f:
        cfg = json.load(f)
    logits_of = ARCHITECTURES[cfg["model_type"]]
    weights = read_weights(folder)
    with open(data, "rb") as f:
        tokens = torch.tensor(list(f.read()), dtype=torch.long)
    windows = (tokens.numel() - 1) // seq_len
    total = 0.0
    for i in range(windows):
        chunk = tokens[i * seq_len:i * seq_len + seq_len + 1]
        logits = logits_of(cfg, weights, chunk[:-1])
        total += torch.nn.functional.cross_entropy(logits, chunk[1:], reduction="sum").item()
    print("loss %.9f" % (total / (windows * seq_len)))


if __name__ == "__main__":
    main()
