"""The collective sweeps' records: runs, points, noise, and which runs a GPU's law is fitted on (graph or eager).

A run of ``validation/measure/collectives.py`` is "graph" (``--graph``: k calls captured in one CUDA graph and
replayed, the collective's DEVICE time, each record also holding the same run's eager loop ``eager_us`` and the
host's cost of a c10d call ``host_call_us`` / ``host_issue_us``) or "eager" (no ``--graph``; every record before it:
back-to-back eager calls behind a sleep kernel, at 1 MiB and below the host's launch-bound rate). gpusim's simulator
wants the device time (the host's issue cost is the host profile's), so a GPU's law is fitted on its clean graph
runs where it has any (:func:`select`), else on its eager runs; the eager runs are then fitted and scored on their
own as what back-to-back eager calls pay, and :func:`compare` sets the two side by side per size.
"""

from __future__ import annotations

import json
import os
import statistics
from collections import defaultdict
from pathlib import Path

from gpusim.hw.links import COLLECTIVES
from validation.measure.collectives import op_numel

ROOT = Path(__file__).resolve().parents[2]

#: size bands of the graph-vs-eager comparison: (label, smallest bytes, largest bytes)
BANDS = (("<= 8 KiB", 0, 8 << 10), ("16 KiB - 1 MiB", 16 << 10, 1 << 20), ("2 - 64 MiB", 2 << 20, 64 << 20),
         (">= 128 MiB", 128 << 20, 1 << 62))


def load_runs(paths) -> list[dict]:
    """Runs: {"env", "path", "clean", "points": [record], "overlap": [record]}; a run starts at an environment."""
    runs = []
    for p in paths:
        cur = None
        for line in open(p):
            r = json.loads(line)
            if r["kind"] == "environment":
                lead = r.get("args", {}).get("lead_per_call_us", 30.0)
                cur = {"env": r, "path": os.path.relpath(p, ROOT), "points": [], "overlap": [],
                       "method": run_method(r), "clean": "NCCL_DEBUG" not in r.get("env", {}) and lead == 30.0}
                runs.append(cur)
            elif cur is not None and r["kind"] == "collective" and "error" not in r:
                cur["points"].append(r)
            elif cur is not None and r["kind"] == "overlap" and "error" not in r:
                cur["overlap"].append(r)
    return runs


#: the sharded collectives, whose per-rank shard starts at rank x shard bytes in the gathered buffer
SHARDED = ("all_gather", "reduce_scatter")
#: NCCL's vector width: a shard whose start is off this many bytes runs a slower copy path
SHARD_ALIGN = 16


def shard_bytes(r: dict) -> int:
    """Bytes of one rank's shard in a sweep record (recorded since --align-bytes; older records: nccl-tests' sizes,
    the element count rounded down to a multiple of the world size)."""
    if "shard_bytes" in r:
        return r["shard_bytes"]
    esz = {"float32": 4, "bfloat16": 2, "float16": 2}[r.get("dtype", "bfloat16")]
    return op_numel(r["bytes"], r["world_size"], esz) // r["world_size"] * esz


def misaligned(r: dict) -> bool:
    """A sharded collective's record whose shards start off a 16-byte boundary (nccl-tests' power-of-two sizes at 3
    ranks): measured 1.3-1.9x slower above 16 MiB on the H200s than the same size with aligned shards
    (validation/results/collectives/h200-x4-2026-11-28-graph-noreg-align16-w3*.jsonl), a regime the law leaves out."""
    return r["collective"] in SHARDED and shard_bytes(r) % SHARD_ALIGN != 0


def points(runs, gpu_name, clean=True, aligned=True) -> dict:
    """(collective, world) -> {bytes: median us over the runs}; with ``aligned``, records whose shards are
    misaligned (:func:`misaligned`) left out."""
    acc = defaultdict(lambda: defaultdict(list))
    for run in runs:
        if run["env"]["gpu_name"] != gpu_name or (clean and not run["clean"]):
            continue
        for r in run["points"]:
            if aligned and misaligned(r):
                continue
            acc[(r["collective"], r["world_size"])][r["bytes"]].append(r["us"])
    return {k: {b: statistics.median(v) for b, v in sorted(d.items())} for k, d in acc.items()}


