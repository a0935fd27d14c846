"""Fit the host's ``eager_backward_factor`` (autograd's engine issuing a training step's backward, over the tight-loop
figures) from measured backward walls, and show the forward's and the optimizer's beside it.

``python3 -m validation.fit.train_host --records R.jsonl --host LEASE.toml [--gpu h200] [--write HOST]``
``python3 -m validation.fit.train_host --dist`` (the same from the DDP records' profiled spans, run6's own host)

Per case, gpusim predicts the record's step (:func:`gpusim.predict.step.standard_step`, the training zoo's step) on
the lease's host profile without the figure, and sums per phase what it prices the host at: the backward's kernels
at the tight-loop figures (dispatch or launch, and views: ``eager_view_us``; without the forward factor), the
forward's with the forward factor and the model's Python. The case's factor is the measured backward host wall
(``validation.measure.train_host``: ``loss.backward()``'s wall, the GPU never the bottleneck) over that tight sum;
the figure is the median over cases. ``--dist``: the measured backward span of a DDP record's profiled step
(``profiled_host``) scaled by the step's unprofiled over profiled wall (the profiler's own overhead out; right where
the step is host-bound), over the tight sum on that lease's own host profile (run6).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
RUN6 = os.path.join(ROOT, "validation", "results", "dist", "h200-x4-2026-11-28-run6")
PHASES = ("forward", "backward", "optimizer")


def phase_host(pred) -> dict:
    """Per phase of ``pred`` (an eager training step predicted on a host WITHOUT ``eager_backward_factor``):
    kernels, the host time priced (``priced_us``: dispatch, views and the share of the model's Python the timeline
    spreads on them) and the tight-loop sum (``tight_us``: dispatch and views without the forward factor and the
    Python)."""
    from gpusim.predict.phases import kernel_phases
    from gpusim.sim.timeline import eager_forward_factor
    tl, n = pred.timeline, len(pred.kernels)
    f = eager_forward_factor(pred.host, n)
    spread = tl.python_us / max(n, 1)
    ph = kernel_phases(pred)
    out = {p: {"kernels": 0, "priced_us": 0.0, "tight_us": 0.0} for p in PHASES}
    for e in tl.events:
        if e.call == 0 and e.lane == "host" and e.kernel is not None and e.name.startswith("launch"):
            o = out.setdefault(ph[e.kernel], {"kernels": 0, "priced_us": 0.0, "tight_us": 0.0})
            o["priced_us"] += e.dur_us
            o["tight_us"] += (e.dur_us - spread) / f
    for p in ph:
        out[p]["kernels"] += 1
    out["python_us"] = tl.python_us
    return out


def step_pred(rec: dict, gpu: str, host):
    from gpusim import predict
    from gpusim.hw.spec import spec_for
    from gpusim.predict.step import standard_step
    kw = {"amp": rec["amp"]} if rec.get("amp") else {}
    fn, args = standard_step(rec["model"], "float32", rec["sizes"], rec["optimizer"], **kw)
    return predict(fn, args, gpu=spec_for(gpu), mode="eager", host=host)


def no_figure(host):
    """The host profile without ``eager_backward_factor``; a lease's file written by a newer calibrate may carry
    figures this gpusim does not know: they are left out (none of them prices an eager backward)."""
    from gpusim.hw.host import FIELDS, load_host, parse_host
    from gpusim.hw.schema import read_toml
    if str(host).endswith(".toml"):
        data = read_toml(host, ValueError)
        data["host"] = {k: v for k, v in data.get("host", {}).items() if k in FIELDS}
        return parse_host(data, str(host)).replace(eager_backward_factor=None)
    return load_host(host).replace(eager_backward_factor=None)


def fit_records(path: str, host_path: str, gpu: str = "h200") -> dict:
    host = no_figure(host_path)
    rows = []
    for line in open(path):
        r = json.loads(line)
        if r.get("kind") != "train_host" or "error" in r:
            continue
        pred = step_pred(r, gpu, host)
        p = phase_host(pred)
        m = r["host_us"]
        rows.append({"case": f"{r['model']} {r['optimizer']} {r.get('amp') or 'fp32'} {r['sizes']}",
                     "meas": {k: m[k] for k in ("zero_grad", "forward", "backward", "optimizer")},
                     "pred": {k: round(p[k]["priced_us"], 1) for k in PHASES},
                     "tight_backward_us": round(p["backward"]["tight_us"], 1),
                     "backward_kernels": p["backward"]["kernels"],
                     "factor": m["backward"] / p["backward"]["tight_us"],
                     "step_wall_us": r["step_wall_us"], "pred_e2e_us": round(pred.end_to_end_us, 1)})
    chains = [json.loads(x) for x in open(path) if '"chain_host"' in x]
    return {"rows": rows, "factor": statistics.median(x["factor"] for x in rows) if rows else None,
            "chains": chain_slopes(chains), "host": host_path, "records": os.path.relpath(path, ROOT)}


def chain_slopes(recs: list[dict]) -> dict:
    """Per chain kind: the forward's and the backward's host cost per op / node (slope over the two lengths)."""
    out = {}
    for kind in sorted({r["chain"] for r in recs}):
        rs = sorted((r for r in recs if r["chain"] == kind), key=lambda r: r["n"])
        if len(rs) >= 2:
            a, b = rs[0], rs[-1]
            dn = b["n"] - a["n"]
            out[kind] = {"forward_op_us": (b["forward_us"] - a["forward_us"]) / dn,
                         "backward_node_us": (b["backward_us"] - a["backward_us"]) / dn}
    return out


def fit_dist(case: str = "ddp_resnet50") -> dict:
    """The DDP records of run6 (the x4 lease that calibrated its own host, run6-host.toml): per world, the
    profiled backward span scaled to the unprofiled step, over gpusim's tight-loop backward sum on that host."""
    from validation.score.dist_accuracy import predict_case
    host = no_figure(RUN6 + "-host.toml")
    out = []
    for line in open(RUN6 + ".jsonl"):
        r = json.loads(line)
        if r.get("kind") != "step" or r.get("case") != case or not r.get("profiled_host"):
            continue
        ph = r["profiled_host"]
        scale = r["step_ms"]["median"] * 1e3 / ph["step_host_us"]
        pred = predict_case(case, r["world"], "h200", host).single
        p = phase_host(pred)
        out.append({"world": r["world"], "scale": scale, "backward_us": ph["backward_host_us"] * scale,
                    "forward_us": ph["forward_host_us"] * scale, "tight_backward_us": p["backward"]["tight_us"],
                    "pred_forward_us": p["forward"]["priced_us"], "pred_backward_us": p["backward"]["priced_us"],
                    "factor": ph["backward_host_us"] * scale / p["backward"]["tight_us"]})
    return {"rows": out, "factor": statistics.median(x["factor"] for x in out) if out else None}


