#!/usr/bin/env bash
# Big models on this box, each measured beside its prediction (one table per case):
#   qlora-7b    Llama-2-7B's shape, QLoRA: NF4 base with double quantisation, r 16 on every
#               linear layer, bf16, activation checkpointing, seq 512, micro batch 1, 2 ranks
#               ZeRO-3, loaded from a generated sharded folder (model.init_from)
#   xl-8bit     GPT-2 XL (1.56 B) full fine-tuning, bf16, AdamW8bit in memory, checkpointing,
#               2 ranks ZeRO-3, loaded from a generated folder
#   xl-nvme     the same with fp32 AdamW whose master and states live in files under the nvme
#               folder (ZeRO-Infinity), streamed through a window of host memory
#   lora-1.33b  the seeds' LoRA figure: GPT-NeoX-1.3B's width (24 layers, 2048, vocab 30080) as a
#               GPT-2, LoRA r 8 on the fused qkv projection: 1,572,864 trainable parameters, as
#               the seed's; its optimizer state beside the seed's 4.96 GB -> 0.006 GB
# For each case: `zerotrain plan` (machine cpu-this or --machine's, its layout T1 P1 D2 or D1,
# ZeRO-3 or 0),
# `train --dry-run` and one `train` of STEPS steps (default 2; the seconds-long LoRA case at
# least 6), the measured step being the median of those after the first, each
# with its memory report, the weights in the page cache (read once first). The table gives the
# load time (and the plan's for a cold read) and rank 0's peak RSS once loaded, the
# step's time and tokens/s, every rank's peak RSS (VmHWM) and rank 0's ledger per category, each
# with the dry run's and the plan's prediction beside it, and predicted / measured.
# Free disk (the folders, the NVMe files) and memory (the dry run's predicted RSS of all ranks
# against MemAvailable) are checked before a case runs; a case that would not fit is skipped
# with the reason. Run it alone on a quiet machine: the step times are the machine's. A shared
# VM's speed moves by a third within an hour (bf16 GEMMs at 418 to 725 GFLOP/s a core): with
# --calibrate the plan uses a calibration of the machine as it is now, taken first (4 minutes).
# usage: scripts/bench/capacity.sh [--small] [--weights DIR] [--nvme DIR] [--steps N]
#                                  [--cases "qlora-7b xl-8bit xl-nvme lora-1.33b"] [--plan-only]
#                                  [--profile] [--machine NAME|FILE] [--calibrate]
#   --small      tiny shapes (make_weights.py's tiny-llama and tiny, seq 64): checks the script
#   --weights    the folder holding llama2-7b/ and gpt2-xl/ (default $ZT_WEIGHTS_DIR or
#                ./weights): each is generated with make_weights.py when it is missing
#   --nvme       the folder of xl-nvme's state files (default: a temporary one)
#   --plan-only  plan and dry run only: the predictions, without training
#   --profile    train with --profile, and print where the step time went beside the plan's
#                compute, optimizer and exposed traffic
#   --machine    the plan's machine file (default cpu-this, the committed calibration)
#   --calibrate  plan on a fresh `zerotrain calibrate` of this machine (2 ranks, the NVMe rates in
#                --nvme's folder) instead
set -euo pipefail
small=0
weights=${ZT_WEIGHTS_DIR:-$PWD/weights}
nvme=""
steps=2
plan_only=0
profile=()
cases="qlora-7b xl-8bit xl-nvme lora-1.33b"
machine=cpu-this
calibrate=0
while [ $# -gt 0 ]; do
  case $1 in
  --small) small=1 ;;
  --weights) weights=$2 && shift ;;
  --nvme) nvme=$2 && shift ;;
  --steps) steps=$2 && shift ;;
  --cases) cases=$2 && shift ;;
  --plan-only) plan_only=1 ;;
  --profile) profile=(--profile) ;;
  --machine) machine=$2 && shift ;;
  --calibrate) calibrate=1 ;;
  *) echo "capacity.sh: unknown argument '$1' (see the usage at the top of the script)" >&2
    exit 2 ;;
  esac
  shift
