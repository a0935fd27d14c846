"""Measure training steps of zoo models (``gpusim.models.zoo``) on the CUDA GPU at hand.

``python3 -m validation.measure.train_run --out FILE.jsonl.gz [--cases PATTERNS] [--tiers 0,1,..]
[--deadline-s N] [--case-timeout-s N] [--compiled-reserve-s N] [--skip-done FILE]
[--competitors] [--plan]``

One case = zoo model x sizes x precision x optimizer x run. The step is the standard one
(:mod:`validation.measure.train_step`, one definition for this harness, its competitors' pass
and whoever rebuilds a record's step), phases marked for the profiler and the memory
counters::

    opt.zero_grad(set_to_none=True)                            # phase "zero_grad"
    with torch.autocast("cuda", dtype=amp, enabled=amp is not None):
        loss = LOSSES[rec["loss"]](model, batch)               # phase "forward" (with loss)
    (scaler.scale(loss) if scaler else loss).backward()        # phase "backward"
    scaler.step(opt); scaler.update()  /  opt.step()           # phase "optimizer"

The model is ``gpusim.models.zoo.build(model, device="cuda", dtype=float32, **sizes)`` (random
weights, fp32: AMP keeps fp32 weights) put in ``train()`` mode (dropout and batch norm in
their training behaviour); its inputs are ``build``'s. Precisions: ``fp32`` (TF32 and
cuDNN flags at PyTorch's defaults, recorded in ``flags``), ``bf16`` (autocast bfloat16),
``fp16`` (autocast float16 + ``torch.amp.GradScaler("cuda")`` at its defaults). Optimizers
(``train_step.OPTIMIZERS``): SGD lr 0.01 momentum 0.9 foreach; AdamW lr 1e-3 foreach (CUDA's default
implementation, named explicitly); AdamW fused for the models in ``FUSED``. Losses
(``train_step.LOSSES``): cross-entropy on random class labels for classifiers, the model's own LM
loss with ``labels=input_ids`` for decoders (``labels=decoder_input_ids`` for T5), and the
mean of the fp32 last hidden state for encoders without a head (``hf:bert-base`` is
``BertModel``). ``run="compiled"``: ``torch.compile(model)`` called inside the same step
(the loss, backward call and optimizer stay eager), last in the plan.

Per case one row appended to the records file (:mod:`validation.records.store`, ``env`` on every
row) as soon as it is measured: the case (everything ``train_step.build_step`` needs to rebuild
the step: model, sizes, weights dtype, amp, grad_scaler, optimizer name and its resolved
``defaults`` with foreach/fused, loss, run, channels_last), and after >= 3 warm-up steps
(optimizer state exists): ``kernels`` of one steady-state step in launch order, each with
its ``phase`` (median per kernel over ``reps`` profiled steps, L2 flushed before each;
attributed by :func:`validation.measure.timing.phase_kernels`), ``phases`` (per phase kernel
count, sum, host statistics), ``wall_us`` (median over >= 10 back-to-back steps, CUDA
events around each step), ``memory`` (resident before the step = weights + optimizer state
+ inputs after ``zero_grad``; the step's peak with one reset at its start; per phase the
peak with a reset at the phase's start, and the phase holding the peak), and the
grad scaler's scale after warm-up (run until a step leaves it alone), after the
profiled steps and at the end (a fall means a skipped optimizer step). A failing
case writes ``failed`` and the run goes on; ``--case-timeout-s`` bounds each case.

``--competitors``: instead of measuring, run PyTorch's own estimators on each case's step
(:mod:`validation.measure.train_competitors`: MemTracker, RuntimeEstimator roofline and benchmark
under FakeTensorMode) and append their figures or one-line failures.

Time: a small model's case is ~3-6 s (build once per model, 3 warm-up + 2 memory + 1-3
profiled + >= 10 timed steps, the profiler's event processing); the plan puts the most
valuable cases first (every model at its small size in bf16 with AdamW, then its large
size, then fp32 and fp16, then SGD, fused AdamW, compiled last), so a deadline cuts the
least valuable tail; ``--tiers`` splits the plan between commands (0,1,2,3,6 then 4,5)
and ``--skip-done`` resumes one.
"""

from __future__ import annotations

import argparse
import gc
import sys
import time