def write(res: dict, target: str, env: dict) -> None:
    """Write ``eager_backward_factor`` into host profile ``target`` (a name under hosts/ or a path)."""
    from types import MappingProxyType

    from gpusim.hw.host import dump_host, hosts_dir, load_host
    host = load_host(target)
    cases = ", ".join(f"{x['case'].split(' {')[0]} {x['factor']:.2f}" for x in res["rows"])
    ref = (f"median over {len(res['rows'])} eager training steps of loss.backward()'s host wall (unprofiled, GPU not "
           f"the bottleneck) over gpusim's tight-loop sum of their backward kernels on the same lease's host profile "
           f"{os.path.relpath(res['host'], ROOT)} ({cases}); {res['records']} ({env.get('gpu')}, torch "
           f"{env.get('torch')}, {str(env.get('utc', ''))[:10]}; python3 -m validation.measure.train_host), fitted by "
           "python3 -m validation.fit.train_host --write")
    prov = dict(host.provenance)
    prov["eager_backward_factor"] = ("measured", ref)
    new = host.replace(provenance=MappingProxyType(prov), eager_backward_factor=round(res["factor"], 4))
    path = target if target.endswith(".toml") else hosts_dir() / f"{target}.toml"
    dump_host(new, path)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--records", help="validation.measure.train_host's JSONL")
    ap.add_argument("--host", help="the host profile of the lease that measured them (calibrate --host-only)")
    ap.add_argument("--gpu", default="h200")
    ap.add_argument("--dist", action="store_true", help="fit on the DDP records' profiled spans (run6) instead")
    ap.add_argument("--write", metavar="HOST", help="write the figure into this host profile (name or path)")
    a = ap.parse_args(argv)
    if a.dist:
        res = fit_dist()
        json.dump(res, sys.stdout, indent=1)
        print()
        return 0
    if not (a.records and a.host):
        ap.error("--records and --host are needed (or --dist)")
    res = fit_records(a.records, a.host, a.gpu)
    json.dump(res, sys.stdout, indent=1)
    print()
    if a.write and res["factor"]:
        env = json.loads(open(a.records).readline())
        write(res, a.write, env)
        print(f"wrote eager_backward_factor {res['factor']:.3f} into {a.write}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