done
source "$(dirname "$0")/../env.sh"
build_dir=${ZT_BUILD_DIR:-$ZT_ROOT/build}
cmake -S "$ZT_ROOT" -B "$build_dir" -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build "$build_dir" --target zerotrain -j "$ZT_JOBS" >/dev/null
bin=$build_dir/zerotrain
py=/usr/bin/python3 # the Debian python, which has numpy
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
[ -n "$nvme" ] || nvme=$tmp/nvme
mkdir -p "$nvme"
"$bin" prepare --out "$tmp/lic.tok" /usr/share/common-licenses >/dev/null
if [ $calibrate = 1 ]; then
  machine=$tmp/machine.yaml
  quick=()
  [ $small = 1 ] && quick=(--quick)
  echo "== calibrate (the plan's machine file, this machine as it is now)"
  mpirun -np 2 --bind-to none "$bin" calibrate "${quick[@]}" --nvme-path "$nvme" --out "$machine" \
    --name cpu-now >"$tmp/calibrate.log" 2>&1 || { tail -5 "$tmp/calibrate.log" && exit 1; }
  grep -E "^warm-up: .* GB\/s$|^ +(weights_read|weights_read_transposed|quantize_4bit) |rank.s time, median of 3: read" \
    "$tmp/calibrate.log" || true
fi

if [ $small = 1 ]; then
  weights=$tmp/weights
  llama_shape=tiny-llama gpt2_shape=tiny seq=64
  lora_model=(--set model.n_layer=2 --set model.n_embd=128 --set model.n_head=4
    --set model.vocab_size=256 --set model.block_size=64)
else
  llama_shape=llama2-7b gpt2_shape=gpt2-xl seq=512
  lora_model=(--set model.n_layer=24 --set model.n_embd=2048 --set model.n_head=16
    --set model.vocab_size=30080 --set model.block_size=2048)
fi

gib() { awk -v b="$1" 'BEGIN {printf "%.2f", b / 1073741824}'; }
avail_bytes() { df -B1 --output=avail "$1" | tail -1; }

echo "== machine: $(nproc) cores, $(gib "$(awk '/MemTotal/ {print $2 * 1024}' /proc/meminfo)") GiB"
echo "cpu: $(sed -n 's/^model name\s*: //p' /proc/cpuinfo | head -1)"
echo "features: $(grep -m1 -o -w -E 'avx2|fma|avx512f|avx512_bf16|avx512_vnni|amx_bf16|amx_tile' \
  /proc/cpuinfo | sort -u | tr '\n' ' ')"

