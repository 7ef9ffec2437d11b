#!/usr/bin/python3
"""llama3_chat.py — a small Llama-3-shaped folder, Llama 3's chat template
rendered by its published format, and the assistant-only loss PyTorch
computes, for zerotrain's chat fine-tuning check.

  init DIR [--seed N]
      DIR/config.json, a LlamaForCausalLM with Llama 3's shape features
      (vocabulary 128,256, grouped-query attention, rope_theta 500000,
      rms_norm_eps 1e-5, bos 128000, eos 128009, tied head as Llama 3.2's)
      and small dims, and DIR/model.safetensors with random float32
      weights under the Hugging Face names.
  render TOKENIZER_DIR ZEROTRAIN CHAT.jsonl
      each {"messages": [...]} line rendered as Llama 3 Instruct's template
      writes it:
          <|begin_of_text|>
          then per message <|start_header_id|>ROLE<|end_header_id|>\\n\\n
          CONTENT (trimmed) <|eot_id|>
      the special tokens' ids read from TOKENIZER_DIR/tokenizer.json's
      added_tokens, each text between them encoded by `ZEROTRAIN tokenize
      --tokenizer-dir TOKENIZER_DIR` (all in one call, joined by a
      reserved special token). Prints one JSON line per
      conversation, {"ids": [...], "mask": [...]}, mask 1 on the tokens
      of each assistant message's content and its <|eot_id|> (TRL's
      assistant_only_loss), 0 elsewhere.
  loss DIR RENDERED.jsonl
      the mean cross-entropy, in float64, over every target whose mask is
      1, of the model in DIR (config.json and safetensors alone, through
      hf_folder_loss.py) on each conversation of RENDERED.jsonl: the
      prediction of token k from tokens 0 .. k-1. Prints `loss X counted N`.
"""
import json
import os
import subprocess
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import hf_folder_loss  # noqa: E402


def config():
    return {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "vocab_size": 128256,
            "hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2,
            "num_attention_heads": 4, "num_key_value_heads": 2, "max_position_embeddings": 128,
            "rope_theta": 500000.0, "rope_scaling": None, "rms_norm_eps": 1e-5,
            "hidden_act": "silu", "tie_word_embeddings": True, "attention_bias": False,
            "mlp_bias": False, "bos_token_id": 128000, "eos_token_id": 128009,
            "torch_dtype": "float32", "initializer_range": 0.02}


def init(folder, seed):
    cfg = config()
    gen = torch.Generator().manual_seed(seed)
    normal = lambda *shape, std=0.02: torch.randn(*shape, generator=gen, dtype=torch.float64) * std
    C, I, V = cfg["hidden_size"], cfg["intermediate_size"], cfg["vocab_size"]
    KV = cfg["num_key_value_heads"] * C // cfg["num_attention_heads"]
    w = {"model.embed_tokens.weight": normal(V, C), "model.norm.weight": 1 + normal(C, std=0.1)}
    for i in range(cfg["num_hidden_layers"]):
        p = "model.layers.%d." % i
        w[p + "input_layernorm.weight"] = 1 + normal(C, std=0.1)
        w[p + "post_attention_layernorm.weight"] = 1 + normal(C, std=0.1)
        for m, rows, cols in (("self_attn.q_proj", C, C), ("self_attn.k_proj", KV, C),
                              ("self_attn.v_proj", KV, C), ("self_attn.o_proj", C, C),
                              ("mlp.gate_proj", I, C), ("mlp.up_proj", I, C),
                              ("mlp.down_proj", C, I)):
            w[p + m + ".weight"] = normal(rows, cols)
    os.makedirs(folder, exist_ok=True)
    hf_folder_loss.write_safetensors(os.path.join(folder, "model.safetensors"), w)
    with open(os.path.join(folder, "config.json"), "w") as f:
        json.dump(cfg, f, indent=2, sort_keys=True)
        f.write("\n")


def render(tokdir, zerotrain, chat):
    with open(os.path.join(tokdir, "tokenizer.json"), encoding="utf-8") as f:
        special = {t["content"]: t["id"] for t in json.load(f)["added_tokens"]}
    with open(chat, encoding="utf-8") as f:
        conversations = [json.loads(line)["messages"] for line in f if line.strip()]
    # Every text between special tokens, encoded in one call: joined by a
    # special token, which cuts the text as the template's own do.
    texts = sorted({t for c in conversations for m in c
                    for t in (m["role"], "\n\n", m["content"].strip())})
    sep = "<|reserved_special_token_200|>"
    out = subprocess.run([zerotrain, "tokenize", "--tokenizer-dir", tokdir],
                         input=sep.join(texts).encode(), capture_output=True, check=True)
    pieces, piece = [], []
    for i in json.loads(out.stdout) + [special[sep]]:
        if i == special[sep]:
            pieces.append(piece)
            piece = []
        else:
            piece.append(i)
    assert len(pieces) == len(texts)
    ids_of = dict(zip(texts, pieces))
    for c in conversations:
        ids, mask = [special["<|begin_of_text|>"]], [0]
        for m in c:
            head = ([special["<|start_header_id|>"]] + ids_of[m["role"]] +
                    [special["<|end_header_id|>"]] + ids_of["\n\n"])
            body = ids_of[m["content"].strip()] + [special["<|eot_id|>"]]
            counted = 1 if m["role"] == "assistant" else 0
            ids += head + body
            mask += [0] * len(head) + [counted] * len(body)
        print(json.dumps({"ids": ids, "mask": mask}))


def loss(folder, rendered):
    with open(os.path.join(folder, "config.json")) as f:
        cfg = json.load(f)
    w = hf_folder_loss.read_weights(folder)
    logits_of = hf_folder_loss.ARCHITECTURES[cfg["model_type"]]
    total, counted = 0.0, 0
    with open(rendered) as f:
        for line in f:
            ex = json.loads(line)
            ids = torch.tensor(ex["ids"], dtype=torch.long)
            mask = torch.tensor(ex["mask"][1:], dtype=torch.bool)
            logits = logits_of(cfg, w, ids[:-1])
            ce = torch.nn.functional.cross_entropy(logits, ids[1:], reduction="none")
            total += ce[mask].sum().item()
            counted += int(mask.sum())
    print("loss %.9f counted %d" % (total / counted, counted))


def main():
    a = sys.argv[1:]
    if a and a[0] == "init" and len(a) in (2, 4):
        init(a[1], int(a[3]) if len(a) == 4 else 1)
    elif a and a[0] == "render" and len(a) == 4:
        render(a[1], a[2], a[3])
    elif a and a[0] == "loss" and len(a) == 3:
        loss(a[1], a[2])
    else:
        sys.exit(__doc__)


if __name__ == "__main__":
    main()
