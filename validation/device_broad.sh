#!/usr/bin/env bash
# The broad model sample on a device machine (repo root; $OUT set by the device tool):
#   bash validation/device_broad.sh SECONDS [broad_run args, e.g. --n 250 --skip-done F]
# 1. smoke test (timm resnet18 at batch 8 under AMP fp16; fails fast if the environment is broken)
# 2. the broad sample until a deadline -> $OUT/broad.jsonl.gz (a row appended after every model)
# Installs nothing. SECONDS: the whole script's budget (keep it <= 540 under a 600 s run).
set -u
SECS=$1; shift
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
T0=$(date +%s)
left() { echo $(( SECS - ($(date +%s) - T0) )); }
mkdir -p "$OUT"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,temperature.gpu,power.draw --format=csv > "$OUT/smi_before.txt"
cat "$OUT/smi_before.txt"
echo "== smoke"
timeout 90 python3 - <<'PY' || { echo "SMOKE FAILED"; exit 1; }
import time, torch
t = time.time()
from validation.measure import broad_run
from validation.measure import zoo_run
import timm, transformers
print("torch", torch.__version__, "timm", timm.__version__, "transformers", transformers.__version__,
      torch.cuda.get_device_name(0), len(timm.list_models()), "timm models")
z = broad_run.BroadZoo()
c = broad_run.make_case("timm:resnet18", "cnn", {"batch": 8, "hw": 224}, "float16", 0, 0)
r = broad_run.measure_case(c, z, zoo_run.ModelCache(1 << 30), "cuda")
print("smoke: timm resnet18 amp fp16 b8:", r["kernel_count"], "kernels,", round(r["kernel_sum_us"]), "us, wall",
      round(r["wall_us"]), "us", f"({time.time() - t:.1f} s)")
assert r["kernel_count"] > 10
PY
L=$(left)
BD=$(( L - ${MARGIN_S:-35} ))
echo "== broad (left $L s, deadline $BD s)"
timeout $(( L - 5 )) python3 -m validation.measure.broad_run --out "$OUT/broad.jsonl.gz" --deadline-s $BD \
  "$@" 2>&1 | grep -v "^USDT\|^ERROR:.*gpuGetDevice\|UserWarning\|warnings.warn\|FutureWarning"
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,temperature.gpu,power.draw --format=csv > "$OUT/smi_after.txt"
ls -la "$OUT"
python3 -m validation.measure.broad_run --summary --out "$OUT/broad.jsonl.gz"
echo "total $(( $(date +%s) - T0 )) s"
