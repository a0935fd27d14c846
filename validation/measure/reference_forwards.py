"""gpusim's reference forwards and ``eager_forward_factor``: the host issues a real forward's
ops slower than calibrate's tight loops, so calibrate times two small host-bound forwards
(its own GPT-2 and ResNet-50) and fits their wall over gpusim's prediction of them.
``compiled_forward_factor`` is the same fit for the same forwards under ``torch.compile``
(default mode, as the zoo compiles): Inductor's wrapper inside a real forward against
calibrate's compiled chains.

Apart from :mod:`validation.fit.calibrate` because scoring uses it without a GPU: the zoo's
host-lease rows re-fit the factor from walls measured beside each case
(:func:`validation.score.zoo_accuracy.lease_wall_rows`).
"""

from __future__ import annotations

import functools

import numpy as np
import torch

from gpusim.util.errors import GpusimError
from gpusim.hw.spec import GPUSpec
from gpusim.hw.host import load_host
from validation.measure import timing as measure


def reference_forwards(device: str = "cuda") -> list[tuple[str, torch.nn.Module, tuple]]:
    """gpusim's reference forwards for ``eager_forward_factor``: its own GPT-2 and
    ResNet-50 (:mod:`gpusim.models.examples`, not models the accuracy tables score) in bf16 at
    sizes so small that the host bounds them (6 blocks of d=64 over 32 tokens; a 32x32
    image): a realistic mix of ops, views and module calls whose wall is host time."""
    from gpusim.models.examples import GPT2, ResNet50, _module
    gpt = _module(GPT2, device, torch.bfloat16, layers=6, d=64, heads=2, vocab=512, ctx=64)
    res = _module(ResNet50, device, torch.bfloat16, classes=10)
    with torch.device(device):
        return [("gpt2", gpt, (torch.randint(0, 512, (1, 32)),)),
                ("resnet50", res, (torch.randn(1, 3, 32, 32, dtype=torch.bfloat16),))]


def reference_walls() -> dict:
    """Steady-state eager wall per call of each reference forward on this machine."""
    out = {}
    for name, m, args in reference_forwards("cuda"):
        with torch.no_grad():
            out[name] = measure.time_wall(m, args)["median_us"]
    return out


#: short windows each compiled reference forward is timed in a round, the two forwards taking
#: turns, the fastest window kept: the shared hosts slow 1.5-2.5x in episodes of seconds, and one
#: timing a round let an episode into the factor (lease ca's two rounds timed the compiled GPT-2 at
#: 1666 and 2532 us, ResNet-50 at 3321 and 4536, and fitted compiled_forward_factor 1.33, where the
#: same lease's compiled HF models in the host's fast state ran within 13% of the chains' prices
#: without it: validation/results/h200/host/2026-11-28-compiled-anatomy.jsonl)
COMPILED_WINDOWS = 3


def compiled_reference_walls(device: str = "cuda", windows: int = COMPILED_WINDOWS) -> dict:
    """Steady-state wall per call of each reference forward under ``torch.compile`` (default
    mode, compiled under ``no_grad`` as the zoo's compiled runs are): compiled afresh on each
    call (calibrate resets Dynamo between its benchmarks; Inductor's on-disk cache makes a
    second compile quick), then timed in ``windows`` short windows, the forwards taking turns,
    each forward's fastest window kept (all of them under ``"windows"``). A forward that fails
    to compile or run is left out (its error under ``"failed"``)."""
    import torch._dynamo
    out, failed, kernels, compiled = {}, {}, {}, []
    torch._dynamo.reset()
    for name, m, args in reference_forwards(device):
        try:
            with torch.no_grad():
                cf = torch.compile(m)
                cf(*args)
            compiled.append((name, cf, args))
        except Exception as e:       # a compile failure must not cost the calibration
            failed[name] = f"{type(e).__name__}: {str(e)[:200]}"
    timed: dict = {name: [] for name, _, _ in compiled}
    with torch.no_grad():
        for _ in range(max(1, windows)):
            for name, cf, args in compiled:
                if name in failed:
                    continue
                try:
                    timed[name].append(measure.time_wall(cf, args, min_time_s=0.1,
                                                         batches=3)["median_us"])
                except Exception as e:   # noqa: BLE001 (the other forward stands)
                    failed[name] = f"{type(e).__name__}: {str(e)[:200]}"
    for name, cf, args in compiled:
        if name in failed or not timed[name]:
            continue
        out[name] = min(timed[name])
        try:
            kernels[name] = host_profile(cf, args)
        except Exception as e:   # noqa: BLE001 (the wall stands without it)
            kernels[name] = {"failed": f"{type(e).__name__}: {str(e)[:200]}"}
    torch._dynamo.reset()
    if any(timed.values()):
        out["windows"] = {k: v for k, v in timed.items() if v}
    if failed:
        out["failed"] = failed
    if kernels:
        out["profile"] = kernels
    return out


