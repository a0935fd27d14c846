#!/usr/bin/env bash
# The training zoo on a device machine (repo root; $OUT set by the device tool):
#   bash validation/device_train.sh SECONDS [train_run args...]
# 1. smoke test (one small training step on the GPU; fails fast if the environment is broken)
# 2. the training zoo until a deadline  -> $OUT/train.jsonl.gz (a row appended after every case)
# 3. with COMPETITORS_S=N: the last N seconds run MemTracker / RuntimeEstimator on the
#    plan's tiers COMPETITOR_TIERS (default 0,2: small size, AdamW, every precision)
#    (train_run --competitors)  -> $OUT/train_competitors.jsonl.gz; TRAIN=0 skips step 2
# Installs nothing. SECONDS: the whole script's budget (keep it <= 540 under a 600 s run).
set -u
SECS=$1; shift
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
m, a = zoo.build("tv:resnet18", device="cuda")
m.train()
opt = torch.optim.AdamW(m.parameters(), foreach=True)
y = torch.randint(0, 1000, (1,), device="cuda")
def step(mark):
    with mark("zero_grad"):
        opt.zero_grad(set_to_none=True)
    with mark("forward"):
        loss = torch.nn.functional.cross_entropy(m(a[0]), y)
    with mark("backward"):
        loss.backward()
    with mark("optimizer"):
        opt.step()
for _ in range(3):
    step(lambda n: torch.autograd.profiler.record_function(n))
r = measure.profile_phases(step, reps=1)
print("smoke: resnet18 fp32 b1 train step, split", r["split"], {k: len(v["kernels"]) for k, v in r["phases"].items()},
      f"({time.time() - t:.1f} s)")
assert len(r["phases"]["backward"]["kernels"]) > 10 and len(r["phases"]["optimizer"]["kernels"]) > 0
PY
COMP=${COMPETITORS_S:-0}
L=$(left)
TD=$(( L - COMP - ${MARGIN_S:-45} ))
if [ "${TRAIN:-1}" != "0" ]; then
  echo "== train zoo (left $L s, deadline $TD s)"
  timeout $(( L - COMP - 10 )) python3 -m validation.measure.train_run --out "$OUT/train.jsonl.gz" --deadline-s $TD \
    "$@" 2>&1 | grep -v "^USDT\|^ERROR:.*gpuGetDevice\|UserWarning\|warnings.warn"
fi
if [ "$COMP" -gt 0 ]; then
  L=$(left)
  echo "== competitors (left $L s)"
  timeout $(( L - 10 )) python3 -m validation.measure.train_run --competitors --out "$OUT/train_competitors.jsonl.gz" \
    --deadline-s $(( L - 70 )) --case-timeout-s 60 --tiers ${COMPETITOR_TIERS:-0,2} 2>&1 \
    | grep -v "^USDT\|^ERROR:.*gpuGetDevice\|UserWarning\|warnings.warn"
fi
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,temperature.gpu,power.draw --format=csv > "$OUT/smi_after.txt"
ls -la "$OUT"
python3 -c "
from validation.records.store import read_records as r
rows = r('$OUT/train_competitors.jsonl.gz')
if rows: print('train_competitors', len(rows), 'rows,', sum(1 for x in rows if x.get('failed')), 'failed')"
[ -f "$OUT/train.jsonl.gz" ] && python3 -m validation.measure.train_run --summary --out "$OUT/train.jsonl.gz"
echo "total $(( $(date +%s) - T0 )) s"
