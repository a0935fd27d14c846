#!/usr/bin/env bash
# The one command for a device machine (repo root; $OUT set by the device tool):
#   bash validation/device_zoo.sh TAG SECONDS [calibrate|no] [extra zoo_run args...]
# 1. smoke test (one small zoo model on the GPU; fails fast if the environment is broken)
# 2. eager dispatch sweeps              -> $OUT/sweeps-TAG.json
# 3. optionally `gpusim calibrate`      -> $OUT/TAG-sxm-calibrated.toml (+ .raw.json)
# 4. the zoo, until a deadline          -> $OUT/zoo.jsonl.gz (a row appended after every case)
set -u
TAG=$1; SECS=$2; CAL=${3:-no}; shift 3 || shift $#
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1 TORCHINDUCTOR_COMPILE_THREADS=16
T0=$(date +%s)
left() { echo $(( SECS - ($(date +%s) - T0) )); }
mkdir -p "$OUT"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,temperature.gpu,power.draw --format=csv > "$OUT/smi_before.txt"
cat "$OUT/smi_before.txt"
echo "== smoke"
timeout 90 python3 - <<'PY' || { echo "SMOKE FAILED"; exit 1; }
import time, torch
t = time.time()
from gpusim.models import zoo
from validation.measure import timing as measure
print("torch", torch.__version__, "cuda", torch.version.cuda, torch.cuda.get_device_name(0))
m, a = zoo.build("tv:resnet18", device="cuda", dtype=torch.float16)
with torch.no_grad():
    r = measure.profile_call(m, a, reps=3)
print("smoke: resnet18 fp16 b1:", r["kernel_count"], "kernels,", round(r["kernel_sum_us"]), "us, split",
      r["split"], "aten", r["host"]["aten_ops_top"], "launches", r["host"]["cuda_launches"],
      "syncs", r["host"]["host_syncs"], f"({time.time() - t:.1f} s)")
assert r["kernel_count"] > 10
PY
echo "== sweeps (left $(left) s)"
S0=$(date +%s)
timeout 170 python3 -m validation.measure.microbench --out "$OUT/sweeps-$TAG.json" --deadline-s ${SWEEP_S:-110} 2>&1 | grep -v "^USDT\|^ERROR:.*gpuGetDevice" | tail -8
echo "sweeps took $(( $(date +%s) - S0 )) s"
if [ "$CAL" = "calibrate" ]; then
  echo "== calibrate (left $(left) s)"
  C0=$(date +%s)
  timeout ${CAL_S:-140} python3 -m gpusim calibrate --out "$OUT/$TAG-sxm-calibrated.toml" --base $TAG-sxm 2>&1 | tail -4
  echo "calibrate rc ${PIPESTATUS[0]}, took $(( $(date +%s) - C0 )) s"
fi
L=$(left)
ZD=$(( L - ${MARGIN_S:-40} ))
echo "== zoo (left $L s, deadline $ZD s)"
timeout $(( L - 10 )) python3 -m validation.measure.zoo_run --out "$OUT/zoo.jsonl.gz" --deadline-s $ZD \
  "$@" 2>&1 | grep -v "^USDT\|^ERROR:.*gpuGetDevice"
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,temperature.gpu,power.draw --format=csv > "$OUT/smi_after.txt"
python3 -c "from validation.records.store import read_records as r; print(len(r('$OUT/zoo.jsonl.gz')), 'records')"
echo "total $(( $(date +%s) - T0 )) s"
