"""The host's side of an eager training step by phase, unprofiled: what autograd's engine costs the host per
backward node against what the same host pays for a Python-issued op (issues 33 and 35).

A training step's backward is issued by the C++ autograd engine (on its device thread; the Python thread waits in
``loss.backward()`` until the engine has run every node, not until the GPU has), its forward by Python with
autograd recording every op. ``gpusim calibrate`` prices both with its inference figures (tight loops and
``eager_forward_factor``, fitted on gpusim's reference forwards under ``torch.no_grad()``). This module times, on
the host and with the GPU never the bottleneck (small batches; each step starts from an idle GPU), the
phases of real steps and of two chains whose backward nodes are counted:

- ``kind == "train_host"``: the training zoo's eager step (:func:`validation.measure.train_step.make_step`, the
  record's case fields, so the lab rebuilds and predicts the same step) for a few host-bound cases; per timed step
  the host's wall in each phase (``zero_grad``, ``forward``, ``backward``, ``optimizer``: ``time.perf_counter`` at
  each phase's edges, no synchronisation inside the step), the step's wall to ``cuda.synchronize()``, and the
  host's speed before it (``python_us``: host_drift's fixed pure-Python workload).
- ``kind == "chain_host"``: a chain of ``n`` ops on a small tensor that requires grad (``mul``: ``y = y * c``, one
  kernel and one backward node per op; ``linear``: ``nn.Linear(64, 64)`` layers, an addmm forward and two GEMMs and
  a bias sum in backward per layer), at two lengths: the forward's and the backward's host wall per step (the
  slope over ``n`` is the cost per op and per backward node in a tight loop).

Medians over ``--steps`` timed steps after ``--warmup``; one JSONL record per case, written as it is measured; the
environment is the first line. Fits in ~1 min of GPU time::

    python3 -m validation.measure.train_host --out OUT.jsonl
    python3 -m validation.measure.train_host --device cpu --quick --out /tmp/x.jsonl   # the CPU dry run
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time

import torch

from validation.measure.host_drift import python_us

#: (model, family, sizes, optimizer, amp): host-bound steps of the training zoo's records (validation/results/
#: h200/train.jsonl.gz holds their walls), ResNet-50 the case issue 35 is about, GPT-2 and DeiT beside it
CASES = [("tv:resnet50", "cnn", {"batch": 8, "hw": 224}, "sgd", "bfloat16"),
         ("tv:resnet50", "cnn", {"batch": 8, "hw": 224}, "adamw", "bfloat16"),
         ("tv:resnet50", "cnn", {"batch": 8, "hw": 224}, "sgd", None),
         ("hf:gpt2", "decoder", {"batch": 8, "seq": 128}, "adamw", "bfloat16"),
         ("timm:deit_small_patch16_224", "vit", {"batch": 8, "hw": 224}, "adamw", "bfloat16")]
QUICK = [("tv:resnet18", "cnn", {"batch": 2, "hw": 64}, "sgd", None)]
CHAINS = (("mul", 32), ("mul", 256), ("linear", 8), ("linear", 64))
PHASES = ("zero_grad", "forward", "backward", "optimizer")


def environment(device: str) -> dict:
    from validation.measure.decode_run import environment as gpu_env
    if device == "cuda":
        env = gpu_env()
    else:
        env = {"kind": "environment", "utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
               "gpu": None, "torch": torch.__version__, "python": sys.version.split()[0],
               "command": " ".join(sys.argv)}
    import os
    env["cpus"] = os.cpu_count()
    return env


def _sync(device: str):
    if device == "cuda":
        torch.cuda.synchronize()


def _med(xs) -> float:
    return round(statistics.median(xs), 2)


class Marks:
    """``mark(phase)`` for :func:`validation.measure.train_step.make_step`: the host's clock at each phase's
    start and end, nothing else (no synchronisation, no profiler)."""

    def __init__(self):
        self.us: dict[str, float] = {}

    def __call__(self, name):
        import contextlib

        @contextlib.contextmanager
        def cm():
            t0 = time.perf_counter()
            yield
            self.us[name] = (time.perf_counter() - t0) * 1e6
        return cm()


def time_phases(step, device: str, warmup: int, steps: int) -> dict:
    """Per phase: the host's median wall (us) over ``steps`` steps, each from an idle GPU; the step's wall to
    ``cuda.synchronize()``; the host speed probe before each step."""
    for _ in range(warmup):
        step()
    _sync(device)
    per = {ph: [] for ph in PHASES}
    walls, host, probe = [], [], []
    for _ in range(steps):
        _sync(device)
        probe.append(python_us(5000))
        m = Marks()
        t0 = time.perf_counter()
        step(m)
        t1 = time.perf_counter()
        _sync(device)
        t2 = time.perf_counter()
        for ph in PHASES:
            per[ph].append(m.us.get(ph, 0.0))
        host.append((t1 - t0) * 1e6)
        walls.append((t2 - t0) * 1e6)
    return {"host_us": {ph: _med(v) for ph, v in per.items()},
            "host_us_all": {ph: [round(x, 1) for x in v] for ph, v in per.items()},
            "step_host_us": _med(host), "step_wall_us": _med(walls), "steps": steps,
            "python_us": _med(probe)}


def train_case(model: str, family: str, sizes: dict, optimizer: str, amp, device: str, warmup: int,
               steps: int) -> dict:
    from gpusim.models import zoo
    from validation.measure.train_step import build_step, loss_name
    torch.manual_seed(0)
    mod, args = zoo.build(model, device=device, dtype=torch.float32, **sizes)
    rec = {"kind": "train_host", "model": model, "family": family, "sizes": sizes, "dtype": "float32",
           "optimizer": optimizer, "amp": amp, "grad_scaler": False, "loss": loss_name(family), "run": "eager"}
    step, opt, _, _ = build_step(rec, mod, args, device)
    rec.update(time_phases(step, device, warmup, steps))
    del step, opt, mod, args
    return rec


def chain(kind: str, n: int, device: str):
    """``(forward, backward)`` of a chain of ``n`` ops on a small tensor that requires grad."""
    x = torch.randn(64, 64, device=device, requires_grad=True)
    if kind == "mul":
        def fwd():
            y = x
            for _ in range(n):
                y = y * 1.0001
            return y.sum()
    else:
        layers = torch.nn.Sequential(*[torch.nn.Linear(64, 64) for _ in range(n)]).to(device)

        def fwd():
            return layers(x).sum()
    return fwd


def chain_case(kind: str, n: int, device: str, warmup: int, steps: int) -> dict:
    fwd = chain(kind, n, device)
    for _ in range(warmup):
        fwd().backward()
    _sync(device)
    f_us, b_us = [], []
    for _ in range(steps):
        _sync(device)
        t0 = time.perf_counter()
        loss = fwd()
        t1 = time.perf_counter()
        loss.backward()
        t2 = time.perf_counter()
        _sync(device)
        f_us.append((t1 - t0) * 1e6)
        b_us.append((t2 - t1) * 1e6)
    return {"kind": "chain_host", "chain": kind, "n": n, "forward_us": _med(f_us), "backward_us": _med(b_us),
            "steps": steps}


def run(out: str, device: str = "cuda", quick: bool = False, warmup: int = 5, steps: int = 25,
        budget_s: float = 110.0) -> int:
    t_start = time.time()
    n = 0
    with open(out, "w") as f:
        def write(rec):
            f.write(json.dumps(rec) + "\n")
            f.flush()
        write(environment(device))
        for kind, length in (CHAINS[:2] if quick else CHAINS):
            write(chain_case(kind, length, device, warmup, steps))
            n += 1
        for model, family, sizes, optimizer, amp in (QUICK if quick else CASES):
            if time.time() - t_start > budget_s:
                write({"kind": "not_reached", "model": model, "optimizer": optimizer, "amp": amp})
                continue
            try:
                rec = train_case(model, family, sizes, optimizer, amp, device, warmup, steps)
            except Exception as e:  # noqa: BLE001 - a failed case is a record, the others still run
                rec = {"kind": "train_host", "model": model, "optimizer": optimizer, "amp": amp,
                       "error": f"{type(e).__name__}: {e}"[:300]}
            write(rec)
            n += 1
            if device == "cuda":
                torch.cuda.empty_cache()
            print(f"{model} {optimizer} {amp}: {rec.get('host_us', rec.get('error'))}", file=sys.stderr, flush=True)
    print(f"{n} records in {time.time() - t_start:.0f} s -> {out}", file=sys.stderr)
    return 0


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--device", default="cuda", choices=("cuda", "cpu"))
    ap.add_argument("--quick", action="store_true", help="a tiny case set (the CPU dry run)")
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--steps", type=int, default=25)
    ap.add_argument("--budget-s", type=float, default=110.0, help="no new step case after this many seconds")
    a = ap.parse_args(argv)
    if a.device == "cuda" and not torch.cuda.is_available():
        print("no CUDA GPU here; pass --device cpu for the dry run", file=sys.stderr)
        return 2
    return run(a.out, a.device, a.quick, a.warmup, a.steps, a.budget_s)


if __name__ == "__main__":
    sys.exit(main())