def host_profile(fn, args, calls: int = 3) -> dict:
    """Where a call's host time goes, under the profiler (slower than unprofiled, so the shares
    matter, not the sums): the kernels per call (the program gpusim predicts) and the self CPU
    µs per call of the host events that took the most (Dynamo's cache lookup and guards,
    the compiled graph's call, Triton's launcher, the library calls and their launches)."""
    from torch.profiler import ProfilerActivity, profile
    cuda = torch.cuda.is_available()
    sync = torch.cuda.synchronize if cuda else (lambda: None)
    with torch.no_grad():
        fn(*args)
        sync()
        with profile(activities=[ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if cuda else [])) as prof:
            for _ in range(calls):
                fn(*args)
            sync()
    ev = prof.key_averages()
    kernels = sum(e.count for e in ev if getattr(e, "device_type", None) is not None
                  and "CUDA" in str(e.device_type) and not e.key.startswith(("Memcpy", "Memset")))
    cpu = sorted((e for e in ev if e.self_cpu_time_total > 0), key=lambda e: -e.self_cpu_time_total)
    return {"kernels_per_call": kernels / calls,
            "self_cpu_us_per_call": {e.key: round(e.self_cpu_time_total / calls, 1) for e in cpu[:30]},
            "cpu_us_per_call": round(sum(e.self_cpu_time_total for e in cpu) / calls, 1)}


def median_walls(rounds: list[dict]) -> dict:
    """Each reference forward's median over several :func:`reference_walls` rounds."""
    return {k: float(np.median([r[k] for r in rounds if k in r])) for k in _timed(rounds)}


def _timed(rounds: list[dict]) -> list[str]:
    """The forwards every round timed (a compiled forward that failed in one round is left out;
    a round's other entries, ``failed``, ``profile`` and ``windows``, are not walls)."""
    return [k for k, v in rounds[0].items()
            if isinstance(v, (int, float)) and all(k in r for r in rounds)]


def fastest_walls(rounds: list[dict]) -> dict:
    """Each reference forward's fastest of several :func:`reference_walls` rounds: the host
    without contention. The lab's hosts are shared VMs whose CPU slows 1.5-2x in episodes of
    seconds to minutes (a fixed pure-Python workload, no torch, ran 1.8-2x slower in 11 of 50
    samples over 150 s on one H200 lease: validation/results/host_drift/), so a median of a few
    rounds lands on whichever state the host was in."""
    return {k: float(min(r[k] for r in rounds)) for k in _timed(rounds)}


@functools.lru_cache(maxsize=2)
def _reference_graphs(compiling: bool = False) -> dict:
    """The reference forwards captured on meta tensors (as ``gpusim predict`` captures a
    model: their Python priced from capture's counts; ``compiling``: along torch.compile's
    path, as a compiled prediction captures)."""
    from gpusim.capture.tracing import capture
    return {name: capture(m, args, name=name, compiling=compiling)
            for name, m, args in reference_forwards("meta")}


#: each mode's factor, left out of the host a reference prediction is made with
FACTOR_OF = {"eager": "eager_forward_factor", "compiled": "compiled_forward_factor"}


