"""Fit the collective laws (:mod:`gpusim.cost.collectives`) on our own NCCL sweeps, score them, write the figures.

``python3 validation/fit/fit_collectives.py [RECORDS.jsonl ...] [--check]``

Reads ``validation/results/collectives/*.jsonl`` (``validation/measure/collectives.py`` under torchrun). Only clean
runs are fitted: a run whose environment set ``NCCL_DEBUG`` logged every call from the host, which slows small
messages, so it serves only as the second run for run-to-run noise above 1 MiB.

Per GPU and collective, three size regimes (NCCL's protocol switch as its log shows it on 2x H200: LL up to 1 MiB,
Simple above; Simple split at 32 MiB because its bus bandwidth still climbs there). Each regime's
``time - steps(n) x hop_us[protocol] = base_us + bytes x factor(n) / busbw`` is a least-squares fit in relative
error over its points, every world size at once; ``hop_us`` is NCCL's own (the link file's ``[nccl]``).

Writes the ``[measured."<gpu>"]`` tables of the GPU's link file (below the marker line) and ``docs/collectives.md``:
measured bus bandwidths and latencies, the fitted figures, and the scores: in sample; leave one world size out
(when the records hold two or more); alternate sizes left out (fit on 1 KiB x 4^k, predict the sizes between); and
the reference points of 4 GPUs from DESIGN.md and KINDS.md (scored, never fitted). ``--check`` writes nothing and
fails if a written file would change.
"""

from __future__ import annotations

import argparse
import dataclasses
import glob
import json
import math
import os
import statistics
import sys
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from gpusim.cost.collectives import BUSBW_FACTOR, RING_STEPS, ring  # noqa: E402
from gpusim.hw.links import COLLECTIVES, Measured, Regime, link_spec, links_dir  # noqa: E402
from gpusim.hw.spec_io import figure_line  # noqa: E402

MARKER = "# --- measured: written by validation/fit/fit_collectives.py; do not edit below this line ---"
#: (upper bound in bytes, regime name, NCCL protocol): LL up to 1 MiB (NCCL 2.28.9's choice on 2x H200, its log in
#: validation/results/collectives/h200-x2-2026-11-28-nccl.txt), split at 16 KiB where NCCL goes from 1-2 channels to
#: 4 and more (all-reduce's time steps up there); Simple above, split at 32 MiB where busbw still climbs
REGIMES = ((16 << 10, "ll_small", "ll"), (1 << 20, "ll", "ll"), (32 << 20, "mid", "simple"),
           (math.inf, "large", "simple"))
#: which link and GPU spec a record's GPU measured (NV18 on every lent H100/H200 machine: `nvidia-smi topo -m`)
GPUS = {"NVIDIA H200": ("nvlink4", "h200-sxm"), "NVIDIA H100 80GB HBM3": ("nvlink4", "h100-sxm")}
#: bus bandwidth at 1 GiB measured by earlier sessions, never fitted: (gpu, link, world, collective, GB/s, where)
REFERENCE = (
    ("h200-sxm", "nvlink4", 4, "all_reduce", 353.0, "DESIGN.md 'Measured across GPUs' (4x H200 NV18, NCCL 2.28)"),
    ("h200-sxm", "nvlink4", 4, "all_gather", 322.0, "DESIGN.md 'Measured across GPUs' (4x H200 NV18, NCCL 2.28)"),
    ("h200-sxm", "nvlink4", 4, "reduce_scatter", 318.0, "DESIGN.md 'Measured across GPUs' (4x H200 NV18, NCCL 2.28)"),
    ("h200-sxm", "nvlink4", 2, "all_gather", 267.0, "DESIGN.md 'Measured across GPUs' (2x H200 NV18, NCCL 2.28)"),
    ("h100-sxm", "nvlink4", 4, "all_reduce", 355.0, "device KINDS.md, nvidia-h100-x4 seen working 2026-11-13"),
    ("h100-sxm", "nvlink4", 8, "all_reduce", 361.0, "device KINDS.md, nvidia-h100-x8 seen working 2026-11-13"),
)


# ---------------------------------------------------------------- records

