"""Measure the model zoo (``gpusim.models.zoo``) on the CUDA GPU at hand.

``python3 -m validation.measure.zoo_run --out FILE.jsonl.gz [--cases PATTERNS] [--deadline-s N]
[--compiled NAMES] [--compiled-reserve-s N] [--skip-done FILE.jsonl.gz] [--amp main|bf16|fp16]``

One case = zoo model x size (``default``: batch 1; ``large``) x dtype x layout (NCHW, and
channels_last where the entry says) x run (``eager``; ``compiled`` for the models named in
``--compiled``, at their large size in their main 16-bit dtype). Everything runs with
PyTorch's default flags (TF32 and cuDNN settings untouched), random weights and inputs,
under ``torch.no_grad()``.

Per case one row appended to the records file (:mod:`validation.records.store`) as soon as it is
measured, holding: the case (id, model, family, sizes, dtype,
channels_last, run), the environment, the per-kernel list in launch order (profiler, L2
flushed before each call, median per kernel over the profiled calls), kernel count and
sum, steady-state wall time per call, peak memory above the pre-call baseline, and what
the host did per call (aten ops dispatched at top level with their counts, CUDA launches,
synchronisations). A failing case writes ``failed: "<reason>"`` and the run goes on; a
deadline stops starting new cases. Cases run most valuable first: every model's large case
in its main dtype, then batch 1, then the other dtypes, then channels_last, compiled last
(or, with ``--compiled-reserve-s``, from that many seconds before the deadline).
``--holdout`` runs the held-out models (``gpusim.models.zoo.HOLDOUT``) instead, compiled
``HOLDOUT_COMPILED``.

``--amp`` plans AMP cases instead (run set ``zoo_amp.jsonl.gz``): the fp32 model under
``torch.autocast("cuda", dtype)`` as timm's benchmark runs it (``main``: fp16 for CNNs, bf16
otherwise); rows hold ``dtype: "float32"`` and ``amp``, scored by ``validation.score.amp_accuracy``.
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import sys
import time
from validation.measure.zoo_inputs import ModelCache, make_inputs, tensor_bytes, weight_bytes
from validation.measure.zoo_plan import COMPILED_RUNS, Case, DEFAULT_COMPILED, HOLDOUT_COMPILED, SCHEMA_VERSION, next_case, plan_amp_cases, plan_cases
from validation.measure.zoo_plan import one_line


@contextlib.contextmanager
def time_limit(seconds):
    """Raise ``TimeoutError`` in the main thread once ``seconds`` have passed (SIGALRM;
    ``None`` or 0: no limit). A case that hangs then writes a ``failed`` row instead of
    eating the run's deadline."""
    import signal
    if not seconds:
        yield
        return

    def alarm(*_):
        raise TimeoutError(f"no result within {seconds:.0f} s")
    old = signal.signal(signal.SIGALRM, alarm)
    signal.setitimer(signal.ITIMER_REAL, float(seconds))
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)


def autocast_call(fn, amp: str | None, device: str):
    """``fn`` called under ``torch.autocast(device, dtype=amp)`` (``amp``: "float16" or
    "bfloat16"; None: ``fn`` itself). The weights stay in their dtype, as in timm's
    benchmark and in AMP training."""
    if not amp:
        return fn
    import torch
    dt = getattr(torch, amp)

    def call(*args, **kw):
        with torch.autocast(device, dtype=dt):
            return fn(*args, **kw)
    return call


# ------------------------------------------------------------------------ measuring
def _flags() -> dict:
    import torch
    return {"allow_tf32_matmul": torch.backends.cuda.matmul.allow_tf32,
            "cudnn_allow_tf32": torch.backends.cudnn.allow_tf32,
            "cudnn_benchmark": torch.backends.cudnn.benchmark,
            "cudnn_enabled": torch.backends.cudnn.enabled,
            "float32_matmul_precision": torch.get_float32_matmul_precision(),
            "sdpa": {"flash": torch.backends.cuda.flash_sdp_enabled(),
                     "mem_efficient": torch.backends.cuda.mem_efficient_sdp_enabled(),
                     "math": torch.backends.cuda.math_sdp_enabled(),
                     "cudnn": getattr(torch.backends.cuda, "cudnn_sdp_enabled", lambda: None)()}}


