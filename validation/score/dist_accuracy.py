"""Data-parallel steps predicted against the records of validation/measure/dist_run.py (docs/distributed.md).

Each record is one builder of validation/measure/dist_steps.py (DDP ResNet-50, DDP GPT-2, FSDP2 Llama-1B) at one world
size on one host: the step wall (median over timed steps of the slowest rank), rank 0's peak allocated memory and its
kernel list (one profiled step, with streams). The harness times each step from a synchronised start (barrier,
``cuda.synchronize()``) to ``cuda.synchronize()``, so a record's step is gpusim's ``synced_step_us`` (one step from
an idle GPU), not its back-to-back ``step_us`` (kept as ``pred_b2b_step_ms``, scored beside it in the summary).
gpusim predicts the same builder, captured from the same code under its fake process group, on the record's GPU (its calibrated spec) with the host profile of that GPU's leases
(``hosts/<gpu>-sxm-host.toml``: FSDP2's per-unit law fitted there on the microbenchmark, the Python's speed with 2+
ranks on the host; :func:`scoring_host`; ``--host lease-law`` or ``--host NAME`` for others). Scored: step wall, memory per
rank, scaling over world 1 (the same case's world-1 record and prediction), and the NCCL kernels of the plan against
those the profiler listed. Rewrites the generated table in docs/distributed.md and stores the rows
(validation/results/dist/predictions.json, which docs/accuracy.md's section across GPUs is generated from by
``python3 -m validation.reports.dist_page``).

    python3 -m validation.score.dist_accuracy [--check] [--stored]
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import statistics
import sys

from validation.records.jsonl import env_records

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
RECORDS = os.path.join(ROOT, "validation", "results", "dist")
DOC = os.path.join(ROOT, "docs", "distributed.md")
BEGIN, END = "<!-- generated: python3 -m validation.score.dist_accuracy -->", "<!-- end generated -->"
GPUS = {"NVIDIA H200": "h200", "NVIDIA H100 80GB HBM3": "h100"}
HOSTS = {"h200": "h200-sxm-host", "h100": "h100-sxm-host"}
#: profiler kernel name -> the plan's collective
NCCL = {"AllReduce": "all_reduce", "AllGather": "all_gather", "ReduceScatter": "reduce_scatter",
        "Broadcast": "broadcast"}


def records() -> list[tuple[dict, dict, str]]:
    """(environment, step record, file) for every step record."""
    return [(env, r, path) for env, r, path in env_records(os.path.join(RECORDS, "*.jsonl"), "step", ROOT)
            if "error" not in r]


def measured_collectives(rec: dict) -> dict:
    c = collections.Counter()
    for k in rec.get("kernels", []):
        if k["name"].startswith("ncclDevKernel_"):
            op = next((v for key, v in NCCL.items() if k["name"].startswith(f"ncclDevKernel_{key}")), "other")
            c[op] += 1
    return dict(c)


LAW = ("fsdp_hook_call_us", "fsdp_unit_us", "fsdp_unit_sync_us", "fsdp_unit_sync_doubling_us", "ranks_host_factor",
       "ranks_python_factor")


def scoring_host(gpu: str, host: str | None = "lease"):
    """``lease`` (the default): the host profile of the GPU's leases as it is (``hosts/<gpu>-sxm-host.toml``: its
    calibrated figures, FSDP2's law, validation/fit/fsdp_law.py, and the Python's speed with 2+ ranks on the host,
    ``ranks_python_factor``, validation/score/dist_scaling.py): world 1 priced by the host the records ran on, 2+ ranks
    by the same host as it slows with them. ``lease-law`` (the default before issue 33's host at N ranks): the
    reference host's figures with the lease host's FSDP2 law and rank factors (the reference host prices these leases'
    world-1 ResNet-50 steps 18-30% slow, which hid the slowdown at 2+ ranks: scaled on top of it, DDP steps at 2+ ranks
    read 17% slow). Else a host profile's name."""
    from gpusim.hw.host import load_host
    if host in (None, "lease"):
        return load_host(HOSTS.get(gpu, "reference"))
    if host != "lease-law":
        return load_host(host)
    ref, lease = load_host("reference"), load_host(HOSTS.get(gpu, "reference"))
    prov = dict(ref.provenance)
    prov.update({k: lease.provenance[k] for k in LAW if k in lease.provenance})
    from types import MappingProxyType
    return ref.replace(provenance=MappingProxyType(prov), **{k: getattr(lease, k) for k in LAW})


def predict_case(case: str, world: int, gpu: str, host: str | None = None, what_if: dict | None = None):
    """``what_if``: host figures in place of the scoring host's (``ranks_host_factor``, ``ranks_python_factor``)."""
    from gpusim.hw.spec import spec_for
    from gpusim.predict.distributed import predict_distributed
    from validation.measure import dist_steps
    h = scoring_host(gpu, host)
    if what_if:
        h = h.replace(**what_if)
    return predict_distributed(dist_steps.BUILDERS[case], spec_for(gpu), world, 1, world1=False, host=h)


def rows(progress: bool = False, host: str = "lease", what_if: dict | None = None) -> list[dict]:
    recs = records()
    preds = {}
    out = []
    for env, r, path in recs:
        gpu = GPUS.get(env["gpu"], env["gpu"])
        key = (gpu, r["case"], r["world"])
        if key not in preds:
            if progress:
                print(f"predicting {key}", file=sys.stderr, flush=True)
            preds[key] = predict_case(r["case"], r["world"], gpu, host, what_if)
        p = preds[key]
        plan = collections.Counter(op.kind for op in p.plan.ops if op.kind != "copy")
        out.append({"gpu": gpu, "case": r["case"], "world": r["world"], "record": path,
                    "meas_step_ms": r["step_ms"]["median"], "pred_step_ms": p.synced_step_us / 1e3,
                    "pred_b2b_step_ms": p.step_us / 1e3,
                    "meas_peak": r["peak_allocated_bytes"], "pred_peak": p.peak_bytes, "peak_phase": p.peak_phase,
                    "exposed_ms": p.exposed_comm_us / 1e3, "comm_ms": p.comm_us / 1e3,
                    "meas_nccl": measured_collectives(r), "pred_nccl": dict(plan)})
    w1 = {(x["gpu"], x["case"]): x for x in out if x["world"] == 1}
    w1_lease = {(x["record"], x["gpu"], x["case"]): x for x in out if x["world"] == 1}
    for x in out:       # over the same lease's world 1 where it has one, else another lease's
        base = w1_lease.get((x["record"], x["gpu"], x["case"]), w1.get((x["gpu"], x["case"])))
        x["meas_scaling"] = x["meas_step_ms"] / base["meas_step_ms"] if base else None
        x["pred_scaling"] = x["pred_step_ms"] / base["pred_step_ms"] if base else None
    return out


def _err(p, m):
    return (p - m) / m if m else None


def table(rs: list[dict]) -> str:
    lines = ["| lease | GPU | case | world | step ms (pred / meas) | error | scaling over 1 GPU (pred / meas) | error | "
             "peak memory per rank GiB (pred / meas) | error | comm ms (exposed) | NCCL kernels (plan / profiler) |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for x in rs:
        e = _err(x["pred_step_ms"], x["meas_step_ms"])
        se = _err(x["pred_scaling"], x["meas_scaling"]) if x["world"] > 1 and x["meas_scaling"] else None
        me = _err(x["pred_peak"], x["meas_peak"])
        nccl = ", ".join(f"{k} {x['pred_nccl'].get(k, 0)}/{x['meas_nccl'].get(k, 0)}"
                         for k in sorted(set(x["pred_nccl"]) | set(x["meas_nccl"]))) or "none"
        scal = (f"{x['pred_scaling']:.2f} / {x['meas_scaling']:.2f}" if x["world"] > 1 and x["meas_scaling"]
                else "—")
        lines.append(f"| {os.path.basename(x['record']).removesuffix('.jsonl')} | {x['gpu']} | {x['case']} | {x['world']} | {x['pred_step_ms']:.1f} / {x['meas_step_ms']:.1f} | "
                     f"{e:+.1%} | {scal} | {'—' if se is None else f'{se:+.1%}'} | "
                     f"{x['pred_peak'] / 2**30:.2f} / {x['meas_peak'] / 2**30:.2f} | {me:+.1%} | "
                     f"{x['comm_ms']:.1f} ({x['exposed_ms']:.1f}) | {nccl} |")
    return "\n".join(lines)


def summary(rs: list[dict]) -> dict:
    def med(vals):
        vals = [abs(v) for v in vals if v is not None]
        return statistics.median(vals) if vals else None
    out = {}
    groups = [(s, lambda x, s=s: s == "all" or x["case"].startswith(s)) for s in ("ddp", "fsdp")]
    groups += [(f"world {w}", lambda x, w=w: x["world"] == w) for w in sorted({x["world"] for x in rs})]
    groups.append(("all", lambda x: True))
    for strategy, keep in groups:
        sel = [x for x in rs if keep(x)]
        out[strategy] = {"cases": len(sel),
                         "step": med(_err(x["pred_step_ms"], x["meas_step_ms"]) for x in sel),
                         "step_b2b": med(_err(x["pred_b2b_step_ms"], x["meas_step_ms"]) for x in sel
                                         if "pred_b2b_step_ms" in x),
                         "memory": med(_err(x["pred_peak"], x["meas_peak"]) for x in sel),
                         "scaling": med(_err(x["pred_scaling"], x["meas_scaling"]) for x in sel
                                        if x["world"] > 1 and x["meas_scaling"])}
    return out


def summary_lines(s: dict) -> str:
    lines = ["| strategy / world | rows | step wall, median abs. error | (back-to-back step instead) | memory per rank "
             "| scaling over 1 GPU |", "|---|---|---|---|---|---|"]
    for k, v in s.items():
        f = lambda x: "—" if x is None else f"{x:.1%}"  # noqa: E731
        lines.append(f"| {k} | {v['cases']} | {f(v['step'])} | {f(v.get('step_b2b'))} | {f(v['memory'])} "
                     f"| {f(v['scaling'])} |")
    return "\n".join(lines)


def memtracker_table(rs: list[dict]) -> str | None:
    """PyTorch's FSDPMemTracker / MemTracker (validation/measure/dist_memtracker.py) beside the measured peak per rank
    (median over leases) and gpusim's, one row per attempt and machine it ran on; None without such records."""
    out = []
    for env, r, _ in env_records(os.path.join(RECORDS, "memtracker-*.jsonl"), "memtracker", ROOT):
        env = env or {}
        sel = [x for x in rs if x["case"] == r["case"] and x["world"] == r["world"]]
        meas = statistics.median(x["meas_peak"] for x in sel) if sel else None
        pred = sel[0]["pred_peak"] if sel else None
        tool = (f"{r['peak_bytes'] / 2**30:.2f} ({_err(r['peak_bytes'], meas):+.1%})"
                if "peak_bytes" in r and meas else f"fails: {r.get('error', '?')[:110]}")
        gib = lambda b: "—" if b is None else f"{b / 2**30:.2f}"  # noqa: E731
        gp = "—" if pred is None or not meas else f"{gib(pred)} ({_err(pred, meas):+.1%})"
        out.append(f"| {r['tool']} | {r['case']} | {r['world']} | {env.get('where', '?')} | {r.get('workaround') or 'none'} | {gib(meas)} | {gp} | {tool} |")
    if not out:
        return None
    return "\n".join(["PyTorch's own tools on the same steps, run as torchtitan's memory estimation runs them "
                      "(`validation/measure/dist_memtracker.py`; peak per rank in GiB, error against the measured "
                      "median over leases):", "",
                      "| tool | case | world | ran on | workaround | measured | gpusim | tool |",
                      "|---|---|---|---|---|---|---|---|"] + out)


def render(rs: list[dict]) -> str:
    srcs = sorted({x["record"] for x in rs})
    return "\n".join([BEGIN, "", f"Records: {', '.join(f'`{s}`' for s in srcs)}; predicted by gpusim from the same "
                      "builders (`validation/measure/dist_steps.py`) under its fake process group, on the record's "
                      "GPU (calibrated spec), the host profile of that GPU's leases (`hosts/h200-sxm-host.toml`: "
                      "FSDP2's per-unit law, `validation/fit/fsdp_law.py`, and the Python's speed with 2+ ranks on "
                      "the host, `ranks_python_factor`, `validation/score/dist_scaling.py`).", "", table(rs), "", summary_lines(summary(rs)), "",
                      *([memtracker_table(rs), ""] if memtracker_table(rs) else []), END])


STORED = os.path.join(RECORDS, "predictions.json")


def store(rs: list[dict], host: str) -> None:
    """The scored rows, for docs/accuracy.md (validation/reports/dist_page.py) and the tests."""
    what = {"lease": "the host profile of the GPU's leases (hosts/<gpu>-sxm-host.toml: FSDP2's law, "
                     "validation/fit/fsdp_law.py; ranks_python_factor, validation/score/dist_scaling.py)",
            "lease-law": "the reference host with FSDP2's per-unit law and rank factors of the GPU's lease host "
                         "(hosts/<gpu>-sxm-host.toml, validation/fit/fsdp_law.py)"}.get(host, f"host profile {host}")
    with open(STORED, "w") as f:
        json.dump({"host": what, "rows": rs, "summary": summary(rs)}, f, indent=1, sort_keys=True)
        f.write("\n")


def write_doc(text: str) -> None:
    doc = open(DOC).read()
    if BEGIN not in doc or END not in doc:
        raise SystemExit(f"{DOC}: no generated block ({BEGIN} ... {END})")
    a, b = doc.index(BEGIN), doc.index(END) + len(END)
    with open(DOC, "w") as f:
        f.write(doc[:a] + text + doc[b:])


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--check", action="store_true", help="print the table, leave docs/distributed.md alone")
    ap.add_argument("--json", action="store_true", help="print the rows as JSON")
    ap.add_argument("--stored", action="store_true", help="re-render the docs from the stored predictions")
    ap.add_argument("--host", default="lease",
                    help="'lease' (the GPU's lease host profile), 'lease-law' (reference host + the lease host's "
                         "FSDP2 law and rank factors) or a host profile's name")
    for fig in ("ranks_host_factor", "ranks_python_factor"):
        ap.add_argument("--" + fig.replace("_", "-"), type=float, default=None,
                        help=f"what-if: the scoring host's {fig} (host time at 2+ ranks over 1); implies --check")
    a = ap.parse_args(argv)
    what_if = {k: getattr(a, k) for k in ("ranks_host_factor", "ranks_python_factor") if getattr(a, k) is not None}
    if what_if:
        a.check = True
    if a.stored:
        with open(STORED) as f:
            rs = json.load(f)["rows"]
    else:
        rs = rows(progress=True, host=a.host, what_if=what_if)
    if a.json:
        print(json.dumps({"rows": rs, "summary": summary(rs)}, indent=1))
        return 0
    text = render(rs)
    if a.check:
        print(text)
    else:
        write_doc(text)
        if not a.stored:
            store(rs, a.host)
        print(f"wrote {os.path.relpath(DOC, ROOT)} and {os.path.relpath(STORED, ROOT)}; now python3 -m "
              "validation.reports.dist_page for docs/accuracy.md's section across GPUs", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
