#!/usr/bin/env bash
# Fine-tuning side by side: configs/small.yaml (GPT-2) and configs/llama-small.yaml at 2 ranks
# under ZeRO stage 3, full fine-tuning vs LoRA r=8 vs QLoRA r=8 (NF4, double quantisation),
# adapters on every linear layer (all-linear), AdamW: the measured peak bytes per rank of the
# parameters (the frozen base and the adapters together, as allocated), gradients and optimizer
# states from the memory report, the 4-bit base's bytes per parameter, the peak total, and
# tokens/s (median over the timed steps). What the ZeRO paper's accounting predicts for the
# optimizer states, 8 bytes x trainable parameters / N, is printed beside the measured ones.
# usage: scripts/bench/finetune.sh [STEPS]   (default 10)
set -euo pipefail
steps=${1:-10}
warm=2
source "$(dirname "$0")/common.sh"

# the number after "key": in a JSON file (its first occurrence after "ranks" with --peak)
field() {
  grep -o "\"$2\": [0-9.e+-]*" "$1" | head -1 | awk '{print $2}'
}
peak() {
  sed 's/.*"ranks"//' "$1" | grep -o "\"$2\": [0-9]*" | head -1 | awk '{print $2 / 1048576}'
}

printf '%-11s %-6s | %10s %9s %9s %9s | %9s %9s | %9s %9s\n' model method "params MiB" \
  "grads MiB" "optim MiB" "8B*A/N" "4-bit B/p" "total MiB" "tokens/s" "trainable"
for cfg in small llama-small; do
  for method in full lora qlora; do
    extra=()
    case $method in
    lora) extra=(--set lora.enabled=true --set lora.r=8 --set lora.lora_alpha=16
      --set lora.target_modules=all-linear) ;;
    qlora) extra=(--set lora.enabled=true --set lora.r=8 --set lora.lora_alpha=16
      --set lora.target_modules=all-linear --set quantization.load_in_4bit=true
      --set quantization.bnb_4bit_use_double_quant=true) ;;
    esac
    mpirun --oversubscribe -np 2 "$bin" train "configs/$cfg.yaml" --no-progress \
      --set run.steps=$((steps + warm)) --set run.eval_interval=0 --set run.eval_batches=1 \
      --set zero_optimization.stage=3 --set data.train="$tmp/lic.tok" \
      --set run.output_dir="$tmp/run" --metrics "$tmp/m.jsonl" \
      --memory-report "$tmp/mem.json" "${extra[@]}" >"$tmp/log" 2>&1 || {
      cat "$tmp/log"
      exit 1
    }
    tps=$(median "$tmp/m.jsonl" tokens_per_s)
    n4=$(field "$tmp/mem.json" base4_numel)
    b4=$(field "$tmp/mem.json" base4_bytes)
    bpp=$(awk -v n="$n4" -v b="$b4" 'BEGIN {if (n > 0) printf "%.4f", 2 * b / n; else print "-"}')
    # trainable parameters: the optimizer's 8 bytes each, split over 2 ranks
    optim=$(peak "$tmp/mem.json" optimizer_states)
    # the run's own count: "N parameters (M trainable)", or all N
    trainable=$({ grep -o '([0-9]* trainable)' "$tmp/log" || true; } | head -1 | tr -d '(' |
      awk '{print $1}')
    trainable=${trainable:-$(grep 'memory per rank' "$tmp/log" | grep -o '[0-9][0-9]* parameters' |
      awk '{print $1}')}
    predicted=$(awk -v t="$trainable" 'BEGIN {printf "%.2f", 8 * t / 2 / 1048576}')
    printf '%-11s %-6s | %10.2f %9.2f %9.2f %9s | %9s %9.1f | %9.0f %9s\n' "$cfg" "$method" \
      "$(peak "$tmp/mem.json" params)" "$(peak "$tmp/mem.json" grads)" "$optim" "$predicted" \
      "$bpp" "$(peak "$tmp/mem.json" total_peak)" "$tps" "$trainable"
  done
done