def measure_callable(fn, args, cuda: bool, reps: int | None = None, light: bool = False,
                     quick: bool = False) -> dict:
    """Memory, kernels, host statistics and wall time of ``fn(*args)`` (already warm).
    ``light``: kernel count and sum, host statistics and wall time only (no kernel list).
    ``quick``: fewest calls (2 profiled calls, no further warm-up, wall time from 2
    batches of >= 50 ms): about 8 calls after the first, for runs over hundreds of models."""
    import torch

    from validation.measure import timing as measure
    out = {}
    sync = torch.cuda.synchronize if cuda else (lambda: None)
    t0 = time.perf_counter()
    fn(*args)
    sync()
    one_s = time.perf_counter() - t0
    out["first_timed_call_ms"] = round(one_s * 1e3, 3)
    if cuda:
        gc.collect()
        torch.cuda.empty_cache()
        pre = torch.cuda.memory_allocated()
        pre_res = torch.cuda.memory_reserved()
        torch.cuda.reset_peak_memory_stats()
        r = fn(*args)
        sync()
        del r
        out["memory"] = {"pre_call_allocated": pre, "pre_call_reserved": pre_res,
                         "peak_allocated_above_pre_call": torch.cuda.max_memory_allocated() - pre,
                         "peak_reserved_above_pre_call": torch.cuda.max_memory_reserved() - pre_res,
                         "note": "cache emptied before the call; peak stats reset after warm-up"}
    if reps is None:
        reps = 2 if quick else (3 if one_s > 0.05 else 5)
    prof = measure.profile_call(fn, args, flush=cuda, reps=reps, warmup=0 if quick else 1)
    out["profile"] = {k: prof[k] for k in ("per_call_kernel_count", "split", "memcpy_memset")}
    out["profile"]["reps"] = reps
    if not light:
        out["kernels"] = prof["kernels"]
    out["kernel_count"] = prof["kernel_count"]
    out["kernel_sum_us"] = prof["kernel_sum_us"]
    out["host"] = prof.get("host", {})
    if quick:
        w = measure.time_wall(fn, args, min_time_s=0.05, warmup=0, batches=2)
    else:
        w = measure.time_wall(fn, args, min_time_s=0.1, warmup=1,
                              batches=3 if light else (5 if one_s < 0.03 else 3))
    out["wall"] = {k: (round(v, 3) if isinstance(v, float) else v) for k, v in w.items()}
    out["wall_us"] = out["wall"]["median_us"]
    return out


def graph_replay(fn, args) -> dict:
    """The compiled callable captured once into a CUDA graph by hand and replayed: its
    wall time and kernels (what CUDA graphs buy without cudagraph trees' bookkeeping)."""
    import torch
    try:
        s = torch.cuda.Stream()
        s.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(s):
            for _ in range(2):
                fn(*args)
        torch.cuda.current_stream().wait_stream(s)
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            out = fn(*args)
        torch.cuda.synchronize()
        res = measure_callable(g.replay, (), True, reps=3, light=True)
        del out, g
        return res
    except Exception as e:  # noqa: BLE001 - a graph that cannot be captured is a finding
        torch.cuda.synchronize()
        return {"failed": one_line(e)}


