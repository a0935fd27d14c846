"""Compiled end to end on one lease's host, before and after ``compiled_forward_factor``, and
where a compiled call's host time goes.

For each torch.compile record of a records file (``zoo_run --runs compiled``, e.g. the held-out
cases re-measured beside a host calibration) predicted on that lease's host
(:func:`validation.score.zoo_accuracy.lease_setup`):

- ``plain``: the lease's figures without ``compiled_forward_factor`` (the chains' figures alone);
- ``factor``: with it (what gpusim predicts on that host);
- ``state``: with it, and the host's state beside the case: the factor times the eager reference
  forwards' walls timed right after the case (``reference_walls``, ``zoo_run --reference-walls``)
  over the calibration's fastest (the shared hosts slow 1.5-2x in episodes; calibrate describes the
  host at its fastest). A diagnostic of how much of the miss is the host's state, not a prediction.

and the measured eager run beside it (``eager_same_lease``) over gpusim's eager prediction: the
same host's state seen by eager, for comparison. The predicted host time is split by what the
wrapper does (call and inputs; Triton launches; extern calls by class; library helper kernels).

    python3 -m validation.score.compiled_forward --records F.jsonl.gz --host LEASE.toml [--gpu h200]
"""

from __future__ import annotations

import argparse
import json
import sys

import numpy as np

from gpusim.hw.spec import calibrated_name, load_spec
from gpusim.predict.pipeline import predict
from gpusim.sim.timeline import EXTERN_CLASS_FIELDS, compiled_forward_factor, compiled_launch_us
from gpusim.graph.opgraph import GEMM_KINDS
from validation.records.store import read_records, record_graph
from validation.score.zoo_accuracy import lease_setup

COLUMNS = ("plain", "factor", "state")


def host_state(rec: dict, cal_walls: dict) -> float | None:
    """The host's speed beside ``rec`` relative to the calibration's fastest: the eager
    reference forwards' walls timed beside the case over ``cal_walls`` (the calibration's
    fastest), summed over the forwards both timed; None when the case timed none."""
    beside = {k: v for k, v in (rec.get("reference_walls") or {}).items()
              if isinstance(v, (int, float)) and k in cal_walls}
    if not beside:
        return None
    return sum(beside.values()) / sum(cal_walls[k] for k in beside)


def host_split(kernels, host, n: int) -> dict:
    """Predicted host µs per call of a compiled program by what the wrapper does: each
    launch's figure (:func:`compiled_launch_us`) times the program's factor ramp."""
    f = compiled_forward_factor(host, n)
    out = {"triton": 0.0, "aux": 0.0, **{k: 0.0 for k in EXTERN_CLASS_FIELDS}}
    for k in kernels:
        cls = "aux" if k.role == "aux" else (k.kind if k.kind in GEMM_KINDS else "triton")
        out[cls] += f * compiled_launch_us(k, host)
    return out


def case_rows(records: list[dict], spec, host, cal_walls: dict) -> list[dict]:
    """One row per compiled record: measured wall and kernel sum, the three predictions
    (:data:`COLUMNS`), the state ratio (``state_x``), eager's ratio beside it and the host split."""
    rows = []
    for r in records:
        if r.get("run") != "compiled" or r.get("failed") or not r.get("wall_us"):
            continue
        g = record_graph(r)
        state = host_state(r, cal_walls)
        hosts = {"plain": host.replace(compiled_forward_factor=None), "factor": host,
                 "state": host.replace(compiled_forward_factor=(host.compiled_forward_factor or 1.0)
                                       * state) if state else None}
        row = {"case": r["case_id"].split("__")[0], "meas_us": r["wall_us"],
               "meas_kernel_sum_us": r["kernel_sum_us"], "state_x": state}
        for col, hp in hosts.items():
            p = predict(g, gpu=spec, mode="compiled", host=hp) if hp else None
            row[col] = p.end_to_end_us if p else None
            if col == "factor":
                row["pred_device_us"], row["pred_host_us"] = p.device_us, p.timeline.host_us
                split = host_split(p.timeline.kernels, hp, p.kernel_count)
                split["call"] = p.timeline.host_us - sum(split.values())
                row["host_split"] = split
        es = r.get("eager_same_lease") or {}
        if es.get("wall_us"):
            pe = predict(record_graph(dict(r, run="eager")), gpu=spec, mode="eager", host=host)
            row["eager_ratio"] = es["wall_us"] / pe.end_to_end_us
        rows.append(row)
    return rows


