#!/usr/bin/env bash
# Run on the GPU machine (repo root): calibrate, then validate, results tarred into $OUT.
# usage: bash validation/device_run.sh GPU_TAG SECONDS [calibrate] [cases] [--quick]
set -u
TAG=$1; SECS=$2; CAL=${3:-no}; CASES=${4:-}; QUICK=${5:-}
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1 TORCHINDUCTOR_COMPILE_THREADS=16
RES=/tmp/gpusim_results/$TAG
mkdir -p "$RES" "$OUT"
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,temperature.gpu,power.draw --format=csv | tee "$OUT/smi_before.txt"
if [ "$CAL" = "calibrate" ]; then
  timeout 300 python3 -m gpusim calibrate --out "$OUT/$TAG-sxm-calibrated.toml" 2>&1 | tail -5
fi
export GPUSIM_VALIDATE_SECONDS=$SECS
ARGS=(--out "$RES")
[ -n "$CASES" ] && [ "$CASES" != "all" ] && ARGS+=(--cases "$CASES")
[ -n "$QUICK" ] && ARGS+=(--quick)
python3 -m gpusim validate "${ARGS[@]}" 2>&1 | tail -40
tar czf "$OUT/results-$TAG.tgz" -C /tmp/gpusim_results "$TAG"
ls "$RES" | wc -l