def load_runs(paths) -> list[dict]:
    """Runs: {"env", "path", "clean", "points": [record], "overlap": [record]}; a run starts at an environment."""
    runs = []
    for p in paths:
        cur = None
        for line in open(p):
            r = json.loads(line)
            if r["kind"] == "environment":
                cur = {"env": r, "path": os.path.relpath(p, ROOT), "points": [], "overlap": [],
                       "clean": "NCCL_DEBUG" not in r.get("env", {})}
                runs.append(cur)
            elif cur is not None and r["kind"] == "collective" and "error" not in r:
                cur["points"].append(r)
            elif cur is not None and r["kind"] == "overlap" and "error" not in r:
                cur["overlap"].append(r)
    return runs


def points(runs, gpu_name, clean=True) -> dict:
    """(collective, world) -> {bytes: median us over the runs}."""
    acc = defaultdict(lambda: defaultdict(list))
    for run in runs:
        if run["env"]["gpu_name"] != gpu_name or (clean and not run["clean"]):
            continue
        for r in run["points"]:
            acc[(r["collective"], r["world_size"])][r["bytes"]].append(r["us"])
    return {k: {b: statistics.median(v) for b, v in sorted(d.items())} for k, d in acc.items()}


# ---------------------------------------------------------------- fit

def fit_regime(pts, collective, hop_us, max_gbs) -> tuple[float, float]:
    """(base_us, busbw_gbs) minimising sum(((base + steps x hop + x / bw) - t) / t)^2 over (bytes, world, t);
    a bandwidth above ``max_gbs`` (the link's one-direction datasheet figure) is one the points do not resolve
    (a latency-bound regime): then busbw = max_gbs and the base alone is fitted."""
    s11 = s12 = s22 = b1 = b2 = 0.0
    for nbytes, n, t in pts:
        x = nbytes * BUSBW_FACTOR[collective](n) / 1e3   # us x GB/s
        y = t - RING_STEPS[collective](n) * hop_us
        w = 1.0 / (t * t)
        s11, s12, s22, b1, b2 = s11 + w, s12 + w * x, s22 + w * x * x, b1 + w * y, b2 + w * x * y
    det = s11 * s22 - s12 * s12
    a, b = ((s22 * b1 - s12 * b2) / det, (s11 * b2 - s12 * b1) / det) if len(pts) > 1 and det > 0 else (0.0, 0.0)
    if b < 1.0 / max_gbs:   # latency-bound: least squares (relative) on the base alone at the ceiling bandwidth
        b = 1.0 / max_gbs
        ys = [(t - RING_STEPS[collective](n) * hop_us - nb * BUSBW_FACTOR[collective](n) / 1e3 * b, t)
              for nb, n, t in pts]
        a = sum(y / t ** 2 for y, t in ys) / sum(1 / t ** 2 for _, t in ys)
    if a <= 0:   # a negative intercept is the fit's, not a latency: refit the slope through a small base
        a = 0.1
        b = sum((t - RING_STEPS[collective](n) * hop_us - a) * (nb * BUSBW_FACTOR[collective](n) / 1e3) / t ** 2
                for nb, n, t in pts) / sum((nb * BUSBW_FACTOR[collective](n) / 1e3) ** 2 / t ** 2 for nb, n, t in pts)
    return a, 1.0 / b


def fit(data: dict, link, worlds, sizes=None) -> dict:
    """collective -> tuple[Regime] fitted on the world sizes ``worlds`` (and only ``sizes``, if given)."""
    out = {}
    for coll in COLLECTIVES:
        pts = [(b, n, t) for (c, n), d in data.items() if c == coll and n in worlds for b, t in d.items()
               if sizes is None or b in sizes]
        if not pts:
            continue
        regs, lo = [], 0
        for hi, name, proto in REGIMES:
            sel = [p for p in pts if lo < p[0] <= hi]
            lo = hi
            if sel:
                base, bw = fit_regime(sel, coll, link.hop_us[proto], link.unidirectional_gbs)
                regs.append(Regime(name, proto, hi, base, bw))
        out[coll] = tuple(regs)
    return out