def summary(rows: list[dict]) -> dict:
    """Per column: cases, median |error| and signed median error (%) of end to end."""
    out = {}
    for col in COLUMNS:
        e = [(r[col] - r["meas_us"]) / r["meas_us"] * 100 for r in rows if r.get(col)]
        if e:
            out[col] = {"n": len(e), "median_abs": float(np.median(np.abs(e))),
                        "median_signed": float(np.median(e))}
    return out


def markdown(rows: list[dict], host) -> str:
    f = host.compiled_forward_factor
    lines = [f"host {host.name}: compiled_forward_factor {f:.3f}" if f else
             f"host {host.name}: no compiled_forward_factor", "",
             "| case | wall us | kernel sum | plain | factor | state (x) | eager meas/pred | "
             "host split: call / Triton / matmul / attention / conv / aux |", "|---|---|---|---|---|---|---|---|"]

    def err(r, c):
        return f"{(r[c] - r['meas_us']) / r['meas_us'] * 100:+.0f}%" if r.get(c) else "-"
    for r in rows:
        s = r["host_split"]
        state = f"{err(r, 'state')} (x{r['state_x']:.2f})" if r.get("state") else "-"
        eager = f"{r['eager_ratio']:.2f}" if r.get("eager_ratio") else "-"
        split = " / ".join(f"{s[k]:.0f}" for k in ("call", "triton", "matmul", "attention", "conv", "aux"))
        lines.append(f"| {r['case']} | {r['meas_us']:.0f} | {r['meas_kernel_sum_us']:.0f} | "
                     f"{err(r, 'plain')} | {err(r, 'factor')} | {state} | {eager} | {split} |")
    lines += ["", "| prediction | cases | median abs | signed median |", "|---|---|---|---|"]
    for col, s in summary(rows).items():
        lines.append(f"| {col} | {s['n']} | {s['median_abs']:.1f}% | {s['median_signed']:+.1f}% |")
    return "\n".join(lines)


def window_factors(raw_host: dict, spec, host) -> dict | None:
    """``compiled_forward_factor`` of a calibration whose compiled reference forwards were timed in
    windows (``reference_forwards.compiled_reference_walls``): from each round's first window
    only (one timing a round, as calibrate timed them before the windows) and from the fastest
    window (what calibrate fits); None when the raw timings hold no windows."""
    from validation.measure.reference_forwards import fastest_walls, forward_factor
    rounds = [r for r in raw_host.get("compiled_reference_walls_rounds") or [] if r.get("windows")]
    if not rounds:
        return None
    first = [{k: v[0] for k, v in r["windows"].items()} for r in rounds]
    plain = host.replace(compiled_forward_factor=None)
    return {"first_window": forward_factor(fastest_walls(first), spec, plain, mode="compiled")[0],
            "fastest_window": forward_factor(fastest_walls(rounds), spec, plain, mode="compiled")[0],
            "windows": [r["windows"] for r in rounds]}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python3 -m validation.score.compiled_forward")
    ap.add_argument("--records", required=True, help="a zoo_run records file (.jsonl.gz)")
    ap.add_argument("--host", required=True, help="the lease's host calibration (<gpu>/host/*.toml)")
    ap.add_argument("--gpu", default="h200")
    ap.add_argument("--json", default=None, help="also write the rows and summary here")
    a = ap.parse_args(argv)
    spec, host = lease_setup(load_spec(calibrated_name(a.gpu)), a.host)
    with open(a.host + ".raw.json") as f:
        raw_host = json.load(f).get("host") or {}
    cal = raw_host.get("reference_walls") or {}
    rows = case_rows(read_records(a.records), spec, host, cal)
    print(markdown(rows, host))
    wf = window_factors(raw_host, spec, host)
    if wf:
        print(f"\ncompiled_forward_factor from each round's first window {wf['first_window']:.3f}, "
              f"from the fastest window {wf['fastest_window']:.3f}")
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"rows": rows, "summary": summary(rows)}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
