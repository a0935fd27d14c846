#!/usr/bin/env bash
# Run on the GPU machine (repo root): optionally calibrate, then validate; the records
# (classic.jsonl.gz) land in $OUT. Resumable: cases already in validation/results/TAG are skipped.
# usage: bash validation/device_run.sh TAG SECONDS [calibrate|no] [cases|all] [--quick]
set -u
TAG=$1; SECS=$2; CAL=${3:-no}; CASES=${4:-all}; QUICK=${5:-}
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1 TORCHINDUCTOR_COMPILE_THREADS=16
RES=/tmp/gpusim_results/$TAG
mkdir -p "$RES" "$OUT"
[ -f "validation/results/$TAG/classic.jsonl.gz" ] && cp validation/results/$TAG/classic.jsonl.gz "$RES"/
count() { python3 -c "from validation.records.store import read_records as r; print(len(r('$RES/classic.jsonl.gz')))"; }
BEFORE=$(count)
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,temperature.gpu,power.draw --format=csv | tee "$OUT/smi_before.txt"
python3 -c "import torch, triton; print('torch', torch.__version__, 'cuda', torch.version.cuda, 'triton', triton.__version__)"
T0=$(date +%s)
if [ "$CAL" = "calibrate" ]; then
  timeout 300 python3 -m gpusim calibrate --out "$OUT/$TAG-sxm-calibrated.toml" 2>&1 | tail -8
fi
LEFT=$(( SECS - ($(date +%s) - T0) ))
export GPUSIM_VALIDATE_SECONDS=$LEFT
ARGS=(--out "$RES")
[ "$CASES" != "all" ] && ARGS+=(--cases "$CASES")
[ -n "$QUICK" ] && ARGS+=(--quick)
# hard stop a little after the soft deadline, so the records below are always copied
timeout $(( LEFT + 90 )) python3 -m gpusim validate "${ARGS[@]}" 2>&1 | tail -60
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,temperature.gpu,power.draw --format=csv > "$OUT/smi_after.txt"
cp "$RES"/classic.jsonl.gz "$RES"/env.json "$OUT"/ 2>/dev/null
echo "records: before $BEFORE, after $(count)"
