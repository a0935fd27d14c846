"""Where the predicted time of published rows goes, by kernel class (issue 35): for each
published eager row of a family (timm's AMP tables, :mod:`validation.score.published`), gpusim's
eager kernels on the row's datasheet spec summed by law (``role:variant``), with the row's
signed error. No kernels were published, so this shows what dominates a prediction, not
which class is wrong; nothing is fitted on these rows.

``python3 -m validation.score.published_classes [--gpu rtx3090] [--layout nchw] [--family cnn]
[--json OUT]``
"""

from __future__ import annotations

import argparse
import collections
import json
import sys


def row_classes(r: dict) -> dict:
    """``{"model", "meas_ms", "pred_ms", "laws": {law: us}}`` of one published row."""
    import torch

    from gpusim.capture.tracing import capture
    from gpusim.hw.spec import load_spec
    from gpusim.models import zoo
    from gpusim.predict.pipeline import predict
    module, args = zoo.build(r["model"], dtype=getattr(torch, r["dtype"]), channels_last=r["layout"] == "nhwc",
                             batch=r["batch"], hw=r["img_size"])
    p = predict(capture(module, args, name=r["model"], amp=r.get("amp")), gpu=load_spec(r["gpu"]), mode="eager")
    laws = collections.defaultdict(float)
    for k in p.kernels:
        laws[f"{k.role}:{k.variant or k.kind}"] += k.us
    return {"model": r["model"], "gpu": r["gpu"], "layout": r["layout"], "meas_ms": r["step_ms"],
            "pred_ms": p.device_us / 1e3, "laws": dict(laws)}


def main(argv=None) -> int:
    from gpusim.models import zoo
    from validation.score.published import load_rows
    ap = argparse.ArgumentParser(prog="python3 -m validation.score.published_classes")
    ap.add_argument("--gpu", default="rtx3090")
    ap.add_argument("--layout", default="nchw")
    ap.add_argument("--family", default="cnn")
    ap.add_argument("--table", default="", help="only rows of tables whose name contains this")
    ap.add_argument("--json", help="write the rows here")
    a = ap.parse_args(argv)
    rows = [r for r in load_rows([a.gpu]) if r["layout"] == a.layout and r["mode"] == "eager"
            and a.table in r["table"] and zoo.get(r["model"]).family == a.family]
    out, total = [], collections.defaultdict(float)
    for r in rows:
        c = row_classes(r)
        out.append(c)
        for k, v in c["laws"].items():
            total[k] += v
        print(f"{c['model']}: {c['pred_ms']:.1f} ms predicted vs {c['meas_ms']:.1f} ms "
              f"({(c['pred_ms'] - c['meas_ms']) / c['meas_ms'] * 100:+.1f}%)", flush=True)
    all_us = sum(total.values())
    print(f"\n| law | predicted ms | share |\n|---|---|---|")
    for k, v in sorted(total.items(), key=lambda x: -x[1]):
        print(f"| {k} | {v / 1e3:.1f} | {v / all_us * 100:.1f}% |")
    if a.json:
        with open(a.json, "w") as f:
            json.dump(out, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
