"""Validation on published whole-model measurements of GPUs nobody here has.

Rows: ``validation/published/*.csv`` (columns gpu, layout, model, img_size, batch,
step_ms, source, and dtype where the table is not AMP), picked by a stated rule from public
tables: timm's benchmarks (``validation/published/extract.py``) and NVIDIA's
DeepLearningExamples ConvNets inference tables (``extract_dle.py``: ResNet-50 v1.5,
ResNeXt-101 32x4d, SE-ResNeXt-101 32x4d, EfficientNet-B0/B4 on the A100 80GB, V100 16GB
and T4; every batch-128 and -256 row, where the GPU bounds the step; AMP rows as
channels_last, the container's AMP setting; cuDNN benchmark mode on, as those scripts
set it, where gpusim predicts PyTorch's default heuristics). Nothing is fitted on them:
they only score predictions made from datasheet specs and the rules in ``gpusim``.

The timm tables time AMP (fp16 autocast) inference at batch 1024 with a sync per step:
the GPU is the bottleneck, so the step time is compared with gpusim's eager device time
per batch. AMP rows (timm's tables, which have no dtype column, and DeepLearningExamples'
"Mixed Precision" rows, run under ``torch.cuda.amp.autocast``) are predicted as they ran:
the fp32 model under ``torch.autocast("cuda", torch.float16)`` (``amp="fp16"``,
:mod:`gpusim.capture.amp`: autocast's casts, its fp32 norms and softmax, its per-call weight
casts).

    python3 -m validation.score.published [--gpu rtx3090] [--limit N] [--jobs N] [--json OUT]
"""

from __future__ import annotations

import argparse
import concurrent.futures
import csv
import glob
import json
import os
import statistics
import sys

from validation.records.stats import _stats

HERE = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "published")


def load_rows(gpus=None) -> list[dict]:
    rows = []
    for path in sorted(glob.glob(os.path.join(HERE, "*.csv"))):
        with open(path) as f:
            for r in csv.DictReader(f):
                if gpus and r["gpu"] not in gpus:
                    continue
                amp = "fp16" if is_amp(r) else None
                # timm's "-dynamo" tables: the model under torch.compile (Inductor's default)
                r.update(mode=r.get("mode") or "eager", bound=r.get("bound") or "device")
                r.update(img_size=int(r["img_size"]), batch=int(r["batch"]),
                         step_ms=float(r["step_ms"]), table=os.path.basename(path),
                         # timm's tables name timm models and run AMP (fp16 autocast)
                         model=r["model"] if ":" in r["model"] else f"timm:{r['model']}",
                         dtype="float32" if amp else r["dtype"], amp=amp)
                rows.append(r)
    return rows


def is_amp(r: dict) -> bool:
    """Whether a published row timed automatic mixed precision: timm's AMP tables (no
    dtype column) and DeepLearningExamples' "Mixed Precision" rows."""
    return not r.get("dtype") or "Mixed Precision" in r.get("source", "")


def predict_row(r: dict) -> dict:
    """gpusim's eager device time of one published row, or the one-line reason it has none."""
    import torch

    from gpusim.models import zoo
    from gpusim.capture.tracing import capture
    from gpusim.util.errors import GpusimError
    from gpusim.hw.spec import known_names, load_spec
    from gpusim.predict.pipeline import predict
    if r["gpu"] not in known_names():
        return dict(r, error=f"no spec {r['gpu']}")
    name = r["model"]
    try:
        module, args = zoo.build(name, dtype=getattr(torch, r["dtype"]),
                                 channels_last=r["layout"] == "nhwc",
                                 batch=r["batch"], hw=r["img_size"])
        p = predict(capture(module, args, name=name, amp=r.get("amp")),
                    gpu=load_spec(r["gpu"]), mode=r.get("mode", "eager"))
    except (GpusimError, RuntimeError, TypeError, ValueError) as e:
        return dict(r, error=f"{type(e).__name__}: {str(e).splitlines()[0][:160]}")
    family = zoo.get(name).family
    # a host-bound row's step is the whole call: the simulated end to end (reference host)
    us = p.end_to_end_us if r.get("bound") == "host" else p.device_us
    return dict(r, family=family, pred_ms=us / 1e3, kernels=len(p.kernels),
                device_ms=p.device_us / 1e3)


#: the summary's layout label of a compiled row (``nchw-compiled``)
COMPILED = "-compiled"
#: ... and of a host-bound row (``nchw-host``), scored on end-to-end time
HOST = "-host"


def part(r: dict) -> str:
    """A row's summary label: its layout, ``-compiled`` for a torch.compile row and
    ``-host`` for a host-bound one."""
    return (r["layout"] + (COMPILED if r.get("mode", "eager") != "eager" else "")
            + (HOST if r.get("bound") == "host" else ""))


def device_bound_eager(r: dict) -> bool:
    """Whether a row counts toward a GPU's figure: eager and device-bound."""
    return r.get("mode", "eager") == "eager" and r.get("bound", "device") == "device"


