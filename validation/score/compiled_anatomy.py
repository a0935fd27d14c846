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
    print(markdown(rows(load(a.records), spec, host)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
