"""Eager end-to-end accuracy on the host-breakdown leases (validation/results/h100/host/).

    python validation/host_accuracy.py [LEASE_TAG ...]     # default: every breakdown file

For each case of ``<lease>-breakdown.jsonl``: gpusim's eager end-to-end prediction with the
calibrated H100 spec and that lease's own host figures (``<lease>.toml``), against the
measured steady-state wall; the same with the per-module Python term replaced by the
Python the case really ran outside torch calls (``python_us``, measured on the device):
how much of the error the model's own Python explains; the same with the lease's host
figures scaled by the case's own eager-add probe (how much is the host's speed drifting
within the lease); and both. Prints absolute %
error, median / p90, by family and overall.
"""

from __future__ import annotations

import glob
import json
import os
import sys

import torch

from gpusim import capture, predict, zoo
from gpusim.hardware import HOST, OPTIONAL_HOST, calibrated_name, load_spec
from gpusim.validation.zoo_accuracy import _cell, _stats, ape

#: host figures that scale with the host's speed (per-op dispatch, views, launches, modules)
SCALED = ("eager_op_us", "eager_library_op_us", "eager_view_us", "kernel_launch_us",
          "eager_module_us", "sync_us")
HERE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "results", "h100", "host")


def lease_spec(tag: str):
    lease = load_spec(os.path.join(HERE, f"{tag}.toml"))
    spec = load_spec(calibrated_name("h100"))
    return spec.replace(**{k: getattr(lease, k) for k in HOST + OPTIONAL_HOST
                           if getattr(lease, k) is not None})


def rows(tag: str) -> list[dict]:
    spec = lease_spec(tag)
    out = []
    for line in open(os.path.join(HERE, f"{tag}-breakdown.jsonl")):
        r = json.loads(line)
        if "error" in r:
            continue
        m, args = zoo.build(r["model"], device="meta", dtype=torch.bfloat16, **r["sizes"])
        g = capture(m, args, name=r["model"])
        p = predict(g, gpu=spec, mode="eager")
        with_py = max(p.device_us, p.timeline.host_us
                      - g.meta.get("module_calls", 0) * (spec.eager_module_us or 0.0) + r["python_us"])
        # the host's speed when the case ran: its eager-add probe against the calibration's
        ratio = r["probe_before"]["eager_op_us"] / spec.eager_op_us
        scaled = spec.replace(**{k: getattr(spec, k) * ratio for k in SCALED if getattr(spec, k)})
        ps = predict(g, gpu=scaled, mode="eager")
        both = max(ps.device_us, ps.timeline.host_us
                   - g.meta.get("module_calls", 0) * (scaled.eager_module_us or 0.0) + r["python_us"])
        out.append({"model": r["model"], "family": zoo.get(r["model"]).family, "size": r["size"],
                    "wall": r["wall_us"], "pred": p.end_to_end_us, "pred_with_python": with_py,
                    "pred_probe": ps.end_to_end_us, "pred_probe_python": both})
    return out


def summary(rs: list[dict]) -> list[str]:
    lines = ["| family | cases | gpusim eager e2e | with the measured Python | host figures scaled "
             "by the case's probe | both |", "|---|---|---|---|---|---|"]
    for fam in sorted({r["family"] for r in rs}) + ["all"]:
        sel = [r for r in rs if fam in ("all", r["family"])]
        cells = [_cell(_stats([ape(r[key], r["wall"]) for r in sel]))
                 for key in ("pred", "pred_with_python", "pred_probe", "pred_probe_python")]
        lines.append(f"| {fam} | {len(sel)} | " + " | ".join(cells) + " |")
    return lines


def main(tags):
    tags = tags or sorted(os.path.basename(f)[:-len("-breakdown.jsonl")]
                          for f in glob.glob(os.path.join(HERE, "*-breakdown.jsonl")))
    for tag in tags:
        print(f"\n{tag} (median / p90 absolute error of eager wall per call)")
        print("\n".join(summary(rows(tag))))


if __name__ == "__main__":
    main(sys.argv[1:])
