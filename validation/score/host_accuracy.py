"""The model's own Python, priced by counts: the law's fit and its eager end-to-end accuracy
on the host-breakdown leases (validation/results/h100/host/).

    python validation/score/host_accuracy.py [--fit] [LEASE_TAG ...]   # default: every breakdown file

A prediction prices the model's Python from what capture counts (``module_calls``:
nn.Module calls, ``torch_calls``: top-level torch calls), never by clocking it
(:func:`gpusim.hw.host.python_us`). The law, in units of the host's own ``eager_module_us``
probe (so that it moves with the host's speed)::

    python_us = eager_module_us * (A * module_calls + B * torch_calls)

is fitted here (:func:`fit_law`: least squares on the relative error) on every case of
``<lease>-breakdown.jsonl``, against the Python the case really ran outside torch calls
(``python_us``, measured on the device) over that lease's ``eager_module_us``. ``--fit``
prints A and B and the law's held-out error (A and B refitted without the case's model
family); the host profiles carry ``A * eager_module_us`` and ``B * eager_module_us`` as
``python_module_call_us`` and ``python_torch_call_us`` (derived, naming this fit).

For each case it also prints gpusim's eager end-to-end error with the calibrated H100 spec
and that lease's own host profile (``<lease>.toml``, :func:`validation.score.zoo_accuracy.lease_setup`); the same with the Python term
replaced by the measured ``python_us`` (how much of the error the model's Python
explains); with the lease's host figures scaled by the case's own eager-add probe (how
much is the host's speed drifting within the lease); and both. Absolute % error, median
/ p90, by family and overall.
"""

from __future__ import annotations

import functools
import glob
import json
import os
import sys

import numpy as np
import torch

from gpusim import capture, predict

from gpusim.models import zoo
from gpusim.hw.spec import calibrated_name, load_spec
from gpusim.hw.host import load_host
from validation.score.zoo_accuracy import _cell, _stats, ape, lease_setup

#: host figures that scale with the host's speed (per-op dispatch, views, launches,
#: modules, the model's Python)
SCALED = ("eager_op_us", "eager_library_op_us", "eager_view_us", "kernel_launch_us",
          "eager_module_us", "sync_us", "python_module_call_us", "python_torch_call_us")
HERE = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "results", "h100", "host")


def lease_host(tag: str):
    return load_host(os.path.join(HERE, f"{tag}.toml"))


@functools.lru_cache(maxsize=None)
def _graph(model: str, sizes: str):
    m, args = zoo.build(model, device="meta", dtype=torch.bfloat16, **json.loads(sizes))
    return capture(m, args, name=model)


def records(tag: str) -> list[dict]:
    with open(os.path.join(HERE, f"{tag}-breakdown.jsonl")) as f:
        return [r for r in map(json.loads, f) if "error" not in r]


def law_rows(tags) -> list[dict]:
    """Per breakdown case: its counts (capture), its measured Python and the lease's
    ``eager_module_us``."""
    out = []
    for tag in tags:
        module_us = lease_host(tag).eager_module_us
        for r in records(tag):
            g = _graph(r["model"], json.dumps(r["sizes"], sort_keys=True))
            out.append({"lease": tag, "model": r["model"], "family": zoo.get(r["model"]).family,
                        "module_calls": g.meta["module_calls"],
                        "torch_calls": g.meta["torch_calls"], "python_us": r["python_us"],
                        "module_us": module_us})
    return out


def fit_law(rows: list[dict]) -> tuple[float, float]:
    """(A, B) of ``python_us / module_us = A * module_calls + B * torch_calls``: least
    squares on the relative error (each case weighs the same, whatever its size),
    non-negative (a coefficient the data pushes below 0 is dropped and the other refitted)."""
    y = np.array([r["python_us"] / r["module_us"] for r in rows])
    a = np.array([[r["module_calls"], r["torch_calls"]] for r in rows], dtype=float) / y[:, None]
    x, *_ = np.linalg.lstsq(a, np.ones(len(rows)), rcond=None)
    if x.min() < 0:
        fits = []
        for i in range(2):
            v = np.zeros(2)
            v[i] = a[:, i] @ np.ones(len(rows)) / (a[:, i] @ a[:, i])
            fits.append((float(np.sum((a @ v - 1) ** 2)), v))
        x = min(fits, key=lambda f: f[0])[1]
    return float(x[0]), float(x[1])