def run_case(case: Case, zoo_mod, cache: ModelCache, device: str, warm_only: bool = False,
             beside_walls: bool = False, host_profile: bool = False) -> dict:
    import torch

    from validation.measure import timing as measure
    cuda = device == "cuda"
    entry = zoo_mod.get(case.model)
    dt = getattr(torch, case.dtype)
    rec = {"schema": SCHEMA_VERSION, "case_id": case.case_id, "model": case.model,
           "family": case.family, "library": entry.library, "size": case.size,
           "sizes": case.sizes, "dtype": case.dtype, "channels_last": case.channels_last,
           "run": case.run, "tier": case.tier}
    if case.amp:
        rec["amp"] = case.amp
    rec["env"] = measure.env_info() if cuda else {"device": device, "torch": torch.__version__}
    rec["flags"] = _flags()
    t0 = time.time()
    torch.manual_seed(0)
    # the image size too: a ViT built for one size (timm's img_size) takes no other
    key = (case.model, case.dtype, case.channels_last, case.sizes.get("hw"))
    if cuda:
        torch.cuda.synchronize()
    alloc0 = torch.cuda.memory_allocated() if cuda else 0
    mod, args = cache.get(key, lambda: zoo_mod.build(case.model, device=device, dtype=dt,
                                                     channels_last=case.channels_last,
                                                     **case.sizes))
    rec["build_s"] = round(time.time() - t0, 3) if args is not None else 0.0
    if args is None:
        args = make_inputs(entry, mod, case.sizes, device, dt, case.channels_last, zoo_mod)
    rec["memory_baseline"] = {
        "weights_bytes": weight_bytes(mod), "inputs_bytes": tensor_bytes(args),
        "allocated_total": torch.cuda.memory_allocated() if cuda else None,
        "allocated_before_build": alloc0,
        "other_cached_models_bytes": sum(nb for k, (_, nb) in cache.items.items() if k != key)}
    fn = autocast(mod, case.amp)
    with torch.no_grad():
        if case.run in COMPILED_RUNS:
            import torch._dynamo
            from torch._dynamo.utils import counters
            if cuda and not warm_only:
                # eager on the same lease, for speed-ups and host time without lease spread
                for _ in range(2):
                    fn(*args)
                torch.cuda.synchronize()
                rec["eager_same_lease"] = measure_callable(fn, args, cuda, reps=3, light=True)
            torch._dynamo.reset()
            counters.clear()
            fn = autocast(torch.compile(mod, mode=COMPILED_RUNS[case.run]), case.amp)
            tc = time.perf_counter()
            fn(*args)
            if cuda:
                torch.cuda.synchronize()
            rec["compile_s"] = round(time.perf_counter() - tc, 3)
            rec["dynamo"] = {"unique_graphs": counters["stats"].get("unique_graphs"),
                             "graph_breaks": dict(counters["graph_break"]),
                             "calls_captured": counters["stats"].get("calls_captured")}
            rec["compile_mode"] = COMPILED_RUNS[case.run]
        amp = case.extra.get("amp")             # autocast dtype over fp32 weights (timm's benchmark)
        if amp:
            rec["amp"] = amp
            fn = autocast_call(fn, amp, device)
        tw = time.perf_counter()
        for _ in range(case.extra.get("warmup", 3)):   # warm-up (cuDNN/cuBLAS handles, CUDA graph trees)
            r = fn(*args)
        if cuda:
            torch.cuda.synchronize()
        del r
        rec["warmup_s"] = round(time.perf_counter() - tw, 3)
        if not warm_only:
            rec.update(measure_callable(fn, args, cuda, quick=bool(case.extra.get("quick"))))
            if case.run == "compiled" and cuda:
                rec["cudagraph_manual"] = graph_replay(fn, args)
            if host_profile and case.run == "compiled" and cuda:
                # where the compiled call's host time goes (self CPU per host event, profiled)
                from validation.measure.reference_forwards import host_profile as profile_host
                try:
                    rec["host_profile"] = profile_host(fn, args)
                except Exception as e:  # noqa: BLE001 (the case's own record stands)
                    rec["host_profile"] = {"failed": one_line(e)}
            if beside_walls and case.run == "compiled" and cuda:
                # the host's state beside the case: gpusim's eager reference forwards
                # (validation.measure.reference_forwards; the host drifts within a lease)
                from validation.measure.reference_forwards import reference_walls
                try:
                    rec["reference_walls"] = reference_walls()
                except Exception as e:  # noqa: BLE001 (the case's own record stands)
                    rec["reference_walls"] = {"failed": one_line(e)}
    del args, fn
    if case.run in COMPILED_RUNS:
        torch._dynamo.reset()
    rec["elapsed_s"] = round(time.time() - t0, 2)
    return rec


def autocast(fn, amp):
    """``fn`` called under ``torch.autocast("cuda", dtype)`` for an AMP case (``amp``
    ``"bf16"``/``"fp16"``), as timm's benchmark calls its model; ``fn`` itself otherwise.
    One definition of the dtypes: :data:`gpusim.capture.amp.AMP_DTYPES`."""
    if not amp:
        return fn
    import torch

    from gpusim.capture.amp import AMP_DTYPES
    dtype = AMP_DTYPES[amp]

    def run_autocast(*a):
        with torch.autocast("cuda", dtype=dtype):
            return fn(*a)
    return run_autocast


def write_record(out: str, rec: dict) -> str:
    """Append the case's row to the records file ``out``; a run cut off keeps every case
    it finished (no per-case files: one file travels back from the GPU machine)."""
    from validation.records.store import append_record
    return append_record(out, rec)


