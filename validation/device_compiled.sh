#!/usr/bin/env bash
# torch.compile zoo records and this lease's host figures, in one device command:
#   bash validation/device_compiled.sh TAG SECONDS [WARM_S] [WORKERS]
# 1. `gpusim calibrate --host-only`      -> $OUT/host-TAG.toml (+ .raw.json): this machine's
#    host figures, measured on the same lease as the records below
# 2. warm Inductor's on-disk caches: WORKERS processes compile the zoo's compiled and
#    reduce-overhead cases in parallel, recording nothing, for at most WARM_S seconds
# 3. measure, one process, nothing else running: per model its eager run on this lease
#    (eager_same_lease), torch.compile default mode (kernels, wall, memory, a hand-captured
#    CUDA graph replay), then mode="reduce-overhead"    -> $OUT/zoo.jsonl.gz
set -u
TAG=$1; SECS=$2; WARM_S=${3:-150}; W=${4:-6}
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
T0=$(date +%s)
left() { echo $(( SECS - ($(date +%s) - T0) )); }
mkdir -p "$OUT"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,temperature.gpu,power.draw --format=csv > "$OUT/smi_before.txt"
echo "== host calibration"
timeout 360 python3 -m gpusim calibrate --host-only --out "$OUT/host-$TAG.toml" 2>&1 | grep -v "^USDT\|^W1\|^ERROR:.*gpuGetDevice" | tail -5
echo "host calibration done at $(( $(date +%s) - T0 )) s"
grep -A20 "^\[host\]" "$OUT/host-$TAG.toml" | cut -c1-60
echo "== warm ($W workers, $WARM_S s)"
for i in $(seq 0 $(( W - 1 ))); do
  timeout $WARM_S python3 -m validation.measure.zoo_run --out /tmp/warm.jsonl.gz --compiled all \
    --runs compiled,cudagraph --warm-only --shard $i/$W --cache-gb 3 --deadline-s $(( WARM_S - 50 )) \
    > /tmp/warm_$i.log 2>&1 &
done
wait
cat /tmp/warm_*.log | grep "^\[warm" | sort -t' ' -k2 | tail -80 > "$OUT/warm.log"
grep -c "compile" "$OUT/warm.log"
L=$(left); ZD=$(( L - 35 ))
echo "== measure (left $L s, deadline $ZD s)"
timeout $(( L - 8 )) python3 -m validation.measure.zoo_run --out "$OUT/zoo.jsonl.gz" --compiled all \
  --runs compiled,cudagraph --deadline-s $ZD 2>&1 | grep -v "^USDT\|^W1\|^ERROR:.*gpuGetDevice"
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,temperature.gpu,power.draw --format=csv > "$OUT/smi_after.txt"
echo "total $(( $(date +%s) - T0 )) s"
