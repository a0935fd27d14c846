"""The anatomy of a compiled call (``validation.measure.compiled_anatomy`` records) beside gpusim.

Per model and pass: the host's issue time of one compiled call (the GPU held), the part inside
Inductor's graph and the rest (Dynamo, AOTAutograd's wrappers, the module call, the output),
back-to-back wall, the state gauge (gpusim's eager reference GPT-2 beside the model, over the
run's median gauge), the collector, and per kernel; with ``--host``, gpusim's compiled
prediction of the same case on that host (end to end, host, and the host per kernel).

    python3 -m validation.score.compiled_anatomy --records F.jsonl [--host LEASE.toml] [--gpu h200]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys


def gauge(rec: dict) -> float | None:
    """The reference GPT-2's wall beside ``rec`` (mean of before and after), µs."""
    w = [s.get("gpt2_wall_us") for s in (rec.get("state_before"), rec.get("state_after")) if s]
    w = [x for x in w if x]
    return sum(w) / len(w) if w else None


#: cProfile entries per call (own time) of each class, by a piece of the function's label
PROFILED = {"addmm": "torch.addmm>", "mm": "torch.mm>", "attention": "torch._ops.aten.>",
            "conv": "torch.convolution>", "unit": "_reinterpret_tensor>"}


def per_call(rec: dict) -> dict:
    """µs of own time per call of each :data:`PROFILED` class in the record's cProfile, the
    Triton launch's (``triton_heuristics ... run``, cumulative) and the generated ``call``'s own
    time per kernel. ``unit``: the trivial ``_reinterpret_tensor``, the process's speed."""
    out = {}
    for c in rec.get("cprofile") or []:
        fn, calls = c["fn"], max(c["calls"], 1e-9)
        for k, tag in PROFILED.items():
            if fn.endswith(tag) and k not in out:
                out[k] = c["tottime_us"] / calls
        if "triton_heuristics.py" in fn and fn.endswith(":run") and "triton" not in out:
            out["triton"] = c["cumtime_us"] / calls
        if fn.endswith(":call") and c["calls"] == 1.0 and "call_own" not in out:
            w = rec.get("wrapper") or {}
            out["call_own"] = c["tottime_us"] / max(w.get("launches", 0) + w.get("extern", 0), 1)
    return out


def units_markdown(recs: list[dict]) -> str:
    """Each class's cost per call in units of the same process's trivial call (:func:`per_call`)."""
    keys = ("addmm", "mm", "attention", "conv", "triton", "call_own")
    lines = ["| model | pass | unit us | " + " | ".join(f"{k} (units)" for k in keys) + " |",
             "|---|---|---|" + "---|" * len(keys)]
    for r in recs:
        pc = per_call(r)
        u = pc.get("unit")
        if not u:
            continue
        lines.append(f"| {r['model']} | {r.get('pass')} | {u:.2f} | " +
                     " | ".join(f"{pc[k] / u:.1f}" if k in pc else "-" for k in keys) + " |")
    return "\n".join(lines)


def load(path: str) -> list[dict]:
    with open(path) as f:
        return [r for r in (json.loads(ln) for ln in f if ln.strip()) if not r.get("failed")]


def predicted(rec: dict, spec, host) -> dict:
    """gpusim's compiled prediction of the anatomy record's case on ``host``."""
    from gpusim.predict.pipeline import predict
    from validation.records.store import record_graph
    p = predict(record_graph(dict(rec, run="compiled")), gpu=spec, mode="compiled", host=host)
    return {"e2e_us": p.end_to_end_us, "host_us": p.timeline.host_us, "kernels": p.kernel_count,
            "device_us": p.device_us}


def rows(recs: list[dict], spec=None, host=None) -> list[dict]:
    g_all = [g for g in (gauge(r) for r in recs) if g]
    g_med = statistics.median(g_all) if g_all else None
    out, cache = [], {}
    for r in recs:
        g = gauge(r)
        row = {"model": r["model"], "pass": r.get("pass"), "host_us": r["host_us"],
               "inductor_us": r["inductor_us"], "outside_us": r["outside_us"], "wall_us": r["wall_us"],
               "eager_wall_us": r.get("eager_wall_us"), "cpu_per_wall": r.get("cpu_per_wall"),
               "state": g / g_med if g and g_med else None, "gc": r.get("gc"),
               "wrapper": r.get("wrapper"), "guards": r.get("guards")}
        if spec is not None:
            if r["model"] not in cache:
                cache[r["model"]] = predicted(r, spec, host)
            row["pred"] = cache[r["model"]]
        out.append(row)
    return out


def markdown(rs: list[dict]) -> str:
    lines = ["| model | pass | state | host us | inside Inductor | outside | wall | cpu/wall | gc passes (us) "
             "| guards | wrapper launches/extern/reinterpret/del | pred host | pred e2e | wall err | host/kernel meas/pred |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in rs:
        w, p, gcs = r.get("wrapper") or {}, r.get("pred"), r.get("gc") or {}
        st = f"x{r['state']:.2f}" if r.get("state") else "-"
        cells = [r["model"], str(r["pass"]), st, f"{r['host_us']:.0f}", f"{r['inductor_us']:.0f}",
                 f"{r['outside_us']:.0f}", f"{r['wall_us']:.0f}", f"{r.get('cpu_per_wall') or 0:.2f}",
                 f"{gcs.get('passes', '-')} ({gcs.get('us', 0):.0f})",
                 str((r.get("guards") or {}).get("leaf_guards", "-")),
                 "/".join(str(w.get(k, "-")) for k in ("launches", "extern", "reinterpret", "del"))]
        cells += ([f"{p['host_us']:.0f}", f"{p['e2e_us']:.0f}",
                   f"{(p['e2e_us'] - r['wall_us']) / r['wall_us'] * 100:+.0f}%",
                   f"{r['host_us'] / p['kernels']:.1f} / {p['host_us'] / p['kernels']:.1f}"]
                  if p else ["-"] * 4)
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python3 -m validation.score.compiled_anatomy")
    ap.add_argument("--records", required=True)
    ap.add_argument("--host", default=None, help="a lease's host calibration (<gpu>/host/*.toml)")
    ap.add_argument("--gpu", default="h200")
    a = ap.parse_args(argv)
    spec = host = None
    if a.host:
        from gpusim.hw.spec import calibrated_name, load_spec
        from validation.score.zoo_accuracy import lease_setup
        spec, host = lease_setup(load_spec(calibrated_name(a.gpu)), a.host)
    recs = load(a.records)
    print(markdown(rows(recs, spec, host)))
    print()
    print(units_markdown(recs))
    return 0


if __name__ == "__main__":
    sys.exit(main())