def reference_predictions(spec: GPUSpec, host, mode: str = "eager") -> dict:
    """``{name: (end-to-end us, device us)}``: gpusim's ``mode`` prediction of each reference
    forward on ``spec`` with ``host``'s tight-loop figures (that mode's factor left out).
    Pure: the forwards are captured on meta tensors."""
    from gpusim.predict.pipeline import predict
    plain = load_host(host).replace(**{FACTOR_OF[mode]: None},
                                    **({"eager_library_forward_factor": None} if mode == "eager" else {}))
    out = {}
    for name, g in _reference_graphs(mode == "compiled").items():
        p = predict(g, gpu=spec, mode=mode, host=plain)
        out[name] = (p.end_to_end_us, p.device_us)
    return out


def forward_factor(walls: dict, spec: GPUSpec, host, predicted: dict | None = None,
                   mode: str = "eager") -> tuple[float, dict]:
    """``eager_forward_factor`` (``mode="compiled"``: ``compiled_forward_factor``): the
    reference forwards' measured walls (``walls``: :func:`reference_walls`,
    :func:`compiled_reference_walls`) over gpusim's ``mode`` prediction of them with
    ``host``'s tight-loop figures, summed. ``predicted``: :func:`reference_predictions` of
    ``spec``, ``host`` and ``mode``, when the caller fits many walls against one host.
    Returns (factor, per-forward predicted and measured)."""
    predicted = predicted if predicted is not None else reference_predictions(spec, host, mode)
    diag, meas, pred = {}, 0.0, 0.0
    for name, (e2e, device) in predicted.items():
        if name not in walls:
            continue
        diag[name] = {"wall_us": walls[name], "predicted_us": e2e, "predicted_device_us": device}
        meas += walls[name]
        pred += e2e
    if not pred:
        raise GpusimError(f"no reference forward was measured: cannot fit {FACTOR_OF[mode]}")
    return meas / pred, diag


def library_forward_factor(walls: dict, spec: GPUSpec, host) -> tuple[float, dict]:
    """``eager_library_forward_factor``: the reference forwards' measured eager walls (``walls``) less gpusim's
    price of all but their library calls' own dispatch, over that dispatch's price, all at ``host``'s tight-loop
    figures (no in-forward factor), summed over the forwards: the in-forward slowdown put on the library calls
    alone (:func:`gpusim.sim.timeline.eager_factors`). Returns (factor, per-forward walls and prices)."""
    from gpusim.predict.pipeline import predict
    from gpusim.sim.timeline import _eager_issue_us, is_library_call
    plain = load_host(host).replace(eager_forward_factor=None, eager_library_forward_factor=None)
    diag, meas, rest, lib = {}, 0.0, 0.0, 0.0
    for name, g in _reference_graphs(False).items():
        if name not in walls:
            continue
        p = predict(g, gpu=spec, mode="eager", host=plain)
        own = sum(_eager_issue_us(k, plain) for k in p.kernels if is_library_call(k))
        diag[name] = {"wall_us": walls[name], "predicted_us": p.end_to_end_us, "library_calls_us": own}
        meas, rest, lib = meas + walls[name], rest + p.end_to_end_us - own, lib + own
    if not lib:
        raise GpusimError("no reference forward with library calls was measured: cannot fit eager_library_forward_factor")
    return (meas - rest) / lib, diag


def fit_forward(h: dict, spec: GPUSpec, host, diag: dict) -> dict:
    """``{"eager_forward_factor": ..., "compiled_forward_factor": ...}`` from raw host timings
    that timed the reference forwards (``h["reference_walls"]``, and compiled
    ``h["compiled_reference_walls"]``), against ``host``'s tight-loop figures on ``spec``;
    a factor whose walls were not timed is left out. The per-forward fits go into ``diag``."""
    out = {}
    for mode, key, dkey in (("eager", "reference_walls", "reference_forwards"),
                            ("compiled", "compiled_reference_walls", "compiled_reference_forwards")):
        walls = {k: v for k, v in (h.get(key) or {}).items() if isinstance(v, (int, float))}
        if walls:
            f, diag[dkey] = forward_factor(walls, spec, host, mode=mode)
            out[FACTOR_OF[mode]] = float(f)
            if mode == "eager":
                f, diag["reference_forwards_library"] = library_forward_factor(walls, spec, host)
                out["eager_library_forward_factor"] = float(f)
    return out
