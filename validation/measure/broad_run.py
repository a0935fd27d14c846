"""Measure a broad, hash-sampled set of models on the CUDA GPU at hand (inference).

``python3 -m validation.measure.broad_run --out FILE.jsonl.gz [--n N] [--deadline-s N]
[--fp32] [--no-hf] [--case-timeout-s N] [--skip-done FILE] [--plan]``

Models: the ``N`` timm names (``timm.list_models()``) with the lowest sha1 of their name
(:func:`sample_timm`; a model whose pretrained config's input is over 384 px is skipped,
the next one taken), and :data:`HF_CONFIGS`, Hugging Face models built from transformers'
own config classes with the keyword arguments written there (nothing downloaded).
One case per model, as timm's benchmark measures inference: batch 256 (text: 64 x 256
tokens) under ``torch.autocast("cuda", dtype=float16)`` over fp32 weights, eager,
``torch.no_grad()``; ``--fp32`` adds the same cases in fp32 after every AMP case. A probe
call first (:func:`probe`: up to 3 calls, the fastest counts): a model that runs out of
memory, or whose fastest call takes over ``SLOW_S``, has its batch halved (down to
``MIN_BATCH``) before it is measured.

Each case is measured by the zoo harness's own per-case function
(:func:`validation.measure.zoo_run.run_case`, ``quick``: 2 warm-up calls, 2 profiled calls, wall
time from 2 batches of >= 50 ms), so a row holds the zoo rows' fields (kernel list,
count, sum, wall, peak memory, host statistics) plus ``amp``, ``batch_halvings`` and,
for Hugging Face models, ``hf_config`` {``model_type``, ``class``, ``kwargs``, ``inputs``}:
the predictor rebuilds one with ``AutoConfig.for_model(model_type, **kwargs)`` and
``getattr(transformers, class)(config)``; ``BroadZoo.from_row(rec).build(rec["model"],
device="meta", **rec["sizes"])`` does it for any row (``timm:<name>`` through
``gpusim.models.zoo``), as the row was measured.

Budget (one device command of <= 540 s on an H100): a timm model at batch 256 under AMP
takes ~5-50 ms a call (1-20 GFLOPs per image, 0.5-10 TFLOP a call at ~200 TFLOP/s
eager), and a case makes ~15 calls (2 probe, 2 warm-up, 1 timed, 1 memory, 2 profiled,
~7 timed for the wall), so ~0.1-0.8 s of GPU work; the rest is building the model on
the GPU (~0.3-1.5 s), the first calls' lazy kernel loading and cuDNN heuristics, and the
profiler's event processing (~0.3-1 s): ~1.5-3 s a model, so ~150-300 models in ~480 s.
``SLOW_S`` caps a call at 0.25 s (about 4 s of calls a case); ``--case-timeout-s``
(default 30) bounds the rest. A deadline stops starting cases; ``--skip-done`` resumes.
"""

from __future__ import annotations

import argparse
import gc
import hashlib
import math
import sys
import time
from dataclasses import replace

from validation.measure.zoo_run import autocast_call, print_summary, run_case, time_limit, write_record
from validation.measure.zoo_plan import one_line
from validation.measure.zoo_inputs import ModelCache
from validation.measure.zoo_plan import Case

SLOW_S = 0.25          # the fastest probe call slower than this halves the batch
PROBE_CALLS = 3         # at most this many probe calls ...
PROBE_BUDGET_S = 8.0    # ... and no further call once they add up to this
MIN_BATCH = 8
MAX_HW = 384
VISION_SIZES = {"batch": 256}
# text: 64 x 256 tokens (at 32 x 128 the H100 run of 2026-11-25 found BERT-size encoders
# host-bound: wall 4.6-6x their kernel sum)

from validation.records.broad_zoo import (ENCDEC_SIZES, HF_CONFIGS, TEXT_SIZES,  # noqa: E402,F401
                                  BroadZoo, hf_sizes)


def name_hash(name: str) -> str:
    return hashlib.sha1(name.encode()).hexdigest()


def sample_timm(n: int, names=None, input_size=None, max_hw: int = MAX_HW) -> list:
    """``[(name, hw)]``: the ``n`` names with the lowest sha1 among those whose pretrained
    input size is at most ``max_hw`` (``names``/``input_size``: timm's by default)."""
    if names is None:
        import timm
        names = timm.list_models()
    if input_size is None:
        def input_size(name):            # gpusim.models.zoo's: the pretrained config's input
            from gpusim.models import zoo
            return zoo.get(f"timm:{name}").defaults["hw"]
    out = []
    for name in sorted(names, key=name_hash):
        if len(out) >= n:
            break
        hw = input_size(name)
        if hw <= max_hw:
            out.append((name, hw))
    return out


