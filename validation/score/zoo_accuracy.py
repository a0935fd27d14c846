"""Accuracy on the real-model zoo, by family and GPU.

Zoo records (``validation/results/<gpu>/zoo.jsonl.gz``, one row per case, written by
:mod:`validation.measure.zoo_run` on a real GPU) hold what ran: the profiler's kernel list,
kernel sum, wall time and memory per case. The graph is re-captured here from the zoo
entry (``gpusim.models.zoo.build`` on meta tensors: the same model, sizes and dtype), so a change
to capture or lowering shows in the figures. No zoo record is used to fit anything: every
parameter comes from calibration microbenchmarks, so every figure here is held-out.

Errors are absolute percentage errors of whole-model device time (the kernel sum) and of
the kernel count, per run (eager, compiled), summarised by family. End to end
(:func:`e2e_rows`): the steady-state wall time per call of the records whose lease also ran
``gpusim calibrate --host-only`` (``<gpu>/host/*.toml``; host costs belong to the machine,
so each record is predicted with its own lease's host figures): torch.compile and
``mode="reduce-overhead"`` runs, and the eager run measured beside each compiled one
(``eager_same_lease``), the model's Python priced from capture's counts by the lease's
host profile (:func:`gpusim.hw.host.python_us`). Memory
(:func:`memory_rows`, :func:`memory_summary`): the activation peak above the pre-call
baseline against ``torch.cuda.max_memory_allocated()`` of the measured call (cache emptied
before it, output held); reserved memory is scored on fresh-process records
(:mod:`validation.score.memory_accuracy`).
"""

from __future__ import annotations

import datetime
import functools
import glob
import json
import os


from gpusim.hw.spec import calibrated_name, datasheet_name, load_spec, transfer_spec
from gpusim.hw.host import load_host
from validation.records.store import load_zoo_records, record_graph, zoo_available  # noqa: F401
from validation.score.lowered import predicted, record_memory
from validation.records.stats import FAMILIES, RUNS, _cell, _stats, ape, by_run_family  # noqa: F401

#: A host calibration belongs to the records measured after it on the same lease, within
#: this many seconds (``validation/device_compiled.sh`` runs ``calibrate --host-only``
#: first, then the records, in one device command of at most 10 minutes).
LEASE_WINDOW_S = 1800


def _utc(s: str) -> datetime.datetime:
    return datetime.datetime.fromisoformat(s)


@functools.lru_cache(maxsize=16)
def host_calibrations(results_dir: str, gpu: str) -> tuple:
    """``((utc, path), ...)`` of ``<results_dir>/<gpu>/host/*.toml`` whose raw
    microbenchmarks (``.raw.json``) say when they were measured, oldest first."""
    out = []
    for p in sorted(glob.glob(os.path.join(results_dir, gpu, "host", "*.toml"))):
        raw = p + ".raw.json"
        if os.path.exists(raw):
            with open(raw) as f:
                utc = (json.load(f).get("env") or {}).get("utc")
            if utc:
                out.append((_utc(utc), p))
    return tuple(sorted(out))


def lease_host(results_dir: str, gpu: str, rec: dict) -> str | None:
    """The host calibration (a ``<gpu>/host/*.toml`` path) of the lease that measured
    ``rec``: the latest one taken on the same host before the record, at most
    :data:`LEASE_WINDOW_S` earlier; None when its lease ran none."""
    env = rec.get("env") or {}
    if not env.get("utc"):
        return None
    t = _utc(env["utc"])
    best = None
    for tc, p in host_calibrations(results_dir, gpu):
        if tc <= t and (t - tc).total_seconds() <= LEASE_WINDOW_S:
            best = p
    return best


def lease_setup(spec, path: str):
    """``(spec, host)`` to predict a lease's runs with: the lease's host profile (``path``,
    a ``<gpu>/host/*.toml``) and ``spec`` with the GPU steady state the lease measured
    beside it (its ``[gpu] stream_busy_factor``, when it has one): host costs belong to
    the machine that ran the program.
    A figure the lease did not measure (its ``eager_forward_factor`` when it timed no
    reference forwards, its ``kernel_launch_us`` when it predates that benchmark) is its
    machine kind's (``hosts/<datasheet>-host.toml``, the GPU being ``path``'s results
    folder), as it was the calibrated spec's before host profiles were apart."""
    import tomllib
    from gpusim.hw.host import FIELDS, host_names
    with open(path, "rb") as f:
        gpu = tomllib.load(f).get("gpu") or {}
    busy = (gpu.get("stream_busy_factor") or {}).get("value")
    host = load_host(path)
    kind = f"{datasheet_name(os.path.basename(os.path.dirname(os.path.dirname(path))))}-host"
    if kind in host_names():
        base = load_host(kind)
        host = host.replace(**{k: getattr(base, k) for k in FIELDS
                               if getattr(host, k) is None and getattr(base, k) is not None})
    return (spec.replace(stream_busy_factor=busy) if busy else spec), host


