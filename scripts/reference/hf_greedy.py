#!/usr/bin/python3
"""hf_greedy.py — greedy decoding of a save_pretrained-style folder with
PyTorch, the reference `zerotrain generate --json` is compared with token
for token.

The model is built from the folder's config.json and safetensors alone by
hf_folder_loss.py's loader (GPT2LMHeadModel's or LlamaForCausalLM's
forward from Hugging Face's definitions, in float64; no transformers
package). Each step runs the whole sequence again (no cache, so the
reference shares nothing with a cached forward) and takes the most likely
next token, as generate(do_sample=False) does, stopping after N tokens or
at the end-of-text id when one is given.

Greedy decoding is only comparable where the top two logits are not
nearly tied: the smallest margin between them over the steps is printed
too, so that a test can refuse a model whose choice is a coin toss.

Prints one JSON line: {"ids": [new ids], "min_margin": M}.

Usage: /usr/bin/python3 scripts/reference/hf_greedy.py DIR PROMPT_IDS N [EOS_ID]
       (PROMPT_IDS: comma-separated ids)
"""
import json
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from hf_folder_loss import ARCHITECTURES, read_weights  # noqa: E402


def main():
    folder, prompt, n_new = sys.argv[1], sys.argv[2], int(sys.argv[3])
    eos = int(sys.argv[4]) if len(sys.argv) > 4 else None
    with open(os.path.join(folder, "config.json")) as f:
        cfg = json.load(f)
    logits_of = ARCHITECTURES[cfg["model_type"]]
    weights = read_weights(folder)
    ids = [int(t) for t in prompt.split(",") if t]
    new, min_margin = [], float("inf")
    with torch.no_grad():
        for _ in range(n_new):
            last = logits_of(cfg, weights, torch.tensor(ids, dtype=torch.long))[-1]
            top = torch.topk(last, 2)
            min_margin = min(min_margin, (top.values[0] - top.values[1]).item())
            nxt = int(top.indices[0])
            ids.append(nxt)
            new.append(nxt)
            if nxt == eos:
                break
    print(json.dumps({"ids": new, "min_margin": min_margin}))


if __name__ == "__main__":
    main()