def with_fit(link, gpu, regimes, overlap=None, record="fit"):
    return dataclasses.replace(link, measured={gpu: Measured(gpu, record, regimes, overlap or {})})


def errors(link, gpu, data, worlds, sizes=None) -> dict:
    """collective -> [|pred - meas| / meas] over the points of ``worlds`` (and ``sizes``)."""
    out = defaultdict(list)
    for (coll, n), d in data.items():
        if n not in worlds:
            continue
        for b, t in d.items():
            if sizes is None or b in sizes:
                out[coll].append(abs(ring(coll, b, n, link, gpu).us - t) / t)
    return out


def q(xs, p):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, max(0, math.ceil(p * len(xs)) - 1))]


# ---------------------------------------------------------------- noise and overlap

def noise(runs, gpu_name) -> dict:
    """Run-to-run |difference| / mean between runs above 1 MiB (any runs), and the within-run spread
    (max - min) / median of the samples (clean runs), as lists."""
    per = defaultdict(dict)
    for i, run in enumerate(r for r in runs if r["env"]["gpu_name"] == gpu_name):
        for r in run["points"]:
            per[(r["collective"], r["world_size"], r["bytes"])][i] = r["us"]
    between = [abs(v[a] - v[b]) / ((v[a] + v[b]) / 2) for k, v in per.items() if k[2] > (1 << 20) and len(v) > 1
               for a, b in [sorted(v)[:2]]]
    within = [(r["us"] - r["us_min"]) / r["us"] for run in runs if run["clean"] and
              run["env"]["gpu_name"] == gpu_name for r in run["points"]]
    return {"between": between, "within": within}


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


# ---------------------------------------------------------------- writing

def provenance(runs, gpu_name) -> str:
    run = next(r for r in runs if r["clean"] and r["env"]["gpu_name"] == gpu_name)
    e = run["env"]
    worlds = sorted({r["env"]["world_size"] for r in runs if r["clean"] and r["env"]["gpu_name"] == gpu_name})
    paths = sorted({r["path"] for r in runs if r["clean"] and r["env"]["gpu_name"] == gpu_name})
    return (f"{', '.join(paths)} ({e['gpu_name']}, world sizes {worlds}, {e['utc'][:10]}, NCCL {e['nccl']}, "
            f"torch {e['torch']}, NCCL_NVLS_ENABLE=0; `NCCL_NVLS_ENABLE=0 python3 -m torch.distributed.run "
            f"--nproc-per-node N validation/measure/collectives.py --out FILE`), clean runs only, "
            f"fitted by validation/fit/fit_collectives.py")


def measured_block(gpu, gpu_name, regimes, overlap, ref) -> str:
    lines = [f'[measured."{gpu}"]', f'gpu = "{gpu_name}"', f'record = "{ref.split(" (")[0]}"']
    for coll, regs in regimes.items():
        for r in regs:
            lines += ["", f'[measured."{gpu}".{coll}.{r.name}]', f'protocol = "{r.protocol}"']
            if math.isfinite(r.max_bytes):
                lines.append(f"max_bytes = {int(r.max_bytes)}")
            lines.append(figure_line("base_us", round(r.base_us, 2), "measured",
                                     f"intercept of the {r.name} regime less NCCL's {r.protocol} hops; {ref}"))
            lines.append(figure_line("busbw_gbs", round(r.busbw_gbs, 1), "measured",
                                     f"bus bandwidth of the {r.name} regime (nccl-tests' factor); {ref}"))
    if overlap:
        what = {"gemm_slowdown": "a bf16 8192^3 GEMM loop timed alone vs while 256 MiB bf16 all-reduces run on "
                                 "another stream (median over runs of the slower rank)",
                "copy_slowdown": "a 1 GiB fp32 device copy loop timed alone vs while 256 MiB bf16 all-reduces run "
                                 "on another stream",
                "comm_slowdown": "the 256 MiB all-reduce loop under the GEMM loop vs alone; a lower bound, since "
                                 "the all-reduce loop outlasts the GEMMs"}
        lines += ["", f'[measured."{gpu}".overlap]']
        lines += [figure_line(k, round(v, 3), "measured", f"{what[k]}; {ref}") for k, v in sorted(overlap.items())]
    return "\n".join(lines) + "\n"