def case_rows(records: list[dict], spec, host=None) -> list[dict]:
    """One row per record: predicted and measured device time and kernel count (and end
    to end on ``host``, a host profile; None: the reference host)."""
    rows = []
    for r in records:
        g = record_graph(r)
        p = predicted(g, spec, r["run"], host)
        rows.append({"case": r["case_id"], "model": r["model"], "family": r["family"],
                     "run": r["run"], "dtype": r["dtype"], "size": r["size"],
                     "pred_us": p.device_us, "meas_us": r["kernel_sum_us"],
                     "pred_kernels": p.kernel_count, "meas_kernels": r["kernel_count"],
                     "pred_e2e_us": p.end_to_end_us, "meas_wall_us": r.get("wall_us")})
    return rows


def kind_host(gpu: str):
    """The host profile of the machine kind that measured ``gpu``'s records
    (``hosts/<datasheet>-host.toml``), or None when gpusim has none for it."""
    from gpusim.hw.host import host_names
    name = f"{datasheet_name(gpu)}-host"
    return load_host(name) if name in host_names() else None


def e2e_rows(records: list[dict], spec, results_dir: str, gpu: str) -> list[dict]:
    """End to end, one row per measured wall time whose lease has a host calibration
    (:func:`lease_host`): predicted (``spec``'s GPU, that lease's host figures) and
    measured steady-state wall per call, for torch.compile and CUDA-graph records and the
    eager run beside each compiled one (``eager_same_lease``; eager priced with the
    model's Python priced from capture's counts). Also the parts that explain an error: measured and
    predicted kernel sum, predicted host time and the host's counts per call."""
    rows = []
    for r in records:
        host = lease_host(results_dir, gpu, r)
        if host is None or r["run"] == "eager":
            continue                     # eager records' leases ran no host calibration
        s, hp = lease_setup(spec, host)
        runs = [(r["run"], r, record_graph(r))]
        es = r.get("eager_same_lease")
        if r["run"] == "compiled" and es and es.get("wall_us"):
            runs.append(("eager", es, record_graph(dict(r, run="eager"))))
        for run, m, g in runs:
            p = predicted(g, s, run, hp)
            h = m.get("host") or {}
            rows.append({"case": r["case_id"], "model": r["model"], "family": r["family"],
                         "run": run, "lease": os.path.basename(host).rsplit(".", 1)[0],
                         "pred_us": p.end_to_end_us, "meas_us": m["wall_us"],
                         "pred_device_us": p.device_us, "meas_kernel_sum_us": m["kernel_sum_us"],
                         "pred_host_us": p.timeline.host_us, "pred_python_us": p.timeline.python_us,
                         "pred_kernels": p.kernel_count, "meas_kernels": m.get("kernel_count"),
                         "meas_launches": h.get("cuda_launches"), "meas_aten_ops": h.get("aten_ops_top"),
                         "inputs": g.meta.get("inputs", 0)})
    return rows


def host_leases(results_dir: str, gpu: str) -> list[tuple[str, str]]:
    """``[(host calibration .toml, its lease's eager walls .jsonl)]`` under
    ``<results_dir>/<gpu>/host/``: leases that ran ``validation/device_host.sh``."""
    out = []
    for w in sorted(glob.glob(os.path.join(results_dir, gpu, "host", "*-walls.jsonl"))):
        toml = w[:-len("-walls.jsonl")] + ".toml"
        if os.path.exists(toml):
            out.append((toml, w))
    return out


