"""What the compiled zoo records imply about the host of a compiled call: a check on
the host law (:func:`gpusim.sim.timeline.compiled_launch_us`), never a fit of it (the
figures come from calibrate's microbenchmarks, ``host_bench.compiled_launch_split``).

Each torch.compile record counts, under the profiler, the extern library calls its
wrapper made (``host.aten_ops_top``: ``aten::addmm``, ``aten::convolution``, attention)
and the Triton launches (``host.launch_calls["cuLaunchKernel"]``, the driver call Triton's
launcher makes; cuBLAS and cuDNN launch through the runtime or ``cuLaunchKernelEx``). On
the records whose wall is mostly host (kernel sum under :data:`HOST_BOUND` of the wall),
wall per call = call + Triton launches x t + extern calls x e, least squares on the
relative error, says what a Triton launch and an extern call cost inside a real model's
wrapper, beside the lease's one mixed figure (``compiled_kernel_us``).

    python3 -m validation.score.compiled_host [--results DIR] [--gpu h200]
"""

from __future__ import annotations

import argparse
import sys

import numpy as np

from validation.records.store import load_zoo_records
from gpusim.hw.host import load_host
from validation.score.zoo_accuracy import lease_host

#: records whose profiled kernel sum is under this fraction of the wall: host-bound enough
#: that the wall is mostly the host's issue time
HOST_BOUND = 0.6


#: the extern calls of a compiled record by the class gpusim prices them at
#: (gpusim.sim.timeline.EXTERN_CLASS_FIELDS): the wrapper's top-level aten ops
CLASS_OPS = {"matmul": ("aten::mm", "aten::addmm", "aten::bmm", "aten::baddbmm"),
             "attention": ("aten::_scaled_dot_product_cudnn_attention",
                           "aten::_scaled_dot_product_flash_attention",
                           "aten::_scaled_dot_product_efficient_attention"),
             "conv": ("aten::convolution",)}


def extern_classes(counts: dict) -> dict:
    """``{class: calls}`` of a record's extern library calls (``host.aten_ops_top_counts``)."""
    return {c: sum(counts.get(op, 0) for op in ops) for c, ops in CLASS_OPS.items()}


def launch_rows(records: list[dict]) -> list[dict]:
    """Per compiled record: wall, kernel sum, extern calls and Triton launches."""
    rows = []
    for r in records:
        h = r.get("host") or {}
        if r["run"] != "compiled" or not r.get("wall_us") or "launch_calls" not in h:
            continue
        rows.append({"case": r["case_id"], "model": r["model"], "wall_us": r["wall_us"],
                     "kernel_sum_us": r["kernel_sum_us"], "extern": h.get("aten_ops_top", 0),
                     "classes": extern_classes(h.get("aten_ops_top_counts") or {}),
                     "triton": h["launch_calls"].get("cuLaunchKernel", 0),
                     "launches": h.get("cuda_launches"), "rec": r})
    return rows


def implied_costs(rows: list[dict]) -> dict | None:
    """``{"call_us", "triton_us", "extern_us", "median_err", "n"}`` on the host-bound
    rows (wall = call + t x Triton + e x extern, relative least squares); None below 4."""
    hb = [r for r in rows if r["kernel_sum_us"] < HOST_BOUND * r["wall_us"]]
    if len(hb) < 4:
        return None
    x = np.array([[1.0, r["triton"], r["extern"]] for r in hb])
    y = np.array([r["wall_us"] for r in hb])
    c, *_ = np.linalg.lstsq(x / y[:, None], np.ones(len(y)), rcond=None)
    err = np.abs(x @ c / y - 1.0) * 100.0
    return {"call_us": float(c[0]), "triton_us": float(c[1]), "extern_us": float(c[2]),
            "median_err": float(np.median(err)), "n": len(hb)}


def implied_class_costs(rows: list[dict]) -> dict | None:
    """As :func:`implied_costs` with the extern calls by class: ``{"call_us", "triton_us",
    "matmul_us", "attention_us", "conv_us", "median_err", "n"}`` (wall = call + t x Triton
    + each class's calls x its cost); None below 6 host-bound rows. A class no host-bound
    record calls is left out of the fit (None)."""
    hb = [r for r in rows if r["kernel_sum_us"] < HOST_BOUND * r["wall_us"]]
    cls = [c for c in CLASS_OPS if any(r["classes"][c] for r in hb)]
    if len(hb) < 6:
        return None
    x = np.array([[1.0, r["triton"]] + [r["classes"][c] for c in cls] for r in hb])
    y = np.array([r["wall_us"] for r in hb])
    c, *_ = np.linalg.lstsq(x / y[:, None], np.ones(len(y)), rcond=None)
    err = np.abs(x @ c / y - 1.0) * 100.0
    out = {"call_us": float(c[0]), "triton_us": float(c[1]), "median_err": float(np.median(err)),
           "n": len(hb)}
    out.update({f"{k}_us": None for k in CLASS_OPS})
    out.update({f"{k}_us": float(v) for k, v in zip(cls, c[2:])})
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--results", default="validation/results")
    ap.add_argument("--gpu", action="append")
    a = ap.parse_args(argv)
    for gpu in a.gpu or ["h100", "h200"]:
        rows = launch_rows(load_zoo_records(a.results, gpu))
        fit = implied_costs(rows)
        if not fit:
            print(f"{gpu}: fewer than 4 host-bound compiled records with launch counts")
            continue
        leases = {lease_host(a.results, gpu, r["rec"]) for r in rows} - {None}
        figs = []
        for p in sorted(leases):
            hp = load_host(p)
            figs.append(f"{hp.name}: call {hp.compiled_call_us:.1f}, per kernel "
                        f"{hp.compiled_kernel_us:.1f}, per input {hp.compiled_input_us or 0:.2f}")
        print(f"{gpu}: records imply call {fit['call_us']:.1f} us, Triton launch "
              f"{fit['triton_us']:.1f} us, extern call {fit['extern_us']:.1f} us "
              f"(median error {fit['median_err']:.1f}%, {fit['n']} host-bound records); "
              f"the leases' microbenchmarks: {'; '.join(figs) or 'none'}")
        byc = implied_class_costs(rows)
        if byc:
            per = ", ".join(f"{k} {byc[f'{k}_us']:.1f}" for k in CLASS_OPS if byc[f"{k}_us"] is not None)
            print(f"{gpu}: by extern class: call {byc['call_us']:.1f} us, Triton {byc['triton_us']:.1f} us, "
                  f"{per} us per call (median error {byc['median_err']:.1f}%)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
