#!/usr/bin/python3
"""qwen2_train.py — a small Qwen2ForCausalLM folder, and the losses PyTorch
trains it to, for zerotrain's Qwen2 check.

  init DIR [--tied] [--seed N]
      writes DIR/config.json (a Qwen2Config as transformers writes its keys:
      rope_theta 1e6, rms_norm_eps 1e-6, no sliding window) and
      DIR/model.safetensors with random float32 weights under Qwen2's
      state-dict names, q, k and v with biases; lm_head.weight unless
      --tied.
  train DIR DATA SEQ_LEN STEPS LR
      full-batch gradient descent in float64 from DIR's weights: the byte
      file DATA cut into windows of SEQ_LEN + 1 bytes (window w: inputs
      w*T .. w*T+T-1, targets the next T; as zerotrain's sampler cuts a
      token file), the loss the mean cross-entropy over every target of
      every window, then each parameter -= LR * its gradient. Prints
      `step S loss X` for S = 1 .. STEPS (the loss before update S, as
      zerotrain logs it) and `final X`, the loss after the last update.

The forward is hf_folder_loss.py's (from config.json and the safetensors
names alone; no transformers). Usage: /usr/bin/python3 qwen2_train.py ...
"""
import json
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import hf_folder_loss  # noqa: E402

SHAPE = {"vocab_size": 256, "hidden_size": 64, "intermediate_size": 96, "num_hidden_layers": 2,
         "num_attention_heads": 4, "num_key_value_heads": 2, "max_position_embeddings": 64}


def config(tied):
    c = {"architectures": ["Qwen2ForCausalLM"], "model_type": "qwen2", "hidden_act": "silu",
         "rms_norm_eps": 1e-6, "rope_theta": 1000000.0, "rope_scaling": None,
         "tie_word_embeddings": tied, "use_sliding_window": False, "sliding_window": 4096,
         "max_window_layers": 28, "attention_dropout": 0.0, "initializer_range": 0.02,
         "torch_dtype": "float32", "bos_token_id": 0, "eos_token_id": 1}
    c.update(SHAPE)
    return c


def tensors(cfg, tied, gen):
    C, I, V = cfg["hidden_size"], cfg["intermediate_size"], cfg["vocab_size"]
    hs = C // cfg["num_attention_heads"]
    KV = cfg["num_key_value_heads"] * hs
    normal = lambda *shape, std=0.02: torch.randn(*shape, generator=gen, dtype=torch.float64) * std
    out = {"model.embed_tokens.weight": normal(V, C), "model.norm.weight": 1 + normal(C, std=0.1)}
    for i in range(cfg["num_hidden_layers"]):
        p = "model.layers.%d." % i
        out[p + "input_layernorm.weight"] = 1 + normal(C, std=0.1)
        out[p + "post_attention_layernorm.weight"] = 1 + normal(C, std=0.1)
        for m, rows in (("q_proj", C), ("k_proj", KV), ("v_proj", KV)):
            out[p + "self_attn.%s.weight" % m] = normal(rows, C)
            out[p + "self_attn.%s.bias" % m] = normal(rows, std=0.1)
        out[p + "self_attn.o_proj.weight"] = normal(C, C)
        out[p + "mlp.gate_proj.weight"] = normal(I, C)
        out[p + "mlp.up_proj.weight"] = normal(I, C)
        out[p + "mlp.down_proj.weight"] = normal(C, I)
    if not tied:
        out["lm_head.weight"] = normal(V, C)
    return out


def init(folder, tied, seed):
    os.makedirs(folder, exist_ok=True)
    cfg = config(tied)
    gen = torch.Generator().manual_seed(seed)
    hf_folder_loss.write_safetensors(os.path.join(folder, "model.safetensors"), tensors(cfg, tied, gen))
    with open(os.path.join(folder, "config.json"), "w") as f:
        json.dump(cfg, f, indent=2, sort_keys=True)
        f.write("\n")


def train(folder, data, seq_len, steps, lr):
    with open(os.path.join(folder, "config.json")) as f:
        cfg = json.load(f)
    logits_of = hf_folder_loss.ARCHITECTURES[cfg["model_type"]]
    w = hf_folder_loss.read_weights(folder)
    for t in w.values():
        t.requires_grad_(True)
    with open(data, "rb") as f:
        tokens = torch.tensor(list(f.read()), dtype=torch.long)
    windows = (tokens.numel() - 1) // seq_len
    assert windows >= 1

    def loss():
        total = 0.0
        for i in range(windows):
            chunk = tokens[i * seq_len:i * seq_len + seq_len + 1]
            total = total + torch.nn.functional.cross_entropy(
                logits_of(cfg, w, chunk[:-1]), chunk[1:], reduction="sum")
        return total / (windows * seq_len)

    for step in range(1, steps + 1):
        value = loss()
        grads = torch.autograd.grad(value, list(w.values()))
        with torch.no_grad():
            for t, g in zip(w.values(), grads):
                t -= lr * g
        print("step %d loss %.9f" % (step, value.item()))
    with torch.no_grad():
        print("final %.9f" % loss().item())


def main():
    args = sys.argv[1:]
    if args and args[0] == "init":
        tied = "--tied" in args
        seed = int(args[args.index("--seed") + 1]) if "--seed" in args else 1
        init(args[1], tied, seed)
    elif args and args[0] == "train" and len(args) == 6:
        train(args[1], args[2], int(args[3]), int(args[4]), float(args[5]))
    else:
        sys.exit(__doc__)


if __name__ == "__main__":
    main()