def lease_wall_rows(results_dir: str, gpu: str, spec) -> list[dict]:
    """Eager end to end on the host leases (:func:`host_leases`): every zoo model in bf16
    at its default and large size, measured on the lease right after its ``gpusim
    calibrate --host-only``. Predicted with ``spec``'s GPU and that calibration's host
    figures (``pred_us``: its ``eager_forward_factor`` too), with the factor re-fitted
    from the reference forwards' walls measured right before the case (``pred_case_us``:
    what the host's drift within the lease costs), and without the factor
    (``pred_flat_us``: tight-loop figures alone). The model's Python is priced from
    capture's counts by the lease's host profile."""
    from gpusim.models import zoo            # optional extra
    from validation.measure.reference_forwards import forward_factor, reference_predictions
    rows = []
    for toml, walls in host_leases(results_dir, gpu):
        s, hp = lease_setup(spec, toml)
        refs = reference_predictions(s, hp)   # every case's walls are fitted against these
        lease = os.path.basename(toml).rsplit(".", 1)[0]
        with open(walls) as f:
            recs = [json.loads(line) for line in f if line.strip()]
        for r in recs:
            if "error" in r or not r.get("wall_us"):
                continue
            g = record_graph(dict(r, dtype="bfloat16", channels_last=False, run="eager"))
            case_f, _ = forward_factor(r["reference_walls"], s, hp, refs)
            p = predicted(g, s, "eager", hp)
            rows.append({"case": f"{r['model']}__{r['size']}", "model": r["model"],
                         "family": zoo.get(r["model"]).family, "size": r["size"], "lease": lease,
                         "run": "eager", "meas_us": r["wall_us"], "pred_us": p.end_to_end_us,
                         "pred_case_us": predicted(g, s, "eager", hp.replace(
                             eager_forward_factor=case_f)).end_to_end_us,
                         "pred_flat_us": predicted(g, s, "eager", hp.replace(
                             eager_forward_factor=None)).end_to_end_us,
                         "case_factor": case_f, "lease_factor": hp.eager_forward_factor,
                         "pred_device_us": p.device_us, "meas_kernel_sum_us": r["kernel_sum_us"]})
    return rows


#: the predictions :func:`lease_wall_rows` scores, in table order
LEASE_PREDICTIONS = (("pred_us", "one calibration per lease"),
                     ("pred_case_us", "reference forwards re-measured beside each case"),
                     ("pred_flat_us", "without eager_forward_factor"))


def lease_wall_summary(rows: list[dict]) -> dict:
    """``{"eager": {family|"all": {prediction key: stats}}}`` of :func:`lease_wall_rows`."""
    return by_run_family(rows, lambda sel: {k: _stats([ape(r[k], r["meas_us"]) for r in sel])
                                            for k, _ in LEASE_PREDICTIONS})


def e2e_summary(rows: list[dict]) -> dict:
    """``{run: {family|"all": {"e2e": stats}}}``: absolute % error of the wall per call."""
    return by_run_family(rows, lambda sel: {"e2e": _stats([ape(r["pred_us"], r["meas_us"])
                                                           for r in sel])})


def fastest_rows(e2e: list[dict]) -> list[dict]:
    """Which of eager, torch.compile and CUDA graphs is fastest end to end, predicted and
    measured, per zoo model and size among the runs its lease measured (:func:`e2e_rows`:
    eager beside compiled, and on the H200 reduce-overhead too)."""
    by: dict = {}
    for r in e2e:
        by.setdefault((r["model"], "__".join(r["case"].split("__")[1:4])), {})[r["run"]] = r
    out = []
    for (model, size), runs in sorted(by.items()):
        if len(runs) < 2:
            continue
        pred = min(runs, key=lambda k: runs[k]["pred_us"])
        meas = min(runs, key=lambda k: runs[k]["meas_us"])
        out.append({"model": model, "size": size, "runs": sorted(runs), "pred": pred,
                    "meas": meas, "right": pred == meas})
    return out