def error_stats(sel: list[dict]) -> dict | None:
    """Absolute % error median / p90 (the accuracy tables' figures), cases and signed median
    of predicted rows ``sel``; None for none."""
    errs = [(r["pred_ms"] - r["step_ms"]) / r["step_ms"] * 100 for r in sel]
    s = _stats([abs(e) for e in errs])
    return dict(s, signed_median=statistics.median(errs)) if s else None


def by_source(rows: list[dict]) -> list[dict]:
    """Per source table and mode: GPU, cases, absolute % error median / p90, signed median."""
    out = []
    def key(r):
        return (r["source"].split(" (")[0], r.get("mode", "eager")
                + (" end to end" if r.get("bound") == "host" else ""))
    for src in sorted({key(r) for r in rows}):
        sel = [r for r in rows if key(r) == src and "pred_ms" in r]
        s = error_stats(sel)
        if s:
            out.append(dict(s, source=src[0], mode=src[1], gpu=sorted({r["gpu"] for r in sel})))
    return out


def source_markdown(table: list[dict]) -> str:
    lines = ["| source | mode | GPU | cases | device time med / p90 | signed median |",
             "|---|---|---|---|---|---|"]
    for e in table:
        lines.append(f"| `{e['source']}` | {e['mode']} | {', '.join(e['gpu'])} | {e['n']} | "
                     f"{e['median']:.1f}% / {e['p90']:.1f}% | {e['signed_median']:+.1f}% |")
    return "\n".join(lines)


def summary(rows: list[dict]) -> dict:
    """Per (table, gpu, layout) and per family: absolute % error median / p90, signed
    median, cases, and how many rows could not be predicted."""
    stats = error_stats
    out = {}
    keys = sorted({(r["gpu"], part(r)) for r in rows})
    # and every GPU over its eager layouts and sources (the per-GPU figure the targets name)
    eager = sorted({(r["gpu"], part(r)) for r in rows if device_bound_eager(r)})
    keys += [(g, "all") for g in sorted({g for g, _ in eager})
             if len({lay for gg, lay in eager if gg == g}) > 1]
    for gpu, layout in keys:
        sel = [r for r in rows if r["gpu"] == gpu and
               (part(r) == layout or (layout == "all" and device_bound_eager(r)))]
        ok = [r for r in sel if "pred_ms" in r]
        fams = sorted({r["family"] for r in ok})
        out[f"{gpu} {layout}"] = {
            "source": "; ".join(sorted({r["source"].split(" (")[0] for r in sel})), "rows": len(sel), "failed": len(sel) - len(ok),
            "all": stats(ok), **{f: stats([r for r in ok if r["family"] == f]) for f in fams}}
    return out


def markdown(summ: dict) -> str:
    lines = ["| GPU | layout | family | cases | device time med / p90 | signed median | source |",
             "|---|---|---|---|---|---|---|"]
    for key, e in summ.items():
        gpu, layout = key.split()
        for fam in [k for k in e if k not in ("source", "rows", "failed")]:
            s = e[fam]
            if s:
                lines.append(f"| {gpu} | {layout} | {fam} | {s['n']} | {s['median']:.1f}% / "
                             f"{s['p90']:.1f}% | {s['signed_median']:+.1f}% | `{e['source']}` |")
        if e["failed"]:
            lines.append(f"| {gpu} | {layout} | not predicted | {e['failed']} | | | |")
    return "\n".join(lines)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python3 -m validation.score.published")
    ap.add_argument("--gpu", action="append", help="only these GPUs (rtx3090, rtx4090)")
    ap.add_argument("--mode", choices=("eager", "compiled"), default=None,
                    help="only the rows of this mode (default: all)")
    ap.add_argument("--limit", type=int, default=None, help="first N rows per table")
    ap.add_argument("--json", default=None, help="write the per-row predictions here")
    ap.add_argument("--jobs", type=int, default=1,
                    help="predict rows in this many processes (each row is independent)")
    a = ap.parse_args(argv)
    rows = [r for r in load_rows(a.gpu) if a.mode in (None, r["mode"])]
    if a.limit:
        seen: dict = {}
        rows = [r for r in rows if seen.setdefault((r["gpu"], r["layout"]), []).append(r)
                or len(seen[(r["gpu"], r["layout"])]) <= a.limit]
    done = []
    with concurrent.futures.ProcessPoolExecutor(max(1, a.jobs)) as pool:
        # map keeps the rows' order, so the stored scores do not depend on --jobs
        for i, p in enumerate(pool.map(predict_row, rows)):
            done.append(p)
            print(f"[{i + 1}/{len(rows)}] {p['gpu']} {p['layout']} {p['model']}: "
                  + (f"{p['pred_ms']:.1f} ms vs {p['step_ms']:.1f} ms"
                     if "pred_ms" in p else p["error"]), file=sys.stderr)
    summ = summary(done)
    print(markdown(summ))
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"summary": summ, "by_source": by_source(done), "rows": done}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
