"""The zoo's accuracy as markdown tables: by family, end to end, lease walls, compile speed-ups, memory and MemTracker, per model (from :mod:`validation.score.zoo_accuracy`'s rows and summaries)."""

from __future__ import annotations
import numpy as np
from validation.records.store import load_zoo_records, record_graph, zoo_available  # noqa: F401
from validation.records.stats import FAMILIES, RUNS, _cell, _stats, ape, by_run_family  # noqa: F401
from validation.score.zoo_accuracy import LEASE_PREDICTIONS


def memtracker_markdown(rep: dict) -> str:
    """gpusim's eager peak and PyTorch's MemTracker on the same cases, per GPU."""
    lines = ["| GPU | MemTracker run | cases | MemTracker fails | MemTracker err med / p90 | "
             "gpusim err med / p90 (same cases) | gpusim vs MemTracker med / p90 |",
             "|---|---|---|---|---|---|---|"]
    label = {"cpu_host": "as on a CPU-only host", "fused_sdpa": "fused attention, as on a GPU"}
    for gpu, e in rep.items():
        for variant, s in (e.get("memtracker") or {}).items():
            lines.append(f"| {gpu} | {label[variant]} | {s['cases']} | {s['failed']} | "
                         f"{_cell(s['memtracker'])} | {_cell(s['gpusim'])} | {_cell(s['agreement'])} |")
    return "\n".join(lines)


def memory_markdown(rep: dict) -> str:
    lines = ["| GPU | run | family | cases | peak allocated med / p90 |", "|---|---|---|---|---|"]
    for gpu, e in rep.items():
        for run, fams in e["summary"].items():
            for fam, s in fams.items():
                n = (s["peak"] or {}).get("n", 0)
                if n:                       # CUDA-graph runs record no peak
                    lines.append(f"| {gpu} | {run} | {fam} | {n} | {_cell(s['peak'])} |")
    fresh = {gpu: e["fresh"] for gpu, e in rep.items() if e.get("fresh")}
    if fresh:
        from validation.score.memory_accuracy import fresh_markdown
        lines += ["", "In a fresh process per case (`validation/measure/fresh_memory.py`: the model built "
                  "on the CPU and moved with `module.to(\"cuda\", dtype)`, so nothing else is "
                  "cached; validation.score.memory_accuracy): the measured call's allocated and "
                  "reserved peaks, a fresh first call's reserved growth (cuBLAS workspaces "
                  "included), and what the move reserved (absolute error, median / p90):", "",
                  fresh_markdown(fresh)]
    return "\n".join(lines)


def zoo_markdown(rep: dict) -> str:
    lines = ["| GPU | spec | run | family | cases | device time med / p90 | kernel count med / p90 |",
             "|---|---|---|---|---|---|---|"]
    for gpu, e in rep.items():
        for label, byrun in e.items():
            if not isinstance(byrun, dict) or label in ("rows", "memory", "speedup", "e2e",
                                                         "host_leases", "fastest"):
                continue
            for run in RUNS:
                for fam, s in (byrun.get(run) or {}).items():
                    n = (s["device"] or {}).get("n", 0)
                    lines.append(f"| {gpu} | {label} | {run} | {fam} | {n} | {_cell(s['device'])} | "
                                 f"{_cell(s['kernels'])} |")
    mem = {gpu: e["memory"] for gpu, e in rep.items() if e.get("memory")}
    if mem:
        lines += ["", "Memory: activation peak above weights and inputs, predicted vs "
                  "`torch.cuda.max_memory_allocated()` of the measured call (gpusim.sim.memory; "
                  "absolute error):", "", memory_markdown(mem)]
        if any(e.get("memtracker") for e in mem.values()):
            lines += ["", "PyTorch's MemTracker (FakeTensorMode) on the same eager cases "
                      "(validation.score.memtracker_run; absolute error of the peak):", "",
                      memtracker_markdown(mem)]
    return "\n".join(lines)


def e2e_markdown(rep: dict) -> str:
    """End-to-end wall time per GPU, run and family (calibrated spec, each lease's own
    host figures): error, and the measured wall over the kernel sum (how host-bound)."""
    lines = ["| GPU | run | family | cases | end to end med / p90 | measured wall / kernel sum (median) |",
             "|---|---|---|---|---|---|"]
    for gpu, e in rep.items():
        rows = (e.get("e2e") or {}).get("rows", [])
        for run in RUNS:
            for fam, s in ((e.get("e2e") or {}).get(run) or {}).items():
                sel = [r for r in rows if r["run"] == run and fam in ("all", r["family"])]
                ratio = float(np.median([r["meas_us"] / r["meas_kernel_sum_us"] for r in sel]))
                lines.append(f"| {gpu} | {run} | {fam} | {s['e2e']['n']} | {_cell(s['e2e'])} | "
                             f"{ratio:.2f} |")
    return "\n".join(lines)


def lease_walls_markdown(rep: dict) -> str:
    """Eager end to end on the host leases per GPU and family (:func:`lease_wall_rows`)."""
    lines = ["| GPU | family | cases | " + " | ".join(label for _, label in LEASE_PREDICTIONS)
             + " | measured wall / kernel sum (median) |", "|---|---|---|---|---|---|---|"]
    for gpu, e in rep.items():
        hl = e.get("host_leases")
        if not hl:
            continue
        for fam, s in hl["eager"].items():
            sel = [r for r in hl["rows"] if fam in ("all", r["family"])]
            ratio = float(np.median([r["meas_us"] / r["meas_kernel_sum_us"] for r in sel]))
            lines.append(f"| {gpu} | {fam} | {len(sel)} | "
                         + " | ".join(_cell(s[k]) for k, _ in LEASE_PREDICTIONS) + f" | {ratio:.2f} |")
    return "\n".join(lines)


def speedup_markdown(rep: dict) -> str:
    """torch.compile's predicted and measured speed-up per GPU (calibrated spec)."""
    lines = ["| GPU | speed-up | cases | error med / p90 | helps-or-hurts right |",
             "|---|---|---|---|---|"]
    for gpu, e in rep.items():
        for key, label in (("device", "device (kernel sums)"), ("e2e", "end to end (wall)")):
            s = ((e.get("speedup") or {}).get("summary") or {}).get(key)
            if s:
                lines.append(f"| {gpu} | {label} | {s['n']} | {_cell(s)} | "
                             f"{s['verdict_right']}/{s['n']} |")
        fr = e.get("fastest")
        if fr:
            lines.append(f"| {gpu} | fastest of the runs measured (eager, torch.compile"
                         f"{', CUDA graphs' if any('cudagraph' in r['runs'] for r in fr['rows']) else ''})"
                         f" | {fr['n']} | - | {fr['right']}/{fr['n']} |")
    return "\n".join(lines)


def per_model_markdown(rep: dict) -> str:
    """Each zoo case's eager error on each GPU (calibrated spec)."""
    lines = ["| GPU | case | measured us | predicted us | error | kernels measured / predicted |",
             "|---|---|---|---|---|---|"]
    for gpu, e in rep.items():
        for r in (e.get("calibrated") or {}).get("rows", []):
            lines.append(f"| {gpu} | {r['case']} | {r['meas_us']:.0f} | {r['pred_us']:.0f} | "
                         f"{(r['pred_us'] - r['meas_us']) / r['meas_us'] * 100:+.0f}% | "
                         f"{r['meas_kernels']} / {r['pred_kernels']} |")
    return "\n".join(lines)