def speedup_rows(records: list[dict], spec, e2e: list[dict] | None = None) -> list[dict]:
    """torch.compile's speed-up over eager, predicted and measured, for every compiled
    record that also measured eager on its lease (``eager_same_lease``): device time
    (kernel sums) and end to end (wall per call), each with its verdict (helps or
    hurts) and, when compile is predicted to hurt, the compiled kernels most slower
    than eager's. ``e2e``: :func:`e2e_rows`; where a case has its eager and compiled
    rows there, the end-to-end speed-up is theirs (the lease's host profile), else the
    reference host's."""
    by = {(x["case"], x["run"]): x for x in (e2e or [])}
    rows = []
    for r in records:
        es = r.get("eager_same_lease")
        if r["run"] != "compiled" or not es or not es.get("kernel_sum_us"):
            continue
        pc = predicted(record_graph(r), spec, "compiled")
        pe = predicted(record_graph(dict(r, run="eager")), spec, "eager")
        ee, ec = by.get((r["case_id"], "eager")), by.get((r["case_id"], "compiled"))
        e2e_pred = (ee["pred_us"] / ec["pred_us"] if ee and ec
                    else pe.end_to_end_us / pc.end_to_end_us)
        row = {"case": r["case_id"], "model": r["model"], "family": r["family"],
               "e2e_host": ec["lease"] if ee and ec else spec.name}
        for key, pred, meas in (("device", pe.device_us / pc.device_us,
                                 es["kernel_sum_us"] / r["kernel_sum_us"]),
                                ("e2e", e2e_pred, es["wall_us"] / r["wall_us"])):
            row[key] = {"pred": pred, "meas": meas, "error": ape(pred, meas),
                        "verdict_right": (pred > 1) == (meas > 1)}
        if row["device"]["pred"] < 1:
            slow = sorted(pc.kernels, key=lambda k: -k.us)[:3]
            row["hurts_because"] = [k.name for k in slow]
        rows.append(row)
    return rows


def speedup_summary(rows: list[dict]) -> dict:
    out = {}
    for key in ("device", "e2e"):
        e = [r[key]["error"] for r in rows]
        if e:
            out[key] = dict(_stats(e), verdict_right=sum(r[key]["verdict_right"] for r in rows))
    return out


def summarise(rows: list[dict], key: str = "device") -> dict | None:
    if key == "device":
        return _stats([ape(r["pred_us"], r["meas_us"]) for r in rows])
    return _stats([ape(r["pred_kernels"], r["meas_kernels"]) for r in rows])


def zoo_report(results_dir: str, gpus) -> dict:
    """``{gpu: {spec_label: {run: {family|"all": {"device": .., "kernels": ..}}}}}``."""
    out = {}
    for gpu in gpus:
        recs = load_zoo_records(results_dir, gpu)
        if not recs:
            continue
        specs = {"calibrated": calibrated_name(gpu), "datasheet": datasheet_name(gpu)}
        entry = {"records": len(recs), "rows": {}}
        for label, name in specs.items():
            if name:
                entry[label] = _by_family(case_rows(recs, load_spec(name)))
        if specs["calibrated"]:
            e2e = e2e_rows(recs, load_spec(specs["calibrated"]), results_dir, gpu)
            if e2e:
                entry["e2e"] = dict(e2e_summary(e2e), rows=e2e)
            sp = speedup_rows(recs, load_spec(specs["calibrated"]), e2e)
            if sp:
                entry["speedup"] = {"rows": sp, "summary": speedup_summary(sp)}
            fr = fastest_rows(e2e)
            if fr:
                entry["fastest"] = {"rows": fr, "right": sum(r["right"] for r in fr), "n": len(fr)}
        for other in ("h100", "h200"):
            if other != gpu and calibrated_name(other):
                entry[f"unseen (calibrated on {other})"] = _by_family(
                    case_rows(recs, transfer_spec(load_spec(calibrated_name(other)), gpu)))
        lw = lease_wall_rows(results_dir, gpu, load_spec(specs["calibrated"])) if specs["calibrated"] else []
        if lw:
            entry["host_leases"] = dict(lease_wall_summary(lw), rows=lw)
        mem = memory_report(results_dir, [gpu])
        if mem:
            entry["memory"] = mem[gpu]
        out[gpu] = entry
    return out


def memory_rows(records: list[dict], spec=None) -> list[dict]:
    """One row per record with measured memory: predicted and measured activation peak
    (allocated) and the weights. The GPU ``spec`` matters to compiled runs
    only (Inductor's ``pad_mm`` copies and channels-last copies are buffers too)."""
    rows = []
    for r in records:
        m = r.get("memory") or {}
        if m.get("peak_allocated_above_pre_call") is None:
            continue
        est = record_memory(r, "eager" if r["run"] == "eager" else "compiled", spec)
        base = r.get("memory_baseline") or {}
        rows.append({"case": r["case_id"], "model": r["model"], "family": r["family"],
                     "run": r["run"], "pred_peak": est.peak_bytes,
                     "meas_peak": m["peak_allocated_above_pre_call"],
                     "pred_weights": est.weights_bytes, "meas_weights": base.get("weights_bytes"),
                     "peak_ops": list(est.peak_ops)})
    return rows


