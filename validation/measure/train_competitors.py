"""PyTorch's own estimators on the training zoo's steps (``train_run --competitors``).

What a user would reach for instead of gpusim to predict a training step without running
it: ``torch.distributed._tools.mem_tracker.MemTracker`` (memory) and
``torch.distributed._tools.runtime_estimator.RuntimeEstimator`` (time) in its two modes,
``operator-level-cost-model`` (a roofline per aten op) and ``operator-level-benchmark``
(each aten op run alone on the GPU). Both run under ``FakeTensorMode``: the model is built
on ``meta`` and its tensors replaced by fake ``cuda`` ones as for inference
(:func:`validation.measure.fake_cuda.fake_cuda`), the step is :func:`validation.measure.train_step.build_step`'s,
one fake step runs first so the optimizer state exists (the steady state measured),
then each tool watches one more step. Per tool its figures or ``<tool>_error`` (one line),
and its seconds: a tool that fails on a case is a finding, not a crash.

Row fields (beside the case's, ``kind: "train_competitors"``): ``memtracker`` {``peak``:
the tracker's peak total over cuda devices, ``before``: its total before the step,
``peak_by_category``}; ``runtime_estimator_roofline`` and ``runtime_estimator_benchmark``
{``total_ms``, ``phases_ms``: per step phase}.
"""

from __future__ import annotations

import contextlib
import io
import time

ESTIMATOR_MODES = {"runtime_estimator_roofline": "operator-level-cost-model",
                   "runtime_estimator_benchmark": "operator-level-benchmark"}


class _RuntimePhases:
    """``mark`` for the step: the estimator's running total at each phase's end."""

    def __init__(self, rte):
        self.rte = rte
        self.ms = {}

    def __call__(self, name):
        @contextlib.contextmanager
        def cm():
            t0 = self.rte.total_runtime
            yield
            self.ms[name] = round(self.ms.get(name, 0.0) + self.rte.total_runtime - t0, 4)
        return cm()


def fake_device() -> str:
    """Where the fake tensors live: ``cuda`` (on a machine with a GPU; a CPU-only host
    cannot run autograd's backward on fake cuda tensors: "hasPrimaryContext expects a
    valid device index"), else ``cpu`` (the code path, for tests)."""
    import torch
    return "cuda" if torch.cuda.is_available() else "cpu"


def _fake_step(case, zoo_mod, desc):
    """``(fake_mode, step, model, opt, batch)``: the case's step on fake tensors, one step
    already taken (optimizer state exists)."""
    import torch
    from torch._subclasses.fake_tensor import FakeTensorMode

    from validation.measure.fake_cuda import fake_cuda
    from validation.measure.train_step import build_step
    dev = fake_device()
    model, args = zoo_mod.build(case.model, device="meta", dtype=torch.float32, **case.sizes)
    fake_mode = FakeTensorMode()
    model, args = fake_cuda(model, args, fake_mode, dev)
    with fake_mode:
        step, opt, _scaler, batch = build_step(desc, model, args, dev)
        step()
    return fake_mode, step, model, opt, batch


def memtracker(case, zoo_mod, desc) -> dict:
    from torch.distributed._tools.mem_tracker import MemTracker

    from validation.measure.fake_cuda import _cuda_total
    fake_mode, step, model, opt, batch = _fake_step(case, zoo_mod, desc)
    with fake_mode:
        mt = MemTracker()
        mt.track_external(model, opt, *batch.values())
        with mt:
            before = _cuda_total(mt.get_tracker_snapshot("current"), fake_device())
            step()
            snap = mt.get_tracker_snapshot("peak")
    peak = _cuda_total(snap, fake_device())
    cats = {}
    for d, s in snap.items():
        if getattr(d, "type", "") == fake_device():
            for k, v in s.items():
                k = str(getattr(k, "value", k))          # _MemRefType.ACT -> "Activation"
                cats[k] = cats.get(k, 0) + int(v)
    return {"peak": int(peak), "before": int(before), "peak_by_category": cats}


class _Quiet(io.StringIO):
    """Swallows the estimator's printed total; keeps an ``encoding`` (triton's
    ``testing.nvsmi``, which the roofline asks for the device's peaks, decodes
    nvidia-smi's answer with ``sys.stdout.encoding``: a plain StringIO's None failed
    every roofline estimate on the H100, 2026-11-25)."""

    @property
    def encoding(self):
        return "utf-8"


def runtime_estimator(case, zoo_mod, desc, mode: str) -> dict:
    from torch.distributed._tools.runtime_estimator import RuntimeEstimator
    fake_mode, step, *_ = _fake_step(case, zoo_mod, desc)
    with fake_mode:
        rte = RuntimeEstimator()
        marks = _RuntimePhases(rte)
        with contextlib.redirect_stdout(_Quiet()), rte(mode):
            step(marks)
    return {"total_ms": round(rte.total_runtime, 4), "phases_ms": marks.ms}


def _attempt(row: dict, key: str, fn, timeout_s=None) -> None:
    from validation.measure.zoo_run import time_limit
    from validation.measure.zoo_plan import one_line
    t0 = time.time()
    try:
        with time_limit(timeout_s):
            row[key] = fn()
    except Exception as e:  # noqa: BLE001 - a tool failing on a case is recorded
        row[key + "_error"] = one_line(e)[:300]
    row[key + "_seconds"] = round(time.time() - t0, 2)


def run_competitors(case, zoo_mod, desc: dict, device: str, modes=ESTIMATOR_MODES,
                    tool_timeout_s=None) -> dict:
    """The competitors' row for ``case`` (``desc``: the case's fields of a record); each
    tool gets ``tool_timeout_s`` seconds (a tool over it: ``<tool>_error``)."""
    import torch

    from validation.measure import timing as measure
    t0 = time.time()
    row = dict(desc, kind="train_competitors", fake_device=fake_device())
    row["env"] = (measure.env_info() if device == "cuda" and torch.cuda.is_available()
                  else {"device": device, "torch": torch.__version__})
    torch.manual_seed(0)
    _attempt(row, "memtracker", lambda: memtracker(case, zoo_mod, desc), tool_timeout_s)
    for key, mode in modes.items():
        _attempt(row, key, lambda m=mode: runtime_estimator(case, zoo_mod, desc, m),
                 tool_timeout_s)
    parts = []
    for key in ("memtracker", *modes):
        if key in row:
            v = row[key]
            parts.append(f"{key} " + (f"{v['peak'] / 2**30:.2f} GiB" if key == "memtracker"
                                      else f"{v['total_ms']:.2f} ms"))
        else:
            parts.append(f"{key} failed")
    row["summary"] = ", ".join(parts)
    row["elapsed_s"] = round(time.time() - t0, 2)
    return row