def noise(runs, gpu_name) -> dict:
    """Run-to-run |difference| / mean of one point between two runs of the same world size: ``between`` above 1 MiB
    (any runs, as before the second host), ``clean`` at every size between clean runs (world 4's two runs; world 2 on
    the 2-GPU and on the 4-GPU host), with the collective of each; and the within-run spread (median - fastest) /
    median of the samples (clean runs), as lists."""
    per, cln = defaultdict(dict), defaultdict(dict)
    for i, run in enumerate(r for r in runs if r["env"]["gpu_name"] == gpu_name):
        for r in run["points"]:
            per[(r["collective"], r["world_size"], r["bytes"])][i] = r["us"]
            if run["clean"]:
                cln[(r["collective"], r["world_size"], r["bytes"])][i] = r["us"]

    def pairs(d, keep):
        return [(k[0], abs(v[a] - v[b]) / ((v[a] + v[b]) / 2)) for k, v in d.items() if keep(k) and len(v) > 1
                for a, b in [sorted(v)[:2]]]
    within = [(r["us"] - r["us_min"]) / r["us"] for run in runs if run["clean"] and
              run["env"]["gpu_name"] == gpu_name for r in run["points"]]
    return {"between": [e for _, e in pairs(per, lambda k: k[2] > (1 << 20))],
            "clean": pairs(cln, lambda k: True), "within": within}


def small_by_run(runs, gpu_name) -> dict:
    """(run label, collective) -> median time of the messages of 8 KiB and below in that clean run: the small-message
    floor of each lease and world size."""
    out = {}
    for run in runs:
        if not run["clean"] or run["env"]["gpu_name"] != gpu_name:
            continue
        e = run["env"]
        label = (f"{os.path.basename(run['path']).removesuffix('.jsonl')} run {e['args'].get('repeat_index', 0)}, "
                 f"world {e['world_size']}")
        for c in COLLECTIVES:
            xs = [r["us"] for r in run["points"] if r["collective"] == c and r["bytes"] <= 8192]
            if xs:
                out[(label, c)] = statistics.median(xs)
    return out


def overlap_figures(runs, gpu_name) -> dict:
    rows = [o for run in runs if run["clean"] and run["env"]["gpu_name"] == gpu_name for o in run["overlap"]]
    g = [o for o in rows if o["compute"].startswith("gemm")]
    c = [o for o in rows if o["compute"].startswith("copy")]
    out = {}
    if g:
        out["gemm_slowdown"] = statistics.median(o["compute_slowdown"] for o in g)
        out["comm_slowdown"] = statistics.median(o["comm_us_with_compute"] / o["comm_us_alone"] for o in g)
    if c:
        out["copy_slowdown"] = statistics.median(o["compute_slowdown"] for o in c)
    return out


def run_method(env: dict) -> str:
    """A run's method from its environment record: "graph" where it ran with ``--graph``, else "eager"."""
    return "graph" if env.get("args", {}).get("graph") else "eager"


def select(runs, gpu_name, method: str | None = None) -> tuple[str, list]:
    """(method, that method's runs of ``gpu_name``): "graph" where any clean graph run exists, else "eager". Graph
    runs with and without ``NCCL_GRAPH_REGISTER=0`` are pooled: on the H200s they measured the same, 0-2% apart at
    every size above 1 MiB but one (validation/results/collectives/h200-x4-2026-11-28-graph-noreg-*.jsonl)."""
    mine = [r for r in runs if r["env"]["gpu_name"] == gpu_name]
    if method is None:
        method = "graph" if any(r["clean"] and r["method"] == "graph" for r in mine) else "eager"
    return method, [r for r in mine if r["method"] == method]


