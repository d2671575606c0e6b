#!/usr/bin/env bash
# Issue 58's GPU measurements, in one call on the device machine (one H100 or H200; torch and torchvision only):
#   run: bash devtools/device_issue58.sh   (writes its figures under $OUT; ~6 minutes with the compiles)
#   a quick check of the script on CPU: SKIP_LARS=1 EXTRA="--image-size 32 --num-classes 4 --no-compile --steps 2" \
#       OUT=/tmp/x PATH=.venv-torch/bin:$PATH bash devtools/device_issue58.sh
# 1. LARS's ResNet50 step: the per-tensor loop beside the for-each step and its compiled update (devtools/lars_step.py)
# 2. the trainer's default GPU recipe (DDP + compile, one process), 60 synthetic steps: batch 256 (the size's
#    measured recipe) and 192 (the stacks' trainingArgs default), DDP's settings against torch's defaults
#    (TRAINING_DDP_SETTINGS=torch), and LARS at 256
set -u
OUT=${OUT:-/tmp/issue58}
mkdir -p "$OUT"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$OUT/gpu.txt"
[ -n "${SKIP_LARS:-}" ] || timeout 240 python3 -m devtools.lars_step 2>&1 | tail -5 | tee "$OUT/lars_step.txt"
run() {  # NAME ENV... -- TRAIN FLAGS...
    name=$1; shift
    env_args=()
    while [ "$1" != "--" ]; do env_args+=("$1"); shift; done
    shift
    env "${env_args[@]}" timeout 150 python3 -m training train --dist ddp --compile --data synthetic --steps 60 \
        --log-every 20 --no-export --output-dir "/tmp/issue58-$name" "$@" ${EXTRA:-} > "$OUT/train-$name.txt" 2>&1
    python3 - "$name" "/tmp/issue58-$name/summary.json" <<'PY' | tee -a "$OUT/figures.txt"
import json, sys
try:
    s = json.load(open(sys.argv[2]))
    e = s.get("efficiency", {})
    print(f"{sys.argv[1]:28s} {s['img_per_sec_per_worker']:8.1f} img/s per GPU, {s['optimizer']}, batch {s['batch_size']}, "
          f"{e.get('bound')} {e.get('time_shares')}, expected {e.get('expected_img_per_sec_per_worker')}")
except (OSError, ValueError, KeyError) as err:
    print(f"{sys.argv[1]:28s} failed ({err}); see train-{sys.argv[1]}.txt")
PY
}
run ddp-compile-256 X=1 -- --batch-size 256
run ddp-compile-192 X=1 -- --batch-size 192
run ddp-torch-defaults-256 TRAINING_DDP_SETTINGS=torch -- --batch-size 256
run ddp-compile-lars-256 X=1 -- --batch-size 256 --optimizer lars
# each run's share of the batch-256 run: a MEASURED_RECIPES row (training/efficiency.py) for its recipe
python3 - <<'PY' | tee "$OUT/shares.txt"
import json
from pathlib import Path
rate = {p.parent.name.removeprefix("issue58-"): json.loads(p.read_text())["img_per_sec_per_worker"]
        for p in Path("/tmp").glob("issue58-*/summary.json")}
base = rate.get("ddp-compile-256")
for name, value in sorted(rate.items()):
    print(f"{name:28s} {value / base:.3f} of ddp-compile-256" if base else f"{name}: no batch-256 run to compare")
PY