def memory_summary(rows: list[dict]) -> dict:
    """``{run: {family|"all": {"peak": stats}}}``: absolute percentage errors of the
    allocated peak. (The zoo records' reserved memory is not scored: in the harness's
    process it depends on the free parts of other cached models' segments; reserved is
    scored on fresh-process records, :mod:`validation.score.memory_accuracy`.)"""
    return by_run_family(rows, lambda sel: {"peak": _stats(
        [ape(r["pred_peak"], r["meas_peak"]) for r in sel if r["meas_peak"] > 0])})


def memory_report(results_dir: str, gpus) -> dict:
    """``{gpu: {"summary": memory_summary, "rows": memory_rows, "memtracker":
    memtracker_summary}}`` (the last where ``<gpu>/memtracker.json`` exists)."""
    out = {}
    for gpu in gpus:
        name = calibrated_name(gpu)
        rows = memory_rows(load_zoo_records(results_dir, gpu), load_spec(name) if name else None)
        if rows:
            out[gpu] = {"summary": memory_summary(rows), "rows": rows}
            mt = load_memtracker(results_dir, gpu)
            if mt:
                out[gpu]["memtracker"] = memtracker_summary(mt["cases"], rows)
    from validation.score.memory_accuracy import fresh_report
    for gpu, e in fresh_report(results_dir, gpus).items():
        out.setdefault(gpu, {"summary": {}, "rows": []})["fresh"] = e
    return out


#: MemTracker's two figures (validation.score.memtracker_run): as it runs on a CPU-only
#: host (attention takes ATen's math fallback), and with attention on a fused kernel's
#: meta function, as on a GPU (equal to the first for models without attention)
MEMTRACKER_VARIANTS = {"cpu_host": "memtracker", "fused_sdpa": "memtracker_fused_sdpa"}


def load_memtracker(results_dir: str, gpu: str) -> dict | None:
    """``<results_dir>/<gpu>/memtracker.json`` (``{"env", "cases"}``), or None."""
    p = os.path.join(results_dir, gpu, "memtracker.json")
    if not os.path.exists(p):
        return None
    with open(p) as f:
        return json.load(f)


def memtracker_figure(row: dict, variant: str) -> int | None:
    """MemTracker's peak of one case in ``variant`` (None where it failed)."""
    key = MEMTRACKER_VARIANTS[variant]
    if variant == "fused_sdpa" and key not in row and key + "_error" not in row:
        key = "memtracker"              # no attention: the plain run is the figure
    return row.get(key)


def memtracker_summary(mt_cases: list[dict], rows: list[dict]) -> dict:
    """Per MemTracker variant: cases, failures, and on the cases it ran MemTracker's and
    gpusim's absolute % error of the eager peak against the measured one, and their
    agreement (gpusim against MemTracker). ``rows``: :func:`memory_rows` (eager)."""
    ours = {r["case"]: r for r in rows if r["run"] == "eager"}
    out = {}
    for variant in MEMTRACKER_VARIANTS:
        ran, failed, errors = [], 0, {}
        for c in mt_cases:
            if c["case"] not in ours:
                continue
            v = memtracker_figure(c, variant)
            if v is None:
                failed += 1
                err = c.get(MEMTRACKER_VARIANTS[variant] + "_error") or c.get("memtracker_error", "")
                errors[err.split(":")[0]] = errors.get(err.split(":")[0], 0) + 1
                continue
            r = ours[c["case"]]
            if r["meas_peak"] > 0:
                ran.append((c["case"], v, r))
        out[variant] = {
            "cases": len(ran) + failed, "failed": failed, "failures": errors,
            "memtracker": _stats([ape(v, r["meas_peak"]) for _, v, r in ran]),
            "gpusim": _stats([ape(r["pred_peak"], r["meas_peak"]) for _, v, r in ran]),
            "agreement": _stats([ape(r["pred_peak"], v) for _, v, r in ran if v > 0]),
            "rows": [{"case": c, "memtracker": v, "gpusim": r["pred_peak"],
                      "measured": r["meas_peak"]} for c, v, r in ran]}
    return out


def _by_family(rows: list[dict]) -> dict:
    res = by_run_family(rows, lambda sel: {"device": summarise(sel),
                                           "kernels": summarise(sel, "kernels")})
    res["rows"] = rows
    return res
