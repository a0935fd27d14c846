"""``gpusim accuracy``: predicted against measured, from recorded validation runs.

No GPU is needed: each record holds the graph that was measured, so predictions are
made on exactly that graph. Categories (absolute percentage error, median and p90):

* ``kernel``      per-kernel device time, eager runs whose kernel count equals the
                  number of predicted kernels (matched in launch order);
* ``device``      device time per call: the sum of profiled kernel times (L2 flushed)
                  against the predicted device time, for eager, compiled and each
                  executed partition;
* ``end_to_end``  steady-state wall time per call against the simulated end-to-end time;
* ``speedup``     device-time fusion speed-up (eager over compiled / over a partition);
* ``verdict``     whether fusion helps or hurts end to end, right or wrong;
* ``tau``         Kendall tau between predicted and measured device times over the
                  partitions of one graph (graphs with at least four measured);
* each category also for a plain datasheet roofline (``max(bytes/peak bandwidth,
  FLOPs/peak)``, no overheads), so the table shows what the model adds.

Predictions come from :func:`gpusim.predict` with the one lowering
(:mod:`gpusim.lower`): eager, compiled (what Inductor runs), and each executed partition
with ``regions=True`` (the harness runs each group as a separately compiled region, so
each group pays a region entry's host cost).
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass, field

import numpy as np
from scipy.stats import kendalltau

from gpusim.cost.roofline import CostOptions, unit_for
from gpusim.graph.opgraph import group_io
from gpusim.graph.opgraph import OpGraph
from gpusim.hw.spec import calibrated_name, datasheet_name, load_spec, transfer_spec
from gpusim.predict.pipeline import predict
from validation.records.store import read_records
from validation.records.stats import ape

RESULTS_DIR = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "results")


def load_records(folder: str) -> list[dict]:
    """The measured classic cases of one GPU's results folder (``<folder>/classic.jsonl.gz``,
    written by ``gpusim validate``); failed cases and rows without a graph left out."""
    return [r for r in read_records(os.path.join(folder, "classic.jsonl.gz"))
            if not r.get("failed") and r.get("graph")]


@dataclass
class Errors:
    rows: dict = field(default_factory=dict)      # category -> list of (case, pred, meas)

    def add(self, cat, case, pred, meas):
        if meas and meas > 0 and pred is not None and math.isfinite(pred):
            self.rows.setdefault(cat, []).append((case, float(pred), float(meas)))

    def summary(self, cat):
        r = self.rows.get(cat, [])
        if not r:
            return None
        e = np.array([ape(p, m) for _, p, m in r])
        return {"n": len(r), "median": float(np.median(e)), "p90": float(np.percentile(e, 90))}


def _kernels_measured(run) -> list[float]:
    # ``gpusim:`` entries are the harness's own profiler ranges, not kernels
    return [k["us"] for k in run["profile"]["kernels"] if not k["name"].startswith("gpusim:")]


def _device_measured(run) -> float:
    return float(sum(_kernels_measured(run)))


def roofline_us(graph: OpGraph, groups, spec) -> float:
    """A plain datasheet roofline, no overheads: the baseline the model must beat."""
    total = 0.0
    for g in groups:
        r, w = group_io(graph, g)
        b = sum(r.values()) + sum(w.values())
        f_s = 0.0
        for n in g:
            a = graph.node(n)
            u = unit_for(a["kind"], (a.get("gemm") or {}).get("unit_dtype", a["dtype"]), spec,
                         CostOptions())
            f_s += a["flops"] / spec.peak_flops(u)
        total += max(b / spec.bandwidth, f_s) * 1e6
    return total


def records_host(gpu: str):
    """The host profile of the machine that measured ``gpu``'s records: its calibrated
    spec's lease host (``hosts/<datasheet>-host.toml``), else the reference host. Host
    costs belong to the machine that ran the program, not to the GPU spec."""
    from gpusim.hw.host import host_names, load_host
    name = f"{datasheet_name(gpu)}-host"
    return load_host(name if name in host_names() else None)


def evaluate(records: list[dict], spec, tag: str = "", host=None) -> tuple[Errors, Errors, dict]:
    """Model errors and datasheet-roofline errors over the records, issued by ``host``
    (the records' machine, :func:`records_host`; None: the reference host)."""
    model, roof = Errors(), Errors()
    verdicts = {"right": 0, "wrong": 0}
    taus = []
    for r in records:
        g = OpGraph.from_dict(r["graph"])
        case = r["case"]
        runs = r.get("runs", {})
        p_eager = predict(g, gpu=spec, mode="eager", host=host)
        singles = p_eager.lowering.groups
        if "eager" in runs:
            e = runs["eager"]
            meas_k = _kernels_measured(e)
            if len(meas_k) == len(p_eager.kernels):
                for k, m in zip(p_eager.kernels, meas_k):
                    model.add("kernel", case, k.us, m)
                    roof.add("kernel", case, roofline_us(g, [list(k.ops)], spec), m)
            model.add("device", case + ":eager", p_eager.device_us, _device_measured(e))
            roof.add("device", case + ":eager", roofline_us(g, singles, spec), _device_measured(e))
            model.add("end_to_end", case + ":eager", p_eager.end_to_end_us, e["wall"]["median_us"])
            roof.add("end_to_end", case + ":eager", roofline_us(g, singles, spec), e["wall"]["median_us"])
        p_comp = predict(g, gpu=spec, mode="compiled", host=host)
        cg = p_comp.lowering.groups
        if "compiled" in runs:
            c = runs["compiled"]
            model.add("device", case + ":compiled", p_comp.device_us, _device_measured(c))
            roof.add("device", case + ":compiled", roofline_us(g, cg, spec), _device_measured(c))
            model.add("end_to_end", case + ":compiled", p_comp.end_to_end_us, c["wall"]["median_us"])
            roof.add("end_to_end", case + ":compiled", roofline_us(g, cg, spec), c["wall"]["median_us"])
            if "eager" in runs:
                e = runs["eager"]
                ms = _device_measured(e) / _device_measured(c)
                model.add("speedup", case + ":compiled", p_eager.device_us / p_comp.device_us, ms)
                roof.add("speedup", case + ":compiled",
                         roofline_us(g, singles, spec) / roofline_us(g, cg, spec), ms)
                mh = e["wall"]["median_us"] > c["wall"]["median_us"]
                ph = p_eager.end_to_end_us > p_comp.end_to_end_us
                verdicts["right" if mh == ph else "wrong"] += 1
        pts = []
        for part in r.get("partitions", []):
            groups = part["groups"]
            pp = predict(g, gpu=spec, mode="compiled", partition=groups, regions=True, host=host)
            md = _device_measured(part)
            model.add("device", f"{case}:part:{part['algo']}", pp.device_us, md)
            roof.add("device", f"{case}:part:{part['algo']}", roofline_us(g, groups, spec), md)
            model.add("end_to_end", f"{case}:part:{part['algo']}", pp.end_to_end_us,
                      part["wall"]["median_us"])
            pts.append((pp.device_us, md))
            if "eager" in runs and part["algo"] != "singletons":
                e = runs["eager"]
                model.add("speedup", f"{case}:part:{part['algo']}",
                          p_eager.device_us / pp.device_us, _device_measured(e) / md)
                mh = e["wall"]["median_us"] > part["wall"]["median_us"]
                ph = p_eager.end_to_end_us > pp.end_to_end_us
                verdicts["right" if mh == ph else "wrong"] += 1
        if len(pts) >= 4:
            t = kendalltau([p for p, _ in pts], [m for _, m in pts]).statistic
            if t == t:
                taus.append((case, float(t)))
    extra = {"verdicts": verdicts, "taus": taus}
    return model, roof, extra


CATS = ["kernel", "device", "end_to_end", "speedup"]


def accuracy_report(results_dir: str | None = None, gpus=None) -> dict:
    """All accuracy figures as data (the CLI prints them; CI checks them)."""
    results_dir = results_dir or RESULTS_DIR
    out = {}
    gpus = gpus or sorted(d for d in os.listdir(results_dir)
                          if os.path.isdir(os.path.join(results_dir, d)))
    for gpu in gpus:
        recs = load_records(os.path.join(results_dir, gpu))
        if not recs:
            continue
        entry = {"records": len(recs)}
        for label, spec_name in (("model", calibrated_name(gpu)), ("datasheet", datasheet_name(gpu))):
            if not spec_name:
                continue            # no calibrated spec for this GPU yet
            spec = load_spec(spec_name)
            m, roof, extra = evaluate(recs, spec, host=records_host(gpu))
            entry[label] = {c: m.summary(c) for c in CATS}
            entry[label]["verdict_right"] = extra["verdicts"]
            taus = [t for _, t in extra["taus"]]
            entry[label]["tau"] = {"n": len(taus), "median": float(np.median(taus)) if taus else None,
                                   "min": float(min(taus)) if taus else None}
            if label == "model":
                entry["roofline"] = {c: roof.summary(c) for c in CATS}
        if gpu == "h200" and calibrated_name("h100"):
            m, _, _ = evaluate(recs, transfer_spec(load_spec(calibrated_name("h100")), "h200"),
                               host=records_host(gpu))
            entry["h100_scaled"] = {c: m.summary(c) for c in CATS}
        out[gpu] = entry
    return out


def markdown(rep: dict) -> str:
    lines = ["| GPU | spec | records | per-kernel med / p90 | per-call device med / p90 | "
             "end-to-end med / p90 | fusion speed-up med / p90 | helps/hurts right | Kendall tau (graphs) |",
             "|---|---|---|---|---|---|---|---|---|"]

    def cell(s):
        return "-" if not s else f"{s['median']:.1f}% / {s['p90']:.1f}% (n={s['n']})"
    for gpu, e in rep.items():
        for label in ("model", "h100_scaled", "datasheet", "roofline"):
            if label not in e:
                continue
            s = e[label]
            v = s.get("verdict_right") or {}
            tot = v.get("right", 0) + v.get("wrong", 0)
            verdict = f"{v.get('right', 0)}/{tot}" if tot else "-"
            tau = s.get("tau") or {}
            taus = f"{tau['median']:.2f} (min {tau['min']:.2f}, {tau['n']})" if tau.get("n") else "-"
            name = {"model": f"calibrated ({calibrated_name(gpu)})", "datasheet": "datasheet spec",
                    "roofline": "plain roofline (datasheet, no overheads)",
                    "h100_scaled": "calibrated H100 scaled to H200"}[label]
            lines.append(f"| {gpu} | {name} | {e['records']} | {cell(s.get('kernel'))} | "
                         f"{cell(s.get('device'))} | {cell(s.get('end_to_end'))} | "
                         f"{cell(s.get('speedup'))} | {verdict} | {taus} |")
    return "\n".join(lines + ["", targets_markdown(rep)])


# The validation issue's targets: (label, spec row, category, statistic, limit, "<=" | ">=")
TARGETS = [
    ("per-kernel device time, median", "model", "kernel", "median", 10.0, "<="),
    ("per-kernel device time, p90", "model", "kernel", "p90", 25.0, "<="),
    ("per-call device time, median", "model", "device", "median", 10.0, "<="),
    ("per-call device time, p90", "model", "device", "p90", 25.0, "<="),
    ("end-to-end wall time, median", "model", "end_to_end", "median", 15.0, "<="),
    ("fusion speed-up (device), median", "model", "speedup", "median", 15.0, "<="),
    ("helps/hurts verdict right", "model", "verdict", "fraction", 90.0, ">="),
    ("datasheet-only spec, per-call device median", "datasheet", "device", "median", 15.0, "<="),
    ("datasheet-only spec, end-to-end median", "datasheet", "end_to_end", "median", 15.0, "<="),
    ("Kendall tau, every graph with >= 4 partitions (min)", "model", "tau", "min", 0.8, ">="),
]


def targets_markdown(rep: dict) -> str:
    """The issue's accuracy targets against what the records give, per GPU."""
    lines = ["| GPU | target | limit | achieved | met |", "|---|---|---|---|---|"]
    for gpu, e in rep.items():
        for label, row, cat, stat, limit, op in TARGETS:
            s = e.get(row)
            if not s:
                continue
            if cat == "verdict":
                v = s["verdict_right"]
                got = 100.0 * v["right"] / max(1, v["right"] + v["wrong"])
            elif cat == "tau":
                got = s["tau"][stat]
            else:
                got = (s.get(cat) or {}).get(stat)
            if got is None:
                continue
            ok = got <= limit if op == "<=" else got >= limit
            unit = "" if cat == "tau" else "%"
            lines.append(f"| {gpu} | {label} | {op} {limit:g}{unit} | {got:.2f}{unit} | "
                         f"{'yes' if ok else '**no**'} |")
    return "\n".join(lines)