# The weights are read into the page cache before a run: the measured load is then the loader's
# own work, which the plan's load_cached_seconds predicts. A cold read's time is this VM disk's
# mood (a 3.1 GB folder took 1.6 to 4.6 s more in runs minutes apart); the plan's cold figure
# (load_seconds, at nvme.read_bandwidth) is printed beside it, unmeasured.
cache_weights() {
  local from
  from=$(sed -n 's/^  init_from: //p' "$1")
  [ -n "$from" ] || return 0
  cat "$from"/*.safetensors >/dev/null
}

# The weights of a shape under $weights, generated when missing (disk checked by the generator);
# with --plan-only a folder of its config.json alone when they are missing.
folder() {
  local shape=$1 dir=$weights/$1
  if [ ! -f "$dir/config.json" ] && [ $plan_only = 1 ]; then
    dir=$tmp/config-$shape
    "$py" "$ZT_ROOT/scripts/bench/make_weights.py" "$shape" --out "$dir" --config-only >&2
  elif [ ! -f "$dir/config.json" ]; then
    mkdir -p "$weights"
    echo "== make_weights.py $shape into $dir" >&2
    "$py" "$ZT_ROOT/scripts/bench/make_weights.py" "$shape" --out "$dir" --dtype bf16 >&2
  fi
  echo "$dir"
}

# The config of a case: its YAML (written to $tmp/NAME.yaml) and its ranks and stage.
write_case() {
  local name=$1 cfg=$tmp/$1.yaml from="" case_steps=$steps
  # a step of seconds: the median of 5 is cheap, and this shared machine moves one step by 30 %
  [ "$name" = lora-1.33b ] && [ "$steps" -lt 6 ] && case_steps=6
  case $name in
  qlora-7b) from=$(folder "$llama_shape") ;;
  xl-8bit | xl-nvme) from=$(folder "$gpt2_shape") ;;
  esac
  {
    echo "model:"
    if [ -n "$from" ]; then
      echo "  hf_config: $from/config.json"
      echo "  init_from: $from"
    fi
    cat <<EOF
data: {train: $tmp/lic.tok, val_fraction: 0.0, seq_len: $seq}
run: {steps: $case_steps, seed: 1, eval_interval: 0, save_final: false, output_dir: $tmp/$name}
train_micro_batch_size_per_gpu: 1
gradient_accumulation_steps: 1
steps_per_print: 1
bf16: {enabled: true}
activation_checkpointing: {enabled: true}
optimizer: {type: AdamW, params: {lr: 1.0e-4}}
EOF
    case $name in
    qlora-7b) cat <<EOF
lora: {enabled: true, r: 16, lora_alpha: 32, target_modules: all-linear}
quantization: {load_in_4bit: true, bnb_4bit_quant_type: nf4, bnb_4bit_use_double_quant: true,
  bnb_4bit_compute_dtype: bf16}
zero_optimization: {stage: 3}
EOF
      ;;
    # DeepSpeed's default bucket of 5e8 elements holds two buckets of whole
    # unit gradients (one reducing, one filling): 2.4 GiB a rank for 1.5 B
    # parameters; 5e7 keeps them at a tenth
    xl-8bit) cat <<EOF
zero_optimization: {stage: 3, reduce_bucket_size: 5.0e7}
EOF
      ;;
    xl-nvme) cat <<EOF
zero_optimization: {stage: 3, reduce_bucket_size: 5.0e7,
  offload_optimizer: {device: nvme, nvme_path: $nvme}}
EOF
      ;;
    lora-1.33b) cat <<EOF
lora: {enabled: true, r: 8, lora_alpha: 32, target_modules: c_attn}
zero_optimization: {stage: 0}
EOF
      ;;
    esac
  } >"$cfg"
  # AdamW8bit for xl-8bit; the seeds' shape for lora-1.33b
  case $name in
  xl-8bit) args=(--set optimizer.type=AdamW8bit) ;;
  lora-1.33b) args=("${lora_model[@]}") ;;
  *) args=() ;;
  esac
  ranks=2
  [ "$name" = lora-1.33b ] && ranks=1
  return 0
}

# Reads the plan's layout of the case, the dry run's and the run's memory reports and the run's
# log and metrics, and prints the case's table.
table() {
  "$py" - "$@" <<'PY'
import json, re, sys
name, ranks, plan_json, dry_json, run_json, log, metrics = sys.argv[1:8]
ranks = int(ranks)
mib = float(1 << 20)
def load(p):
    try:
        return json.load(open(p))
    except (OSError, ValueError):
        return None
plan, dry, run = load(plan_json), load(dry_json), load(run_json)
role = None
if plan:
    want = dict(tp=1, pp=1, dp=ranks, zero_stage=3 if ranks > 1 else 0, micro_batch=1, ckpt_every=1)
    for l in plan["layouts"]:
        if all(l[k] == v for k, v in want.items()):
            role, layout = l["roles"][0], l
            break
text = open(log).read() if run else ""
steps = []
if run:
    for line in open(metrics):
        rec = json.loads(line)
        if "step_ms" in rec:
            steps.append(rec)
def cell(v, unit=mib, fmt="%.1f"):
    return "-" if v is None else fmt % (v / unit)
def ratio(p, m):
    return "-" if p is None or not m else "%.3f" % (p / m)
rows = []
units = {"B": 1, "KiB": 1 << 10, "MiB": 1 << 20, "GiB": 1 << 30}
m = re.search(r"model.init_from read in ([0-9.]+) s; rank 0's peak RSS then ([0-9.]+) (\w+)", text)
rows.append(("load time s (files cached)", float(m.group(1)) if m else None, None,
             role.get("load_cached_seconds") if role else None, 1.0, "%.1f"))
rows.append(("load time s (files cold)", None, None,
             role.get("load_seconds") if role else None, 1.0, "%.1f"))
def loaded(x):
    return x["rss_predicted_loaded"]["total"] if x and "rss_predicted_loaded" in x else None
rows.append(("rank 0 peak RSS once loaded MiB",
             float(m.group(2)) * units[m.group(3)] if m else None,
             loaded(dry["ranks"][0] if dry else None), loaded(role), mib, "%.1f"))
# the measured step: the median of the steps after the first (which warms the caches)
timed = sorted(steps[1:] or steps, key=lambda r: r["step_ms"])
mid = timed[len(timed) // 2] if timed else None
what = ("step %d" % timed[0]["step"] if len(timed) == 1 else
        "median of steps %d-%d" % (steps[1]["step"], steps[-1]["step"])) if timed else "step -"
rows.append(("%s time s" % what, mid["step_ms"] / 1000 if mid else None, None,
             layout["step_seconds"] if role else None, 1.0, "%.2f"))
rows.append(("tokens/s", mid["tokens_per_s"] if mid else None, None,
             layout["tokens_per_s"] if role else None, 1.0, "%.1f"))
for r in range(ranks):
    meas = run["ranks"][r]["rss_peak"] if run else None
    pd = dry["ranks"][r]["rss_predicted"]["total"] if dry else None
    pp = role["rss_predicted"]["total"] if role else None
    rows.append(("rank %d peak RSS MiB" % r, meas, pd, pp, mib, "%.1f"))
cats = list((dry or run)["ranks"][0]["peak"].keys()) if (dry or run) else []
for c in cats + ["total_peak"]:
    get = (lambda rep: rep["ranks"][0]["peak"][c]) if c != "total_peak" else \
          (lambda rep: rep["ranks"][0]["total_peak"])
    pr = role["peak"][c] if role and c != "total_peak" else (role["total_peak"] if role else None)
    rows.append(("rank 0 ledger %s MiB" % c, get(run) if run else None, get(dry) if dry else None,
                 pr, mib, "%.2f"))
if dry and dry["ranks"][0]["nvme_file_bytes"]:
    rows.append(("rank 0 nvme file MiB (disk)", run["ranks"][0]["nvme_file_bytes"] if run else None,
                 dry["ranks"][0]["nvme_file_bytes"], role["nvme_file_bytes"] if role else None,
                 mib, "%.1f"))
print("%-34s %12s %12s %12s %9s %9s" % (name, "measured", "dry run", "plan", "dry/meas",
                                         "plan/meas"))
for label, meas, pd, pp, unit, fmt in rows:
    print("%-34s %12s %12s %12s %9s %9s" % (label, cell(meas, unit, fmt), cell(pd, unit, fmt),
                                             cell(pp, unit, fmt), ratio(pd, meas), ratio(pp, meas)))
if dry:
    p = dry["ranks"][0]["rss_predicted"]
    print("rank 0 predicted RSS parts MiB: baseline %.1f + runtime %.1f + counted %.1f + data %.1f"
          % tuple(p[k] / mib for k in ("baseline", "runtime", "counted", "data")))
src = run or dry
if src and name.startswith("lora"):
    m = re.search(r"training ([0-9]+) of ([0-9]+) parameters", text)
    print("optimizer state (rank 0): %.4f GB here against the seed's 0.006 GB (4.96 GB in full "
          "fine-tuning)%s" % (src["ranks"][0]["peak"]["optimizer_states"] / 1e9,
                              "; trains %s of %s parameters" % m.groups() if m else ""))
PY
}

for name in $cases; do
  echo
  echo "== $name"
  case $name in
  qlora-7b | xl-8bit | xl-nvme | lora-1.33b) ;;
  *) echo "capacity.sh: no case '$name' (qlora-7b, xl-8bit, xl-nvme, lora-1.33b)" >&2 && exit 2 ;;
  esac
  write_case "$name"
  cfg=$tmp/$name.yaml
  log=$tmp/$name.log
  "$bin" plan "$cfg" "${args[@]}" --gpus "$ranks" --gpus-per-node "$ranks" --machine "$machine" \
    --global-batch "$ranks" --all --json "$tmp/$name.plan.json" >"$tmp/$name.plan.log" 2>&1 ||
    { echo "the plan failed:" && tail -5 "$tmp/$name.plan.log"; }
  grep -A4 "^host memory" "$tmp/$name.plan.log" | grep -v "^runner-up" || true
  if ! mpirun -np "$ranks" --bind-to none "$bin" train "$cfg" "${args[@]}" --dry-run \
    --memory-report "$tmp/$name.dry.json" >"$tmp/$name.dry.log" 2>&1; then
    echo "the dry run failed:" && tail -5 "$tmp/$name.dry.log"
    continue
  fi
  # memory: the dry run's predicted RSS of every rank against what the machine has free
  need=$("$py" -c 'import json,sys; print(sum(r["rss_predicted"]["total"]
    for r in json.load(open(sys.argv[1]))["ranks"]))' "$tmp/$name.dry.json")
  have=$(awk '/MemAvailable/ {printf "%.0f", $2 * 1024}' /proc/meminfo)
  nvme_need=$("$py" -c 'import json,sys; print(sum(r["nvme_file_bytes"]
    for r in json.load(open(sys.argv[1]))["ranks"]))' "$tmp/$name.dry.json")
  echo "predicted RSS of the $ranks ranks $(gib "$need") GiB, available $(gib "$have") GiB;" \
    "nvme files $(gib "$nvme_need") GiB, free there $(gib "$(avail_bytes "$nvme")") GiB"
  run_it=$((1 - plan_only))
  if [ "$need" -gt "$have" ]; then
    echo "skipped: the ranks' predicted RSS is more than the memory available"
    run_it=0
  elif [ "$nvme_need" -gt "$(avail_bytes "$nvme")" ]; then
    echo "skipped: the NVMe files need more than $nvme has free"
    run_it=0
  fi
  if [ $run_it = 1 ]; then
    cache_weights "$cfg"
    /usr/bin/time -v -o "$tmp/$name.time" mpirun -np "$ranks" --bind-to none "$bin" train \
      "$cfg" "${args[@]}" "${profile[@]}" --no-progress --memory-report "$tmp/$name.run.json" >"$log" 2>&1 ||
      { echo "the run failed:" && tail -5 "$log"; }
    grep -m1 "GEMMs on" "$log" || true
    if [ ${#profile[@]} -gt 0 ]; then
      sed -n '/where the time went/,/blocked in communication/p' "$log" | sed 's/^[^|]*| *//'
      "$py" - "$tmp/$name.plan.json" "$ranks" <<'PY'
import json, sys
plan, ranks = json.load(open(sys.argv[1])), int(sys.argv[2])
want = dict(tp=1, pp=1, dp=ranks, zero_stage=3 if ranks > 1 else 0, micro_batch=1, ckpt_every=1)
for l in plan["layouts"]:
    if all(l[k] == v for k, v in want.items()):
        r = l["roles"][0]
        print("the plan's step: compute %.2f s (matmul %.2f s of which attention %.2f s, 4-bit"
              " decode %.2f s), gradient passes %.2f s, optimizer %.2f s (nvme files %.2f s),"
              " exposed data-parallel %.2f s"
              % (r["compute_seconds"], r["matmul_seconds"], r["attention_seconds"],
                 r["decode_seconds"], r["grad_pass_seconds"], r["optimizer_seconds"],
                 r["nvme_seconds"], r["exposed_seconds"]["data"]))
PY
    fi
    echo "whole job's peak RSS (time -v, the largest process): $(awk -F': ' \
      '/Maximum resident set size/ {printf "%.1f", $2 / 1024}' "$tmp/$name.time") MiB"
  fi
  table "$name" "$ranks" "$tmp/$name.plan.json" "$tmp/$name.dry.json" \
    "$( [ $run_it = 1 ] && echo "$tmp/$name.run.json" || echo none)" "$log" \
    "$tmp/$name/metrics.jsonl"
done