from validation.measure.train_step import OPTIMIZERS, PHASES, build_step, num_classes
from validation.measure.zoo_run import _flags, done_ids, print_summary, time_limit, write_record
from validation.measure.zoo_plan import one_line
from validation.measure.zoo_inputs import ModelCache, tensor_bytes, weight_bytes
from validation.measure.zoo_plan import Case, next_case
from validation.measure.train_plan import plan_cases
from validation.measure.train_plan import COMPILED

SCHEMA_VERSION = 1


# ------------------------------------------------------------------------ measuring
class MemoryPhases:
    """``mark`` for the step: resets the peak counter at each phase's start and records
    the allocated bytes at its start and end and its peak."""

    def __init__(self):
        self.rows = {}

    def __call__(self, name):
        import contextlib

        import torch

        @contextlib.contextmanager
        def cm():
            torch.cuda.reset_peak_memory_stats()
            a0 = torch.cuda.memory_allocated()
            yield
            self.rows[name] = {"allocated_start": a0, "allocated_end": torch.cuda.memory_allocated(),
                               "peak_allocated": torch.cuda.max_memory_allocated()}
        return cm()


def step_memory(step, model, opt, batch) -> dict:
    """Resident bytes and peaks of one steady-state step (CUDA)."""
    import torch
    torch.cuda.synchronize()
    gc.collect()
    with_grads = torch.cuda.memory_allocated()
    grads = tensor_bytes([p.grad for p in model.parameters() if p.grad is not None])
    states = tensor_bytes([v for st in opt.state.values() for v in st.values()])
    torch.cuda.reset_peak_memory_stats()
    step()
    torch.cuda.synchronize()
    peak = torch.cuda.max_memory_allocated()
    peak_res = torch.cuda.max_memory_reserved()
    mp = MemoryPhases()
    step(mp)
    torch.cuda.synchronize()
    resident = mp.rows["zero_grad"]["allocated_end"]
    peak_phase = max(mp.rows, key=lambda k: mp.rows[k]["peak_allocated"])
    from validation.measure import timing as measure
    flush = measure._FLUSHER.buf.untyped_storage().nbytes() if measure._FLUSHER else 0
    return {"allocated_before_step_with_grads": with_grads, "resident_before_step": resident,
            "flush_buffer_bytes": flush,
            "weights_bytes": weight_bytes(model), "grads_bytes": grads,
            "optimizer_state_bytes": states, "inputs_bytes": tensor_bytes(list(batch.values())),
            "peak_step_allocated": peak, "peak_step_reserved": peak_res,
            "peak_step_above_resident": peak - resident, "phases": mp.rows,
            "peak_phase": peak_phase,
            "note": "allocated bytes (torch.cuda.memory_allocated), absolute: they include "
                    "flush_buffer_bytes (the profiler's L2 flush buffer, once created) and "
                    "other_cached_models_bytes (the record's; weights of models kept for later "
                    "cases) and cuBLAS workspaces; the step's peak with one reset at its "
                    "start, each phase's with a reset at the phase's start; resident = after "
                    "zero_grad(set_to_none=True)"}


def time_steps(step, n: int, cuda: bool) -> dict:
    """Per-step time of ``n`` back-to-back steps: CUDA events around each step (the
    GPU's timeline: includes the device idling on the host), median and spread; and
    the host's clock over all ``n`` (throughput)."""
    import torch

    from validation.measure.timing import _stats
    t0 = time.perf_counter()
    if cuda:
        ev = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True))
              for _ in range(n)]
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        for s, e in ev:
            s.record()
            step()
            e.record()
        torch.cuda.synchronize()
        per = [s.elapsed_time(e) * 1e3 for s, e in ev]
    else:
        per = []
        for _ in range(n):
            t = time.perf_counter()
            step()
            per.append((time.perf_counter() - t) * 1e6)
    out = {k: round(v, 3) if isinstance(v, float) else v for k, v in _stats(per).items()}
    out["host_us_per_step"] = round((time.perf_counter() - t0) / n * 1e6, 3)
    return out


def describe(case: Case, entry) -> dict:
    """The case's fields of a record: everything needed to rebuild the step."""
    x = case.extra
    cls, kw = OPTIMIZERS[x["optimizer"]]
    return {"schema": SCHEMA_VERSION, "kind": "train_step", "case_id": case.case_id,
            "model": case.model, "family": case.family, "library": getattr(entry, "library", None),
            "size": case.size, "sizes": case.sizes, "dtype": case.dtype,
            "weights_dtype": x["weights_dtype"], "precision": x["precision"], "amp": x["amp"],
            "grad_scaler": x["grad_scaler"], "optimizer": x["optimizer"],
            "optimizer_class": cls, "optimizer_kwargs": kw, "loss": x["loss"],
            "run": case.run, "channels_last": case.channels_last, "train_mode": True,
            "zero_grad_set_to_none": True, "tier": case.tier}


