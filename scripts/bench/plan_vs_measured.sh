#!/usr/bin/env bash
# zerotrain plan's predicted step time beside the measured one, for layouts of 1 to 4 ranks on
# this machine: configs/small.yaml (GPT-2, 8 heads here so that T = 4 cuts them), a global
# batch of 8 sequences per step, fp32 AdamW. Each row trains STEPS steps at its layout (the
# ranks take the node's cores as `train` divides them: all of them at 1 rank, a share each
# beyond; `--bind-to none`, since mpirun's default binding would hold a lone rank's threads to one
# core) and plans the same layout with the machine file configs/machines/cpu-this.yaml
# (`zerotrain calibrate` on this machine); "measured" is the median step time after the warm-up
# steps, "ratio" predicted / measured. The last line names the worst row. Timings, not a test:
# the machine is shared and noisy, so read the ratios, and rerun before believing one outlier.
# usage: scripts/bench/plan_vs_measured.sh [STEPS] [MACHINE]   (default 8, cpu-this)
#        ROWS="1|1|1|0|false 2|1|1|0|false" scripts/bench/plan_vs_measured.sh ...: only those rows
set -euo pipefail
steps=${1:-8}
machine=${2:-cpu-this}
warm=2
source "$(dirname "$0")/common.sh"
unset OMP_NUM_THREADS OPENBLAS_NUM_THREADS # the ranks divide the cores as training does
cfg=$ZT_ROOT/configs/small.yaml
common=(--set model.n_head=8 --set run.eval_interval=0 --set "run.steps=$steps"
  --set train_micro_batch_size_per_gpu=2 --set "data.train=$tmp/lic.tok")

# ranks|T|P|ZeRO stage|checkpointing
layouts=(
  "1|1|1|0|false" "1|1|1|0|true"
  "2|1|1|0|false" "2|1|1|1|false" "2|1|1|2|false" "2|1|1|3|false" "2|1|1|3|true"
  "2|2|1|0|false" "2|1|2|0|false"
  "4|1|1|0|false" "4|1|1|1|false" "4|1|1|2|false" "4|1|1|3|false"
  "4|2|1|1|false" "4|1|2|1|false" "4|2|2|0|false" "4|4|1|0|false" "4|1|4|0|true"
)
if [ -n "${ROWS:-}" ]; then
  read -r -a layouts <<<"$ROWS"
fi

printf '%-5s %-3s %-3s %-3s %-4s %-5s | %12s %12s %7s\n' ranks T P D ZeRO ckpt "predicted ms" \
  "measured ms" ratio
worst=""
worst_dev=0
for row in "${layouts[@]}"; do
  IFS='|' read -r n tp pp z ck <<<"$row"
  d=$((n / (tp * pp)))
  accum=$((4 / d > 0 ? 4 / d : 1))
  set_layout=(--set "tensor_parallel.size=$tp" --set "pipeline.stages=$pp"
    --set "zero_optimization.stage=$z" --set "gradient_accumulation_steps=$accum"
    --set "activation_checkpointing.enabled=$ck")
  mpirun --oversubscribe --bind-to none -np "$n" "$bin" train "$cfg" --quiet --no-progress "${common[@]}" \
    "${set_layout[@]}" --set "run.output_dir=$tmp/run" --metrics "$tmp/m.jsonl" >"$tmp/log" 2>&1 ||
    { echo "run $row failed:"; tail -5 "$tmp/log"; exit 1; }
  measured=$(median "$tmp/m.jsonl" step_ms)
  "$bin" plan "$cfg" --gpus "$n" --gpus-per-node "$n" --machine "$machine" \
    --global-batch $((2 * accum * d)) --all --json "$tmp/p.json" "${common[@]}" \
    "${set_layout[@]}" >/dev/null
  ckpt=$([ "$ck" = true ] && echo 1 || echo 0)
  predicted=$(python3 - "$tmp/p.json" "$tp" "$pp" "$z" "$accum" "$ckpt" <<'PY'
import json, sys
p = json.load(open(sys.argv[1]))
tp, pp, z, accum, ck = map(int, sys.argv[2:])
for l in p["layouts"]:
    if (l["tp"], l["pp"], l["zero_stage"], l["micro_batch"], l["accum"], l["ckpt_every"]) == \
            (tp, pp, z, 2, accum, ck):
        print(1000 * l["step_seconds"])
PY
)
  ratio=$(awk -v p="$predicted" -v m="$measured" 'BEGIN {printf "%.2f", p / m}')
  printf '%-5s %-3s %-3s %-3s %-4s %-5s | %12.1f %12.1f %7s\n' "$n" "$tp" "$pp" "$d" "$z" "$ck" \
    "$predicted" "$measured" "$ratio"
  dev=$(awk -v r="$ratio" 'BEGIN {d = r > 1 ? r - 1 : 1 - r; printf "%.4f", d}')
  if awk -v a="$dev" -v b="$worst_dev" 'BEGIN {exit !(a > b)}'; then
    worst_dev=$dev
    worst="ranks $n T$tp P$pp D$d ZeRO-$z checkpointing $ck: ratio $ratio"
  fi
done
echo "worst: $worst ($(awk -v d="$worst_dev" 'BEGIN {printf "%.0f", 100 * d}') % off)"
