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

Predictions for torch.compile use the partition of the ``bytes`` search (the heuristic
torch.compile's scheduler follows). A partition executed for real runs each group as a
separately compiled region, so each group pays a compiled call's host cost.
"""

from __future__ import annotations

import glob
import json
import math
import os
import sys
from dataclasses import dataclass, field

import numpy as np

from ..cost import CostOptions
from ..graph import OpGraph
from ..hardware import load_spec
from ..predict import predict_groups

RESULTS_DIR = os.path.join(os.path.dirname(__file__), "..", "..", "validation", "results")
SPEC_FOR = {"h100": "h100-sxm-calibrated", "h200": "h200-sxm-calibrated"}
DATASHEET_FOR = {"h100": "h100-sxm", "h200": "h200-sxm"}


def load_records(folder: str) -> list[dict]:
    recs = []
    for p in sorted(glob.glob(os.path.join(folder, "*__*.json"))):
        with open(p) as f:
            r = json.load(f)
        if not r.get("failed") and r.get("graph"):
            recs.append(r)
    return recs


def ape(pred: float, meas: float) -> float:
    return abs(pred - meas) / meas * 100.0


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
    from ..cost import group_io, unit_for
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


def compiled_groups(graph: OpGraph, spec):
    """What torch.compile runs: the bytes-greedy partition (the heuristic of inductor's
    scheduler), realised as inductor does (GEMMs as extern kernels)."""
    from ..partition import Scorer, as_compiled_by_inductor
    from ..search import greedy
    part = greedy(graph, Scorer(graph, spec, "compiled"), "bytes")
    return as_compiled_by_inductor(graph, [list(g) for g in part.groups])


def predict_regions(graph: OpGraph, groups, spec):
    """A partition run by the harness: each group its own compiled region (one region
    entry, ``compiled_region_us``, per group; no single wrapper call), each realised as
    inductor does."""
    from ..partition import as_compiled_by_inductor
    pos = {n: i for i, n in enumerate(graph.compute_nodes)}
    from ..cost import group_io
    kernels, entry = [], {}
    region = spec.compiled_region_us or spec.compiled_call_us
    per_input = spec.compiled_input_us or 0.0
    for g in groups:
        ks = [sorted(k, key=pos.__getitem__) for k in as_compiled_by_inductor(graph, [g])]
        kernels += ks
        n_in = len(group_io(graph, g)[0])          # tensors the region is called with
        entry[min(ks, key=lambda k: pos[k[0]])[0]] = region + n_in * per_input
    return predict_groups(graph, kernels, spec.replace(compiled_call_us=0.0), "compiled",
                          host_before=entry, inputs=0)


def evaluate(records: list[dict], spec, tag: str = "") -> tuple[Errors, Errors, dict]:
    """Model errors and datasheet-roofline errors over the records."""
    model, roof = Errors(), Errors()
    verdicts = {"right": 0, "wrong": 0}
    taus = []
    for r in records:
        g = OpGraph.from_dict(r["graph"])
        case = r["case"]
        runs = r.get("runs", {})
        singles = [[n] for n in g.compute_nodes]
        p_eager = predict_groups(g, singles, spec, "eager")
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
        cg = compiled_groups(g, spec)
        p_comp = predict_groups(g, cg, spec, "compiled")
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
            pp = predict_regions(g, groups, spec)
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
            from scipy.stats import kendalltau
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
        for label, spec_name in (("model", SPEC_FOR.get(gpu)), ("datasheet", DATASHEET_FOR.get(gpu))):
            if not spec_name:
                continue
            try:
                spec = load_spec(spec_name)
            except Exception:  # noqa: BLE001 - a spec not yet calibrated
                continue
            m, roof, extra = evaluate(recs, spec)
            entry[label] = {c: m.summary(c) for c in CATS}
            entry[label]["verdict_right"] = extra["verdicts"]
            taus = [t for _, t in extra["taus"]]
            entry[label]["tau"] = {"n": len(taus), "median": float(np.median(taus)) if taus else None,
                                   "min": float(min(taus)) if taus else None}
            if label == "model":
                entry["roofline"] = {c: roof.summary(c) for c in CATS}
        if gpu == "h200":
            try:
                h100 = load_spec("h100-sxm-calibrated")
                ds200 = load_spec("h200-sxm")
                scaled = h100.replace(
                    name="h100-calibrated-scaled-to-h200", bandwidth_gbs=ds200.bandwidth_gbs,
                    l2_mib=ds200.l2_mib, capacity_gib=ds200.capacity_gib,
                    l2_bandwidth_gbs=h100.l2_bandwidth_gbs)
                m, _, _ = evaluate(recs, scaled)
                entry["h100_scaled"] = {c: m.summary(c) for c in CATS}
            except Exception:  # noqa: BLE001
                pass
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
            name = {"model": f"calibrated ({SPEC_FOR.get(gpu)})", "datasheet": "datasheet spec",
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


BEGIN, END = "<!-- accuracy:begin -->", "<!-- accuracy:end -->"


def update_readme(path: str, table: str) -> None:
    """Replace the block between the accuracy markers of ``path`` with ``table``."""
    from ..cli import UserError
    try:
        with open(path) as f:
            text = f.read()
    except OSError as e:
        raise UserError(f"cannot read {path}: {e.strerror}") from None
    if BEGIN not in text or END not in text:
        raise UserError(f"{path} has no {BEGIN} ... {END} block to update")
    head, rest = text.split(BEGIN, 1)
    _, tail = rest.split(END, 1)
    from ..atomic import atomic_write
    atomic_write(path, f"{head}{BEGIN}\n{table}\n{END}{tail}")


def main(a) -> int:
    rep = accuracy_report(a.results, a.gpu)
    if not rep:
        from ..cli import UserError
        raise UserError("no validation records found; run `gpusim validate --out "
                        "validation/results/<gpu>` on a GPU machine first")
    if a.json:
        print(json.dumps(rep, indent=2))
    else:
        print(markdown(rep))
    if getattr(a, "update_readme", None):
        update_readme(a.update_readme, markdown(rep))
        print(f"updated the accuracy table in {a.update_readme}", file=sys.stderr)
    if a.plot:
        from ..viz import accuracy_plot
        accuracy_plot(a.results or RESULTS_DIR, a.gpu, a.plot)
        print(f"wrote {a.plot}", file=sys.stderr)
    return 0