def run_case(case: Case, zoo_mod, cache: ModelCache, device: str, reps=None) -> dict:
    import torch

    from validation.measure import timing as measure
    cuda = device == "cuda"
    entry = zoo_mod.get(case.model)
    rec = describe(case, entry)
    rec["env"] = measure.env_info() if cuda else {"device": device, "torch": torch.__version__}
    rec["flags"] = _flags()
    t0 = time.time()
    torch.manual_seed(0)
    key = (case.model, case.sizes.get("hw"))
    mod, args = cache.get(key, lambda: zoo_mod.build(case.model, device=device,
                                                     dtype=torch.float32, **case.sizes))
    rec["build_s"] = round(time.time() - t0, 3) if args is not None else 0.0
    if args is None:
        from validation.measure.zoo_inputs import make_inputs
        args = make_inputs(entry, mod, case.sizes, device, torch.float32, False, zoo_mod)
    step, opt, scaler, batch = build_step(rec, mod, args, device)
    rec["optimizer_defaults"] = {k: v for k, v in opt.defaults.items()
                                 if isinstance(v, (bool, int, float, str, tuple, type(None)))}
    rec["num_classes"] = num_classes(mod) if "y" in batch else None
    rec["other_cached_models_bytes"] = sum(nb for k, (_, nb) in cache.items.items() if k != key)
    sync = torch.cuda.synchronize if cuda else (lambda: None)
    try:
        if case.run == "compiled":
            from torch._dynamo.utils import counters
            torch._dynamo.reset()
            counters.clear()
        tw = time.perf_counter()
        step()                               # creates the optimizer state (and compiles)
        sync()
        rec["first_step_s"] = round(time.perf_counter() - tw, 3)
        if case.run == "compiled":
            rec["compile_s"] = rec["first_step_s"]
            rec["dynamo"] = {"unique_graphs": counters["stats"].get("unique_graphs"),
                             "graph_breaks": dict(counters["graph_break"]),
                             "calls_captured": counters["stats"].get("calls_captured")}
        for _ in range(3):
            step()
        sync()
        one_s = (time.perf_counter() - tw - rec["first_step_s"]) / 3
        if scaler is not None:
            # a step whose gradients overflow skips the optimizer (no AdamW kernels) and
            # halves the scale: warm up until a step leaves the scale alone (random
            # weights overflow early; the H100 run saw 65536 -> 8192 in 4 steps)
            scale = float(scaler.get_scale())
            for _ in range(6):
                step()
                scale, prev = float(scaler.get_scale()), scale
                if scale == prev:
                    break
            rec["grad_scaler_scale"] = {"after_warmup": scale}
        rec["warmup_s"] = round(time.perf_counter() - tw, 3)
        if cuda:
            rec["memory"] = step_memory(step, mod, opt, batch)
            m = rec["memory"]
            other = rec["other_cached_models_bytes"] + m["flush_buffer_bytes"]
            m["resident_case_bytes"] = m["resident_before_step"] - other
            m["peak_step_case_bytes"] = m["peak_step_allocated"] - other
        if reps is None:
            reps = 1 if one_s > 0.1 else (2 if one_s > 0.03 else 3)
        prof = measure.profile_phases(step, reps=reps, flush=cuda)
        if scaler is not None:              # a fall: a profiled step skipped its optimizer
            rec["grad_scaler_scale"]["after_profile"] = float(scaler.get_scale())
        kernels, phases = [], {}
        for ph in PHASES:
            p = prof["phases"].get(ph, {"kernels": [], "per_call_kernel_count": [], "host": {}})
            kernels += [dict(k, phase=ph) for k in p["kernels"]]
            phases[ph] = {"kernel_count": len(p["kernels"]),
                          "kernel_sum_us": round(sum(k["us"] for k in p["kernels"]), 3),
                          "per_call_kernel_count": p["per_call_kernel_count"],
                          "memcpy_memset": p.get("memcpy_memset", []), "host": p["host"]}
        rec["profile"] = {"reps": reps, "split": prof["split"],
                          "gpu_annotations_dropped": prof["gpu_annotations"]}
        if cuda and not kernels:
            rec["profile"]["warning"] = "no kernel attributed to any phase"
        rec["kernels"] = kernels
        rec["phases"] = phases
        rec["kernel_count"] = len(kernels)
        rec["kernel_sum_us"] = round(sum(k["us"] for k in kernels), 3)
        n = int(min(max(10, 0.5 / max(one_s, 1e-4)), 50))
        rec["wall"] = time_steps(step, n, cuda)
        rec["wall_us"] = rec["wall"]["median_us"]
        if scaler is not None:
            rec["grad_scaler_scale"]["at_end"] = float(scaler.get_scale())
    finally:
        opt.zero_grad(set_to_none=True)
        mod.zero_grad(set_to_none=True)
        del step, opt, scaler, batch, args
        if case.run == "compiled":
            torch._dynamo.reset()
    rec["elapsed_s"] = round(time.time() - t0, 2)
    return rec