def done_ids(path: str) -> set:
    """Case ids measured (not failed) in the records file ``path``: failed cases run again."""
    from validation.records.store import read_records
    return {r["case_id"] for r in read_records(path) if "case_id" in r and not r.get("failed")}


def interleaved(zoo: dict) -> list:
    """All zoo models, families taken in turn (a deadline then cuts every family's tail,
    not whole families)."""
    fams: dict = {}
    for name, e in zoo.items():
        fams.setdefault(e.family, []).append(name)
    out = []
    while any(fams.values()):
        for f in list(fams):
            if fams[f]:
                out.append(fams[f].pop(0))
    return out


def run(out, cases, deadline_s=None, reserve_s=0.0, device="cuda",
        cache_gb=24.0, zoo_mod=None, t_start=None, warm_only=False, beside_walls=False,
        host_profile=False):
    import torch
    if zoo_mod is None:
        from gpusim.models import zoo as zoo_mod
    t_start = t_start or time.time()
    deadline = t_start + (deadline_s if deadline_s else 1e12)
    cache = ModelCache(int(cache_gb * (1 << 30)))
    pending = list(cases)
    n_total, i = len(pending), 0
    summary = {"done": [], "failed": {}, "not_reached": []}
    while True:
        c = next_case(pending, time.time(), deadline, reserve_s)
        if c is None:
            break
        pending.remove(c)
        i += 1
        if c.run in COMPILED_RUNS and deadline - time.time() < 45:
            summary["not_reached"].append(c.case_id)     # a compile would overrun the limit
            continue
        t0 = time.time()
        try:
            rec = run_case(c, zoo_mod, cache, device, warm_only, beside_walls, host_profile)
        except Exception as e:  # noqa: BLE001
            rec = {"schema": SCHEMA_VERSION, "case_id": c.case_id, "model": c.model,
                   "family": c.family, "size": c.size, "sizes": c.sizes, "dtype": c.dtype,
                   "channels_last": c.channels_last, "run": c.run, "tier": c.tier,
                   "failed": one_line(e), "elapsed_s": round(time.time() - t0, 2)}
            if c.amp:
                rec["amp"] = c.amp
            try:
                from validation.measure import timing as measure
                rec["env"] = measure.env_info() if device == "cuda" else {"device": device}
            except Exception:  # noqa: BLE001
                pass
            if "out of memory" in str(e).lower():
                cache.evict(all_=True)
        gc.collect()
        if device == "cuda":
            torch.cuda.empty_cache()
        if warm_only:
            print(f"[warm {time.time() - t_start:5.0f}s] {c.case_id}: "
                  f"{rec.get('failed') or 'compile %.0fs' % rec.get('compile_s', 0)}", flush=True)
            continue
        write_record(out, rec)
        if rec.get("failed"):
            summary["failed"][c.case_id] = rec["failed"]
            print(f"[{i}/{n_total} {time.time() - t_start:5.0f}s] {c.case_id}: FAILED {rec['failed']}",
                  flush=True)
        else:
            summary["done"].append(c.case_id)
            h = rec.get("host", {})
            extra = f" compile {rec['compile_s']:.0f}s" if "compile_s" in rec else ""
            print(f"[{i}/{n_total} {time.time() - t_start:5.0f}s] {c.case_id}: {rec['kernel_count']} kernels "
                  f"{rec['kernel_sum_us']:.0f} us, wall {rec['wall_us']:.0f} us, aten {h.get('aten_ops_top')}, "
                  f"launches {h.get('cuda_launches')}, syncs {h.get('host_syncs')}{extra} "
                  f"({rec['elapsed_s']:.1f}s)", flush=True)
    summary["not_reached"] += [c.case_id for c in pending]
    cache.evict(all_=True)
    return summary


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python3 -m validation.measure.zoo_run")
    ap.add_argument("--out", required=True,
                    help="records file (.jsonl.gz): one row appended per case")
    ap.add_argument("--cases", default=None,
                    help="comma-separated fnmatch patterns on case ids or model names")
    ap.add_argument("--deadline-s", type=float, default=None,
                    help="start no new case after this many seconds")
    ap.add_argument("--compiled", default=None,
                    help="comma-separated models to also run under torch.compile ('' for none, "
                         "'all' for every zoo model, families in turn)")
    ap.add_argument("--runs", default="eager,compiled",
                    help="run kinds: eager, compiled, cudagraph (torch.compile mode='reduce-overhead')")
    ap.add_argument("--warm-only", action="store_true",
                    help="compile and run each compiled case once, record nothing (fills "
                         "Inductor's on-disk caches so a later measuring run compiles fast)")
    ap.add_argument("--shard", default=None, help="I/N: run only every N-th case from the I-th")
    ap.add_argument("--compiled-reserve-s", type=float, default=0.0,
                    help="run compiled cases first once the deadline is this close")
    ap.add_argument("--skip-done", default=None,
                    help="skip cases recorded (not failed) in this records file")
    ap.add_argument("--cache-gb", type=float, default=24.0)
    ap.add_argument("--plan", action="store_true", help="print the case plan and exit")
    ap.add_argument("--reference-walls", action="store_true",
                    help="time gpusim's eager reference forwards beside each compiled case "
                         "(the host's state then: reference_walls in the record, ~3 s a case)")
    ap.add_argument("--host-profile", action="store_true",
                    help="profile 3 calls of each compiled case's host: self CPU per host event "
                         "(host_profile in the record, ~2 s a case)")
    ap.add_argument("--holdout", action="store_true",
                    help="the held-out models (gpusim.models.zoo.HOLDOUT) instead of the zoo; "
                         "--compiled defaults to HOLDOUT_COMPILED")
    ap.add_argument("--amp", default=None, choices=("main", "bf16", "fp16"),
                    help="plan AMP cases instead (fp32 model under torch.autocast; 'main': "
                         "fp16 for CNNs, bf16 for the others); write them to zoo_amp.jsonl.gz")
    ap.add_argument("--cpu-dry-run", action="store_true",
                    help="tiny sizes on the CPU: exercises the record code paths, no timings")
    a = ap.parse_args(argv)
    t_start = time.time()
    from gpusim.models import zoo as zoo_mod
    models = zoo_mod.HOLDOUT if a.holdout else zoo_mod.ZOO
    if a.compiled is None:
        a.compiled = ",".join(HOLDOUT_COMPILED if a.holdout else DEFAULT_COMPILED)
    compiled = [x for x in a.compiled.split(",") if x] if a.compiled else []
    if compiled == ["all"]:
        compiled = interleaved(models)
    patterns = [p for p in a.cases.split(",") if p] if a.cases else None
    runs = tuple(r for r in a.runs.split(",") if r)
    tiny = None
    device = "cuda"
    if a.cpu_dry_run:
        device = "cpu"
    cases = (plan_amp_cases(models, a.amp, compiled, patterns, runs) if a.amp
             else plan_cases(models, compiled, patterns, runs=runs))
    if a.shard:
        i, n = (int(x) for x in a.shard.split("/"))
        cases = cases[i::n]
    if a.cpu_dry_run:
        for c in cases:
            e = zoo_mod.get(c.model)
            tiny = {"batch": 1}
            if "hw" in e.defaults:
                tiny["hw"] = 64
            for k in ("seq", "tgt"):
                if k in e.defaults:
                    tiny[k] = 16
            c.sizes = tiny
    done = done_ids(a.skip_done) if a.skip_done else set()
    cases = [c for c in cases if c.case_id not in done]
    if a.plan:
        for c in cases:
            print(c.tier, c.case_id, c.sizes)
        print(f"{len(cases)} cases")
        return 0
    if device == "cuda":
        from validation.measure import timing as measure
        measure.require_cuda()
    print(f"zoo_run: {len(cases)} cases, deadline {a.deadline_s} s, compiled {compiled}", flush=True)
    s = run(a.out, cases, a.deadline_s, a.compiled_reserve_s, device, a.cache_gb,
            zoo_mod, t_start, a.warm_only, a.reference_walls, a.host_profile)
    print_summary("zoo_run", s, t_start)
    return 0


def print_summary(prog: str, s: dict, t_start: float) -> None:
    """The end of a harness run: cases done, failed (each with its reason), not reached."""
    print(f"{prog}: {len(s['done'])} done, {len(s['failed'])} failed, "
          f"{len(s['not_reached'])} not reached, {time.time() - t_start:.0f} s", flush=True)
    for k, v in s["failed"].items():
        print(f"  failed {k}: {v}")


if __name__ == "__main__":
    sys.exit(main())