def link_text(path: Path, blocks: list[str]) -> str:
    head = path.read_text().split(MARKER)[0].rstrip("\n")
    return head + "\n\n" + MARKER + "\n" + "\n".join(blocks)


def size(b: int) -> str:
    return f"{b >> 30} GiB" if b >= 1 << 30 else f"{b >> 20} MiB" if b >= 1 << 20 else f"{b >> 10} KiB"


def pct(x):
    return f"{100 * x:.1f}%"


def doc(results) -> str:
    out = ["# Collectives: measured, fitted, scored", "",
           "Generated by `python3 validation/fit/fit_collectives.py` from `validation/results/collectives/*.jsonl` "
           "(do not edit). The law (`gpusim.cost.collectives`, one per collective, ring): "
           "`time = base_us + steps(n) x hop_us + bytes x factor(n) / busbw`, with nccl-tests' bus-bandwidth "
           "factor, NCCL's own per-step latencies (`hwspecs/links/*.toml` `[nccl]`), and `base_us`/`busbw` per "
           "size regime fitted here (`[measured.\"<gpu>\"]` of the link file). Error = |predicted - measured| / "
           "measured time, per size (1 KiB .. 1 GiB, powers of 2), median and p90 over the sizes.", ""]
    for gpu, r in results.items():
        out += [f"## {r['gpu_name']} ({gpu}, link {r['link']})", "", r["ref"], ""]
        out += ["### Measured", "", "| collective | world | latency (<= 8 KiB, median) | busbw at 1 GiB |",
                "| --- | --- | --- | --- |"]
        for (coll, n), d in sorted(r["data"].items()):
            small = statistics.median(t for b, t in d.items() if b <= 8192)
            top = max(d)
            bw = top * BUSBW_FACTOR[coll](n) / (d[top] * 1e3)
            out.append(f"| {coll} | {n} | {small:.1f} us | {bw:.0f} GB/s ({size(top)}) |")
        out += ["", "### Fitted (all clean runs)", "", "| collective | regime | protocol | up to | base_us | busbw GB/s |",
                "| --- | --- | --- | --- | --- | --- |"]
        for coll, regs in r["regimes"].items():
            for g in regs:
                up = "-" if not math.isfinite(g.max_bytes) else size(int(g.max_bytes))
                out.append(f"| {coll} | {g.name} | {g.protocol} | {up} | {g.base_us:.2f} | {g.busbw_gbs:.1f} |")
        out += ["", "### Scores", "", "| fit on | scored on | collective | points | median | p90 |",
                "| --- | --- | --- | --- | --- | --- |"]
        for label, scored, errs in r["scores"]:
            for coll in COLLECTIVES:
                if errs.get(coll):
                    e = errs[coll]
                    out.append(f"| {label} | {scored} | {coll} | {len(e)} | {pct(statistics.median(e))} | "
                               f"{pct(q(e, 0.9))} |")
        if not r["loo"]:
            out += ["", f"Leave one world size out: not scored; the records hold world size(s) {r['worlds']} only "
                    "(no machine of 4 GPUs was lent when this sweep ran). The reference points below are the only "
                    "check across world sizes."]
        out += ["", "### Reference points (bus bandwidth at 1 GiB, measured by earlier sessions; scored, never "
                "fitted)", "", "| GPU | world | collective | measured | predicted | error | where |",
                "| --- | --- | --- | --- | --- | --- | --- |"]
        for ref_gpu, ref_gpu_link, n, coll, bw, where in REFERENCE:
            p = ring(coll, 1 << 30, n, r["linkspec"], ref_gpu)
            out.append(f"| {ref_gpu} | {n} | {coll} | {bw:.0f} GB/s | {p.busbw_gbs:.0f} GB/s ({p.source}) | "
                       f"{pct(abs(p.busbw_gbs - bw) / bw)} | {where} |")
        nz = r["noise"]
        out += ["", "### Noise", ""]
        if nz["between"]:
            out.append(f"- between two runs, sizes above 1 MiB: median {pct(statistics.median(nz['between']))}, "
                       f"p90 {pct(q(nz['between'], 0.9))} ({len(nz['between'])} points; one of the runs logged "
                       "with NCCL_DEBUG, which leaves sizes above 1 MiB alone)")
        out.append(f"- within a run, (median - fastest) / median of a point's samples: median "
                   f"{pct(statistics.median(nz['within']))}, p90 {pct(q(nz['within'], 0.9))} (some samples are far "
                   "slower, up to 40x at small sizes: a host stall past the queued lead; the median ignores them)")
        if r["overlap"]:
            out += ["", "### Concurrent compute while NCCL runs (all-reduce of 256 MiB bf16 on another stream)", ""]
            out += [f"- {k}: {v:.3f}" for k, v in sorted(r["overlap"].items())]
        out.append("")
    return "\n".join(out)