def failed_row(case: Case, entry, e: BaseException, t0: float, device: str) -> dict:
    rec = describe(case, entry) if entry is not None else {"case_id": case.case_id,
                                                             "model": case.model}
    rec["failed"] = one_line(e)
    rec["elapsed_s"] = round(time.time() - t0, 2)
    try:
        from validation.measure import timing as measure
        rec["env"] = measure.env_info() if device == "cuda" else {"device": device}
    except Exception:  # noqa: BLE001
        pass
    return rec


def run(out, cases, deadline_s=None, reserve_s=0.0, device="cuda", zoo_mod=None,
        t_start=None, case_timeout_s=90.0, competitors=False, cache_gb=8.0, reps=None):
    """Run ``cases`` in order until the deadline, one row appended to ``out`` per case;
    returns ``{"done", "failed", "not_reached"}``."""
    import torch
    if zoo_mod is None:
        from gpusim.models import zoo as zoo_mod
    t_start = t_start or time.time()
    deadline = t_start + (deadline_s if deadline_s else 1e12)
    cache = ModelCache(int(cache_gb * (1 << 30)))
    pending = list(cases)
    summary = {"done": [], "failed": {}, "not_reached": []}
    i = 0
    while True:
        c = next_case(pending, time.time(), deadline, reserve_s)
        if c is None:
            break
        pending.remove(c)
        i += 1
        left = deadline - time.time()
        if c.run == "compiled" and left < 60:
            summary["not_reached"].append(c.case_id)      # a compile would overrun the limit
            continue
        limit = min(case_timeout_s * (3 if c.run == "compiled" else 1), max(left + 30, 10))
        t0 = time.time()
        entry = None
        try:
            entry = zoo_mod.get(c.model)
            if competitors:                  # each tool under its own limit
                from validation.measure.train_competitors import run_competitors
                rec = run_competitors(c, zoo_mod, describe(c, entry), device,
                                      tool_timeout_s=min(case_timeout_s, limit))
            else:
                with time_limit(limit):
                    rec = run_case(c, zoo_mod, cache, device, reps)
        except Exception as e:  # noqa: BLE001 - one failing case never stops the run
            rec = failed_row(c, entry, e, t0, device)
            if "out of memory" in str(e).lower():
                cache.evict(all_=True)
        gc.collect()
        if device == "cuda":
            torch.cuda.empty_cache()
        write_record(out, rec)
        tag = f"[{i}/{len(cases)} {time.time() - t_start:5.0f}s] {c.case_id}:"
        if rec.get("failed"):
            summary["failed"][c.case_id] = rec["failed"]
            print(f"{tag} FAILED {rec['failed']}", flush=True)
        else:
            summary["done"].append(c.case_id)
            if competitors:
                print(f"{tag} {rec.get('summary')} ({rec['elapsed_s']:.1f}s)", flush=True)
                continue
            ph = rec["phases"]
            mem = rec.get("memory") or {}
            print(f"{tag} {rec['kernel_count']} kernels (fwd {ph['forward']['kernel_count']}, "
                  f"bwd {ph['backward']['kernel_count']}, opt {ph['optimizer']['kernel_count']}) "
                  f"{rec['kernel_sum_us']:.0f} us, wall {rec['wall_us']:.0f} us, peak "
                  f"{mem.get('peak_step_allocated', 0) / 2**30:.2f} GiB in "
                  f"{mem.get('peak_phase')} ({rec['elapsed_s']:.1f}s)", flush=True)
    summary["not_reached"] += [c.case_id for c in pending]
    cache.evict(all_=True)
    return summary