def case_id(model, sizes, amp) -> str:
    sz = "_".join(f"{k}{v}" for k, v in sizes.items())
    return f"{model}__{sz}__{amp or 'float32'}__eager"


def make_case(model, family, sizes, amp, tier, order) -> Case:
    extra = {"amp": amp, "quick": True, "warmup": 2, "batch_halvings": 0}
    return Case(case_id(model, sizes, amp), model, family, "broad", dict(sizes), "float32",
                False, "eager", tier, order, extra)


def plan_cases(timm_models, hf_types=(), fp32=False, zoo=None) -> list:
    """AMP fp16 cases of every model (timm and Hugging Face interleaved, so a deadline
    cuts both), then with ``fp32`` the same models in fp32."""
    zoo = zoo or BroadZoo()
    models = [(f"timm:{n}", _timm_family(n), {"batch": VISION_SIZES["batch"], "hw": hw})
              for n, hw in timm_models]
    hf = [(f"hfcfg:{t}", zoo.get(f"hfcfg:{t}").family, zoo.get(f"hfcfg:{t}").defaults)
          for t in hf_types]
    # one Hugging Face model after every few timm models
    step = max(1, len(models) // max(1, len(hf)))
    mixed = []
    for i, m in enumerate(models):
        if hf and i % step == 0:
            mixed.append(hf.pop(0))
        mixed.append(m)
    mixed += hf
    cases = [make_case(m, f, s, "float16", 0, i) for i, (m, f, s) in enumerate(mixed)]
    if fp32:
        cases += [make_case(m, f, s, None, 1, i) for i, (m, f, s) in enumerate(mixed)]
    return cases


def _timm_family(name: str) -> str:
    """gpusim.models.zoo's family of a timm model ("cnn" where timm is not installed: plans in
    tests)."""
    try:
        from gpusim.models import zoo
        return zoo.get(f"timm:{name}").family
    except Exception:  # noqa: BLE001
        return "cnn"


# ------------------------------------------------------------------------ run
def is_oom(e: BaseException) -> bool:
    return "out of memory" in str(e).lower() or type(e).__name__ == "OutOfMemoryError"


def probe(case: Case, zoo, cache: ModelCache, device: str) -> list:
    """Seconds of the first calls of the case's model: up to ``PROBE_CALLS``, stopping
    at a call under ``SLOW_S`` or once they add up to ``PROBE_BUDGET_S``. The first call
    at a new input shape is no steady state: it loads kernels and asks cuDNN's
    heuristics for every new convolution (seconds for a depthwise-heavy net: an H100
    run, 2026-11-25, halved 40 of 116 timm models' batches on the first call's time
    alone), so the decision takes the fastest call. Builds the model into ``cache``
    so the measurement reuses it."""
    import torch
    key = (case.model, case.dtype, case.channels_last, case.sizes.get("hw"))
    t0 = time.time()
    mod, args = cache.get(key, lambda: zoo.build(case.model, device=device,
                                                 dtype=torch.float32, **case.sizes))
    if args is not None:
        case.extra["build_s"] = round(time.time() - t0, 3)
    if args is None:
        args = zoo.inputs(case.model, mod, device=device, dtype=torch.float32, **case.sizes)
    fn = autocast_call(mod, case.extra.get("amp"), device)
    sync = torch.cuda.synchronize if device == "cuda" else (lambda: None)
    times = []
    try:
        with torch.no_grad():
            while len(times) < PROBE_CALLS and sum(times) < PROBE_BUDGET_S:
                t0 = time.perf_counter()
                fn(*args)
                sync()
                times.append(time.perf_counter() - t0)
                if times[-1] <= SLOW_S:
                    break
        return times
    finally:
        del args


def halved(case: Case, times: int = 1) -> Case | None:
    b = case.sizes["batch"] >> times
    if b < MIN_BATCH:
        return None
    sizes = dict(case.sizes, batch=b)
    extra = dict(case.extra, batch_halvings=case.extra.get("batch_halvings", 0) + times)
    return replace(case, case_id=case_id(case.model, sizes, case.extra.get("amp")), sizes=sizes,
                   extra=extra)


def _free(cache: ModelCache, device: str) -> None:
    import torch
    cache.evict(all_=True)
    cache.failed.clear()                       # a smaller batch may build and run
    gc.collect()
    if device == "cuda":
        torch.cuda.empty_cache()


def _halved_after_oom(e: Exception, case, cache, device):
    """The case at half its batch after an out-of-memory error ``e`` (memory freed first);
    any other error, or a batch that cannot halve, is raised again."""
    nxt = halved(case) if is_oom(e) else None
    if nxt is None:
        raise e
    _free(cache, device)
    return nxt


def measure_case(case: Case, zoo, cache: ModelCache, device: str) -> dict:
    """Probe (halving the batch on OOM or a slow call), then :func:`zoo_run.run_case`
    (an OOM there halves the batch and starts again from the probe)."""
    while True:
        try:
            calls, probe_batch = probe(case, zoo, cache, device), case.sizes["batch"]
            t = min(calls)
        except Exception as e:  # noqa: BLE001
            case = _halved_after_oom(e, case, cache, device)
            continue
        if t > SLOW_S and halved(case) is not None:
            k = min(int(math.ceil(math.log2(t / SLOW_S))), int(math.log2(case.sizes["batch"] / MIN_BATCH)))
            if k > 0:
                case = halved(case, k)
        if case.sizes["batch"] == probe_batch:     # the probe's calls were the warm-up's
            case = replace(case, extra=dict(case.extra, warmup=1))
        try:
            rec = run_case(case, zoo, cache, device)
        except Exception as e:  # noqa: BLE001
            case = _halved_after_oom(e, case, cache, device)
            continue
        break
    rec["build_s"] = case.extra.get("build_s", rec.get("build_s"))   # built by the probe
    rec["batch_halvings"] = case.extra.get("batch_halvings", 0)
    rec["probe"] = {"batch": probe_batch, "calls_s": [round(x, 4) for x in calls]}
    if case.model.startswith("hfcfg:"):
        rec["hf_config"] = zoo.hf_config(case.model)
    return rec


def run(out, cases, deadline_s=None, device="cuda", zoo=None, t_start=None,
        case_timeout_s=30.0) -> dict:
    import torch
    zoo = zoo or BroadZoo()
    t_start = t_start or time.time()
    deadline = t_start + (deadline_s if deadline_s else 1e12)
    cache = ModelCache(2 << 30)          # one model and its fp32 twin at most
    summary = {"done": [], "failed": {}, "not_reached": []}
    for i, c in enumerate(cases):
        if time.time() >= deadline:
            summary["not_reached"] = [x.case_id for x in cases[i:]]
            break
        t0 = time.time()
        try:
            with time_limit(min(case_timeout_s, max(deadline - time.time() + 20, 5))):
                rec = measure_case(c, zoo, cache, device)
        except Exception as e:  # noqa: BLE001 - one failing model never stops the run
            rec = {"schema": 1, "case_id": c.case_id, "model": c.model, "family": c.family,
                   "size": c.size, "sizes": c.sizes, "dtype": c.dtype, "amp": c.extra.get("amp"),
                   "channels_last": False, "run": c.run, "tier": c.tier,
                   "failed": one_line(e), "elapsed_s": round(time.time() - t0, 2)}
            try:
                if c.model.startswith("hfcfg:"):
                    rec["hf_config"] = zoo.hf_config(c.model)
                from validation.measure import timing as measure
                rec["env"] = measure.env_info() if device == "cuda" else {"device": device}
            except Exception:  # noqa: BLE001
                pass
            cache.evict(all_=True)
        gc.collect()
        if device == "cuda":
            torch.cuda.empty_cache()
        write_record(out, rec)
        tag = f"[{i + 1}/{len(cases)} {time.time() - t_start:5.0f}s] {rec['case_id']}:"
        if rec.get("failed"):
            summary["failed"][c.case_id] = rec["failed"]
            print(f"{tag} FAILED {rec['failed']}", flush=True)
        else:
            summary["done"].append(rec["case_id"])
            peak = (rec.get("memory") or {}).get("peak_allocated_above_pre_call") or 0
            print(f"{tag} {rec['kernel_count']} kernels {rec['kernel_sum_us']:.0f} us, wall "
                  f"{rec['wall_us']:.0f} us, peak {peak / 2**30:.2f} GiB ({rec['elapsed_s']:.1f}s)",
                  flush=True)
    cache.evict(all_=True)
    return summary


def summarize(rows) -> str:
    """A short text report of broad records: models measured and failed (timm and
    Hugging Face apart), halved batches, the failures by reason, medians."""
    import statistics

    from validation.records.store import failure_lines
    out = []
    for lib, pre in (("timm", "timm:"), ("Hugging Face configs", "hfcfg:")):
        rs = [r for r in rows if r.get("model", "").startswith(pre)]
        ok = [r for r in rs if not r.get("failed")]
        if not rs:
            continue
        walls = [r["wall_us"] for r in ok if r.get("wall_us")]
        ks = [r["kernel_count"] for r in ok if "kernel_count" in r]
        out.append(f"{lib}: {len(rs)} rows, {len(ok)} measured, {len(rs) - len(ok)} failed, "
                   f"{sum(1 for r in ok if r.get('batch_halvings'))} with a halved batch; median "
                   f"{statistics.median(ks) if ks else 0:.0f} kernels, wall "
                   f"{(statistics.median(walls) if walls else 0) / 1e3:.2f} ms, case "
                   f"{statistics.median(r.get('elapsed_s', 0) for r in rs):.1f} s")
    out += ["  " + ln for ln in failure_lines(rows)]
    return "\n".join(out) or "no records"


def done_models(rows) -> set:
    """``{(model, amp)}`` measured in ``rows`` (a halved batch changes the case id, so by
    model). Rows whose batch was halved on the first probe call alone (no ``probe``
    field: the first H100 run) count as not done: they are measured again."""
    return {(r["model"], r.get("amp")) for r in rows if not r.get("failed")
            and not (r.get("batch_halvings") and "probe" not in r)}


def merge_rows(old, new) -> list:
    """``old`` rows without those ``new`` measures again (same model and amp), then
    ``new``: a continuation run's file joined to the earlier one."""
    again = {(r["model"], r.get("amp")) for r in new}
    return [r for r in old if (r["model"], r.get("amp")) not in again] + list(new)


def _shard(text: str) -> tuple:
    try:
        i, n = (int(x) for x in text.split("/"))
        if 0 <= i < n:
            return i, n
    except ValueError:
        pass
    raise argparse.ArgumentTypeError(f"{text!r}: give I/N with 0 <= I < N, e.g. 0/2")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python3 -m validation.measure.broad_run")
    ap.add_argument("--out", required=True, help="records file (.jsonl.gz): one row per case")
    ap.add_argument("--n", type=int, default=200, help="timm models (lowest sha1 of the name)")
    ap.add_argument("--deadline-s", type=float, default=None,
                    help="start no new case after this many seconds")
    ap.add_argument("--case-timeout-s", type=float, default=30.0)
    ap.add_argument("--fp32", action="store_true", help="also every model in fp32, after AMP")
    ap.add_argument("--no-hf", action="store_true", help="leave the Hugging Face configs out")
    ap.add_argument("--shard", default=None, type=_shard,
                    help="I/N: run only every N-th case from the I-th")
    ap.add_argument("--skip-done", default=None, help="skip models recorded (not failed) in this file")
    ap.add_argument("--plan", action="store_true", help="print the case plan and exit")
    ap.add_argument("--summary", action="store_true",
                    help="print a short report of the records in --out and exit (no GPU)")
    ap.add_argument("--merge", nargs=2, metavar=("OLD", "NEW"), default=None,
                    help="write OLD's rows less the models NEW measured again, then NEW's, "
                         "to --out, and exit (no GPU)")
    a = ap.parse_args(argv)
    t_start = time.time()
    if a.merge:
        from validation.records.store import read_records, write_records
        rows = merge_rows(read_records(a.merge[0]), read_records(a.merge[1]))
        write_records(a.out, rows)
        print(f"{a.out}: {len(rows)} rows")
        return 0
    if a.summary:
        from validation.records.store import read_records
        print(summarize(read_records(a.out)))
        return 0
    if a.n < 0:
        ap.error("--n must be >= 0")
    timm_models = sample_timm(a.n)
    cases = plan_cases(timm_models, () if a.no_hf else tuple(HF_CONFIGS), a.fp32)
    if a.shard:
        i, n = a.shard
        cases = cases[i::n]
    if a.skip_done:
        from validation.records.store import read_records
        done = done_models(read_records(a.skip_done))
        cases = [c for c in cases if (c.model, c.extra.get("amp")) not in done]
    if a.plan:
        for c in cases:
            print(c.tier, c.case_id)
        print(f"{len(cases)} cases")
        return 0
    from validation.measure import timing as measure
    measure.require_cuda()
    print(f"broad_run: {len(cases)} cases, deadline {a.deadline_s} s", flush=True)
    s = run(a.out, cases, a.deadline_s, "cuda", BroadZoo(), t_start, a.case_timeout_s)
    print_summary("broad_run", s, t_start)
    return 0


if __name__ == "__main__":
    sys.exit(main())