def law_us(coef: tuple[float, float], r: dict) -> float:
    return r["module_us"] * (coef[0] * r["module_calls"] + coef[1] * r["torch_calls"])


def held_out(rows: list[dict]) -> list[str]:
    """The law with A and B refitted without the case's family: median / p90 absolute
    error against the measured Python, per lease and overall."""
    fams = {r["family"] for r in rows}
    coefs = {f: fit_law([r for r in rows if r["family"] != f]) for f in fams}
    lines = ["| lease | cases | law (held out by family) vs measured Python |", "|---|---|---|"]
    for tag in sorted({r["lease"] for r in rows}) + ["all"]:
        sel = [r for r in rows if tag in ("all", r["lease"])]
        errs = [ape(law_us(coefs[r["family"]], r), r["python_us"]) for r in sel]
        lines.append(f"| {tag} | {len(sel)} | {_cell(_stats(errs))} |")
    return lines


def rows(tag: str) -> list[dict]:
    spec, host = lease_setup(load_spec(calibrated_name("h100")), os.path.join(HERE, f"{tag}.toml"))
    out = []
    for r in records(tag):
        g = _graph(r["model"], json.dumps(r["sizes"], sort_keys=True))
        p = predict(g, gpu=spec, mode="eager", host=host)
        # the measured Python was timed inside a real forward: no forward factor on it
        with_py = max(p.device_us, p.timeline.host_us - p.timeline.python_us + r["python_us"])
        # the host's speed when the case ran: its eager-add probe against the calibration's
        ratio = r["probe_before"]["eager_op_us"] / host.eager_op_us
        scaled = host.replace(**{k: getattr(host, k) * ratio for k in SCALED if getattr(host, k)})
        ps = predict(g, gpu=spec, mode="eager", host=scaled)
        both = max(ps.device_us, ps.timeline.host_us - ps.timeline.python_us + r["python_us"])
        out.append({"model": r["model"], "family": zoo.get(r["model"]).family, "size": r["size"],
                    "wall": r["wall_us"], "pred": p.end_to_end_us, "pred_with_python": with_py,
                    "pred_probe": ps.end_to_end_us, "pred_probe_python": both,
                    "python": r["python_us"], "est_python": p.timeline.python_us})
    return out


def summary(rs: list[dict]) -> list[str]:
    lines = ["| family | cases | gpusim eager e2e (counted Python) | with the measured Python "
             "| host figures scaled by the case's probe | both | counted Python vs measured |",
             "|---|---|---|---|---|---|---|"]
    for fam in sorted({r["family"] for r in rs}) + ["all"]:
        sel = [r for r in rs if fam in ("all", r["family"])]
        cells = [_cell(_stats([ape(r[key], r["wall"]) for r in sel]))
                 for key in ("pred", "pred_with_python", "pred_probe", "pred_probe_python")]
        cells.append(_cell(_stats([ape(r["est_python"], r["python"]) for r in sel])))
        lines.append(f"| {fam} | {len(sel)} | " + " | ".join(cells) + " |")
    return lines


def all_tags() -> list[str]:
    return sorted(os.path.basename(f)[:-len("-breakdown.jsonl")]
                  for f in glob.glob(os.path.join(HERE, "*-breakdown.jsonl")))


def main(args):
    tags = [a for a in args if not a.startswith("--")] or all_tags()
    if "--fit" in args:
        lr = law_rows(tags)
        a, b = fit_law(lr)
        print(f"python_us / eager_module_us = {a:.4f} * module_calls + {b:.4f} * torch_calls "
              f"(fitted on {len(lr)} cases of {', '.join(tags)})")
        print("\n".join(held_out(lr)))
        return
    for tag in tags:
        print(f"\n{tag} (median / p90 absolute error of eager wall per call)")
        print("\n".join(summary(rows(tag))), flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