def run(paths, check=False) -> dict:
    runs = load_runs(paths)
    results, blocks = {}, defaultdict(list)
    for gpu_name in sorted({r["env"]["gpu_name"] for r in runs if r["clean"]}):
        if gpu_name not in GPUS:
            print(f"skipping {gpu_name}: add it to GPUS (its link and spec name)", file=sys.stderr)
            continue
        link_name, gpu = GPUS[gpu_name]
        base = link_spec(link_name)
        data = points(runs, gpu_name)
        worlds = sorted({n for _, n in data})
        ref = provenance(runs, gpu_name)
        regimes = fit(data, base, worlds)
        ov = overlap_figures(runs, gpu_name)
        full = with_fit(base, gpu, regimes, ov)
        scores = [(f"n={worlds}", f"n={worlds} (in sample)", errors(full, gpu, data, worlds))]
        loo = len(worlds) > 1
        for w in worlds if loo else []:
            rest = [x for x in worlds if x != w]
            scores.append((f"n={rest}", f"n={w} (left out)", errors(with_fit(base, gpu, fit(data, base, rest)), gpu,
                                                                    data, [w])))
        sizes = {b for d in data.values() for b in d}
        even = {b for b in sizes if round(math.log(b / 1024, 4), 6).is_integer()}
        alt = with_fit(base, gpu, fit(data, base, worlds, even))
        scores.append(("1 KiB x 4^k", "sizes between (left out)", errors(alt, gpu, data, worlds, sizes - even)))
        results[gpu] = {"gpu_name": gpu_name, "link": link_name, "ref": ref, "data": data, "regimes": regimes,
                        "scores": scores, "loo": loo, "worlds": worlds, "linkspec": full,
                        "noise": noise(runs, gpu_name), "overlap": ov}
        blocks[link_name].append(measured_block(gpu, gpu_name, regimes, ov, ref))
    outputs = {links_dir() / f"{ln}.toml": link_text(links_dir() / f"{ln}.toml", bl) for ln, bl in blocks.items()}
    outputs[ROOT / "docs" / "collectives.md"] = doc(results)
    stale = [p for p, text in outputs.items() if not p.exists() or p.read_text() != text]
    if check:
        for p in stale:
            print(f"stale: {os.path.relpath(p, ROOT)} (run python3 validation/fit/fit_collectives.py)")
    else:
        for p, text in outputs.items():
            p.write_text(text)
            print(f"wrote {os.path.relpath(p, ROOT)}")
    return {"results": results, "stale": stale}


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("records", nargs="*", help="JSONL records (default: validation/results/collectives/*.jsonl)")
    ap.add_argument("--check", action="store_true", help="write nothing; exit 1 if a written file would change")
    args = ap.parse_args(argv)
    paths = args.records or sorted(glob.glob(str(ROOT / "validation/results/collectives/*.jsonl")))
    out = run(paths, check=args.check)
    for gpu, r in out["results"].items():
        for label, scored, errs in r["scores"]:
            meds = ", ".join(f"{c} {pct(statistics.median(e))}" for c, e in errs.items() if e)
            print(f"{gpu}: fit {label} -> {scored}: {meds}")
    return 1 if args.check and out["stale"] else 0


if __name__ == "__main__":
    sys.exit(main())
