#!/usr/bin/env bash
# The dry run's predicted peak RSS per rank (report/rss_model.h: baseline + runtime + counted +
# data) against the peak a run of the same config measures (VmHWM, the memory report's rss_peak),
# on small and medium runs: tiny, small.yaml and gpt2-124m, LoRA and QLoRA, a streamed load from a
# sharded folder (model.init_from), 1 and 2 ranks, stages 0 and 3. Each case runs
# `train --dry-run` and then `train` for STEPS steps, both with --memory-report; "ratio" is
# predicted / measured, the goal within 10 %. The last line names the worst row.
# Measurements, not a test: RSS moves a little with the load of the machine (the threads' stacks
# and arenas), so rerun before believing one outlier.
# usage: scripts/bench/rss_check.sh [STEPS]          (default 1)
#        CASES="tiny-1 qlora-2" scripts/bench/rss_check.sh: only those cases
set -euo pipefail
steps=${1:-1}
source "$(dirname "$0")/../env.sh"
build_dir=${ZT_BUILD_DIR:-$ZT_ROOT/build}
cmake -S "$ZT_ROOT" -B "$build_dir" -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build "$build_dir" --target zerotrain -j "$ZT_JOBS" >/dev/null
bin=$build_dir/zerotrain
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cfg=$ZT_ROOT/configs
/usr/bin/python3 "$ZT_ROOT/scripts/bench/make_weights.py" tiny-llama --out "$tmp/tiny-llama" \
  --dtype bf16 --seed 7 --max-shard-size 300KB >/dev/null
lora=(--set lora.enabled=true --set lora.r=16 --set lora.target_modules=all-linear)
qlora=("${lora[@]}" --set quantization.load_in_4bit=true
  --set quantization.bnb_4bit_use_double_quant=true --set bf16.enabled=true)
tiny_llama=(--set model.intermediate_size=512 --set model.tie_word_embeddings=false)

# name|ranks|config|arguments
cases=(
  "tiny-1|1|tiny.yaml|"
  "tiny-2-stage3|2|tiny.yaml|--set zero_optimization.stage=3"
  "small-1|1|small.yaml|"
  "small-2-stage3|2|small.yaml|--set zero_optimization.stage=3"
  "small-2-stage0-bf16|2|small.yaml|--set bf16.enabled=true"
  "gpt2-124m-1|1|gpt2-124m.yaml|"
  "lora-2-stage0|2|small.yaml|${lora[*]}"
  "qlora-2-stage3|2|llama-tiny.yaml|${qlora[*]} ${tiny_llama[*]} --set model.init_from=$tmp/tiny-llama"
  "qlora-1|1|llama-small.yaml|${qlora[*]}"
)
if [ -n "${CASES:-}" ]; then
  wanted=" $CASES "
  kept=()
  for row in "${cases[@]}"; do
    [[ $wanted == *" ${row%%|*} "* ]] && kept+=("$row")
  done
  cases=("${kept[@]}")
fi

# rank|predicted|measured|baseline|runtime|counted|data per rank of a dry run's and a run's reports
rows() {
  /usr/bin/python3 - "$1" "$2" <<'EOF'
import json, sys
dry, run = (json.load(open(p)) for p in sys.argv[1:3])
for d, r in zip(dry["ranks"], run["ranks"]):
    p = d["rss_predicted"]
    print("|".join(str(v) for v in (d["rank"], p["total"], r["rss_peak"], p["baseline"],
                                     p["runtime"], p["counted"], p["data"])))
EOF
}

mib() { awk -v b="$1" 'BEGIN {printf "%.1f", b / 1048576}'; }

printf '%-20s %4s | %9s %9s %6s | %8s %8s %9s %6s\n' case rank "pred MiB" "meas MiB" ratio \
  baseline runtime counted data
worst=""
worst_dev=0
for row in "${cases[@]}"; do
  IFS='|' read -r name np file args <<<"$row"
  # shellcheck disable=SC2206 # the arguments split on spaces, as written above
  argv=($args)
  common=("$cfg/$file" --set "run.steps=$steps" --set run.eval_interval=0
    --set run.save_final=false --set "data.train=/usr/share/common-licenses"
    --set "run.output_dir=$tmp/$name" "${argv[@]}")
  for kind in dry run; do
    extra=()
    [ $kind = dry ] && extra=(--dry-run)
    if ! nice -n 10 mpirun -np "$np" --bind-to none "$bin" train "${common[@]}" "${extra[@]}" \
      --memory-report "$tmp/$name.$kind.json" >"$tmp/$name.$kind.log" 2>&1; then
      echo "$name: the $kind failed:" >&2
      tail -5 "$tmp/$name.$kind.log" >&2
      continue 2
    fi
  done
  while IFS='|' read -r rank pred meas base rt counted data; do
    ratio=$(awk -v p="$pred" -v m="$meas" 'BEGIN {printf "%.3f", p / m}')
    printf '%-20s %4s | %9s %9s %6s | %8s %8s %9s %6s\n' "$name" "$rank" "$(mib "$pred")" \
      "$(mib "$meas")" "$ratio" "$(mib "$base")" "$(mib "$rt")" "$(mib "$counted")" "$(mib "$data")"
    dev=$(awk -v r="$ratio" 'BEGIN {d = r - 1; print (d < 0 ? -d : d)}')
    if awk -v d="$dev" -v w="$worst_dev" 'BEGIN {exit !(d > w)}'; then
      worst_dev=$dev
      worst="$name rank $rank (ratio $ratio)"
    fi
  done < <(rows "$tmp/$name.dry.json" "$tmp/$name.run.json")
done
echo "worst: $worst"
