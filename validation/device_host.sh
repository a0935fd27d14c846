#!/usr/bin/env bash
# Run on the GPU machine (repo root): one host lease's records. `gpusim calibrate
# --host-only` (with the reference forwards' eager_forward_factor), then the eager walls of
# every zoo model (validation/measure/host_breakdown.py --walls) until the deadline; all into $OUT.
# usage: bash validation/device_host.sh TAG SECONDS
set -u
TAG=$1; SECS=$2
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
mkdir -p "$OUT"
T0=$(date +%s)
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,temperature.gpu,power.draw --format=csv > "$OUT/$TAG-smi_before.txt"
timeout 360 python3 -m gpusim calibrate --host-only --out "$OUT/$TAG.toml" > "$OUT/$TAG-run.log" 2>&1
echo "calibrate rc $? $(( $(date +%s) - T0 )) s" >> "$OUT/$TAG-run.log"
LEFT=$(( SECS - ($(date +%s) - T0) ))
timeout "$LEFT" python3 validation/measure/host_breakdown.py --walls "$OUT/$TAG-walls.jsonl" >> "$OUT/$TAG-run.log" 2>&1
echo "walls rc $? $(( $(date +%s) - T0 )) s" >> "$OUT/$TAG-run.log"
grep -v Warn "$OUT/$TAG-run.log" | grep -v warn | tail -5
wc -l "$OUT/$TAG-walls.jsonl"