def summarize(rows) -> str:
    """A short text report of training records: counts, the failures by reason, and a
    table of the bf16 AdamW and compiled cases (kernels per phase, sums, walls, peaks)."""
    from gpusim.util.fmt import table

    from validation.records.store import failure_lines
    ok = [r for r in rows if not r.get("failed") and "phases" in r]
    splits = sorted({(r.get("profile") or {}).get("split") for r in ok} - {None})
    out = [f"train records: {len(rows)} rows, {len(ok)} measured, "
           f"{sum(1 for r in rows if r.get('failed'))} failed; kernel split {', '.join(splits) or '-'}"]
    out += ["  " + ln for ln in failure_lines(rows)]
    sel = [r for r in ok if r["run"] == "compiled"
           or (r.get("precision") == "bf16" and r.get("optimizer") == "adamw")]
    if sel:
        body = []
        for r in sel:
            ph, mem = r["phases"], r.get("memory") or {}
            peak = mem.get("peak_step_case_bytes", mem.get("peak_step_allocated"))
            body.append([f"{r['model']} {'x'.join(str(v) for v in r['sizes'].values())} {r['run']}",
                         "/".join(str(ph[p]["kernel_count"]) for p in ("forward", "backward", "optimizer")),
                         f"{r['kernel_sum_us'] / 1e3:.2f}", f"{r['wall_us'] / 1e3:.2f}",
                         f"{peak / 2**30:.2f}" if peak is not None else "-",
                         mem.get("peak_phase") or "-"])
        out.append(table(body, ["bf16 AdamW case", "kernels f/b/o", "sum ms", "wall ms",
                                "peak GiB", "peak in"]))
    return "\n".join(out)


def _tiers(text: str) -> set:
    try:
        return {int(t) for t in text.split(",") if t.strip()}
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r}: give tier numbers, e.g. 0,1,2") from None


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python3 -m validation.measure.train_run")
    ap.add_argument("--out", required=True, help="records file (.jsonl.gz): one row per case")
    ap.add_argument("--cases", default=None,
                    help="comma-separated fnmatch patterns on case ids or model names")
    ap.add_argument("--deadline-s", type=float, default=None,
                    help="start no new case after this many seconds")
    ap.add_argument("--case-timeout-s", type=float, default=90.0,
                    help="a case running longer fails (compiled cases: 3x)")
    ap.add_argument("--compiled-reserve-s", type=float, default=0.0,
                    help="run compiled cases first once the deadline is this close")
    ap.add_argument("--tiers", default=None, type=_tiers,
                    help="comma-separated plan tiers to run (see plan_cases; e.g. 0,1,2,3,6 "
                         "in one command and 4,5 in another)")
    ap.add_argument("--skip-done", default=None, help="skip cases recorded (not failed) in this file")
    ap.add_argument("--no-compiled", action="store_true", help="leave the compiled cases out")
    ap.add_argument("--competitors", action="store_true",
                    help="run MemTracker and RuntimeEstimator on each case's step instead of "
                         "measuring it")
    ap.add_argument("--plan", action="store_true", help="print the case plan and exit")
    ap.add_argument("--summary", action="store_true",
                    help="print a short report of the records in --out and exit (no GPU)")
    a = ap.parse_args(argv)
    t_start = time.time()
    if a.summary:
        from validation.records.store import read_records
        print(summarize(read_records(a.out)))
        return 0
    from gpusim.models import zoo as zoo_mod
    patterns = [p for p in a.cases.split(",") if p] if a.cases else None
    cases = plan_cases(zoo_mod, patterns=patterns, compiled=() if a.no_compiled else COMPILED)
    if a.tiers:
        cases = [c for c in cases if c.tier in a.tiers]
    if a.competitors:
        cases = [c for c in cases if c.run == "eager"]
    done = done_ids(a.skip_done) if a.skip_done else set()
    cases = [c for c in cases if c.case_id not in done]
    if a.plan:
        for c in cases:
            print(c.tier, c.case_id)
        print(f"{len(cases)} cases")
        return 0
    from validation.measure import timing as measure
    measure.require_cuda()
    print(f"train_run: {len(cases)} cases, deadline {a.deadline_s} s"
          f"{', competitors' if a.competitors else ''}", flush=True)
    s = run(a.out, cases, a.deadline_s, a.compiled_reserve_s, "cuda", zoo_mod, t_start,
            a.case_timeout_s, a.competitors)
    print_summary("train_run", s, t_start)
    return 0


if __name__ == "__main__":
    sys.exit(main())