def fit_data(runs, gpu_name, method: str | None = None) -> tuple[str, list, dict, list]:
    """(method, its runs, the points a law is fitted on, the collectives filled in from the eager records): the
    method's points (:func:`select`), graph ones completed by :func:`fill_missing`."""
    method, sel = select(runs, gpu_name, method)
    data, filled = points(sel, gpu_name), []
    if method == "graph":
        data, filled = fill_missing(data, points(select(runs, gpu_name, "eager")[1], gpu_name))
    return method, sel, data, filled


def fill_missing(data: dict, eager: dict) -> tuple[dict, list]:
    """``data`` (graph points) with the eager points, at its world sizes, of each collective it has no point of (a
    collective whose capture failed), and those collectives."""
    have, worlds = {c for c, _ in data}, {n for _, n in data}
    missing = sorted({c for c, n in eager if n in worlds} - have)
    return {**data, **{k: v for k, v in eager.items() if k[0] in missing and k[1] in worlds}}, missing


def _median_by(rows, key, field) -> dict:
    acc = defaultdict(list)
    for r in rows:
        if r.get(field) is not None:
            acc[key(r)].append(r[field])
    return {k: statistics.median(v) for k, v in acc.items()}


def compare(runs, gpu_name) -> dict:
    """Per (collective, world, bytes), medians over the clean runs: ``graph`` (device time), ``eager_same`` (the
    graph runs' own eager loop, same lease), ``eager`` (the eager runs: earlier leases), ``host_call`` and
    ``host_issue`` (the graph runs' host cost of a c10d call). Empty without graph runs."""
    clean = [r for r in runs if r["clean"] and r["env"]["gpu_name"] == gpu_name]
    graph = [p for r in clean if r["method"] == "graph" for p in r["points"]]
    if not graph:
        return {}
    eager = [p for r in clean if r["method"] == "eager" for p in r["points"]]

    def key(p):
        return p["collective"], p["world_size"], p["bytes"]
    cols = {"graph": _median_by(graph, key, "us"), "eager_same": _median_by(graph, key, "eager_us"),
            "eager": _median_by(eager, key, "us"), "host_call": _median_by(graph, key, "host_call_us"),
            "host_issue": _median_by(graph, key, "host_issue_us")}
    return {k: {c: v.get(k) for c, v in cols.items()} for k in cols["graph"]}


def bands(cmp: dict) -> dict:
    """(collective, world) -> {band label: {column: median over the band's sizes}}; ratio columns ``graph/eager_same``
    and ``graph/eager`` are medians of the per-size ratios."""
    out = defaultdict(dict)
    for coll, n in sorted({(c, n) for c, n, _ in cmp}):
        for label, lo, hi in BANDS:
            rows = [v for (c, w, b), v in cmp.items() if (c, w) == (coll, n) and lo <= b <= hi]
            if not rows:
                continue
            cell = {}
            for col in ("graph", "eager_same", "eager", "host_call", "host_issue"):
                xs = [r[col] for r in rows if r[col] is not None]
                cell[col] = statistics.median(xs) if xs else None
            for den in ("eager_same", "eager"):
                xs = [r["graph"] / r[den] for r in rows if r[den]]
                cell[f"graph/{den}"] = statistics.median(xs) if xs else None
            out[(coll, n)][label] = cell
    return dict(out)


def alignment(runs, gpu_name) -> list[tuple]:
    """(collective, world, bytes, us with shards off 16 bytes, us with aligned shards) at each
    size measured both ways (clean graph runs; medians over the runs), above 1 MiB."""
    pts = [p for r in runs if r["clean"] and r["env"]["gpu_name"] == gpu_name and r["method"] == "graph"
           for p in r["points"] if p["collective"] in SHARDED and p["bytes"] > 1 << 20]

    def key(p):
        return p["collective"], p["world_size"], p["bytes"]
    off = _median_by([p for p in pts if misaligned(p)], key, "us")
    on = _median_by([p for p in pts if not misaligned(p)], key, "us")
    return [(*k, off[k], on[k]) for k in sorted(off) if k in on]
