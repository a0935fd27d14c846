"""Fitting the training kernel classes on the training-step records.

``python3 -m validation.fit.fit_train [--gpu h100] [--results validation/results] [--cache DIR]
[--cases GLOB ...] [--classes mta,column_sum,backward,bn]``

Lab code: reads ``<results>/<gpu>/train.jsonl.gz`` (written by ``validation.measure.train_run``:
one row per measured step with the profiler's kernel list per phase), rebuilds each scored
eager step as :mod:`validation.score.train_accuracy` does, and fits each class as a fraction of a
datasheet figure, with leave-one-family-out (cnn, vit, encoder, decoder, encdec) scores:

* ``mta_efficiency``, ``mta_launch_us``: ATen's ``multi_tensor_apply_kernel`` (foreach and
  fused optimizers). gpusim's law per optimizer op: the first launch ``kernel_fixed_us +
  bytes / (eff x bandwidth)``, each further launch (:func:`gpusim.graph.train_ops.mta_launches`)
  ``mta_launch_us``; the pair (on a grid) with the least mean error over the steps. The
  records' optimizer phase holds only these kernels. (A fraction alone, the further launches
  at the common floor, left the transformers 21% over and MobileNet-V3 40% under on the
  H100: its many small tensors take as many launches as ResNet-50's for a fifth the bytes.)

* ``bn_train_efficiency`` / ``_16bit``, ``bn_backward_efficiency`` / ``_16bit``,
  ``bn_native_train_efficiency``, ``bn_native_backward_efficiency``: training batch norm
  (cuDNN's ``bn_fw_tr`` / ``bn_bw`` kernels in fp32 and fp16; ATen's native kernels in
  bf16), compared per step with the profiler's kernels of the class (:func:`kernel_class`).
  Each with its ``*_channel_us``: the kernels run a block per channel in waves over the
  SMs (:func:`gpusim.cost.classes.bn_train_us`), so the pair (on a grid) with the least mean error
  over the steps.

* ``column_sum_efficiency``, ``column_sum_us``: a backward sum over the leading dim
  (:func:`gpusim.lower.dispatch_train.column_sum`: bias and layer-scale gradients), ATen's
  ``reduce_kernel<128, 4, ...sum_functor...>`` in the profiler (the row sums run
  ``reduce_kernel<512, 1>``): per kernel a fixed time and the bytes at the fraction of the
  bandwidth, at least the reduction floor; the pair (on a grid) with the least mean error
  over the steps' backward sums of the class.

* the backward scales (:data:`gpusim.cost.kernel.BACKWARD_SCALES`): a backward kernel's time over
  its forward law's, per class: dense convolutions by precision and geometry (spatial and
  1x1 fitted jointly: :func:`fit_pair`), cuDNN's and ATen's depthwise gradients by
  direction, fp32 backward ``mm``; the median over steps of the class's profiled time (by
  kernel name: :func:`backward_scale_points`) over its forward-law time.

Only CNN steps hold batch norms and convolutions, so those classes are scored leaving one
model out (resnet50, mobilenet_v3_large), or one step where a single model holds them,
instead of one family.

Prints each figure as a spec line (:func:`gpusim.hw.spec_io.figure_line`). The predictor never
imports this module.
"""

from __future__ import annotations

import argparse
import fnmatch
import hashlib
import io
import os
import pickle
import re
import sys

import numpy as np

from gpusim.cost.kernel import BACKWARD_SCALES, backward_scale_field
from gpusim.cost.classes import mta_bytes
from gpusim.graph.opgraph import main_shape
from gpusim.hw.spec import spec_for
from gpusim.hw.spec_io import figure_line
from gpusim.hw.schema import TRAIN_FIGURES
from validation.records.store import read_records
from validation.records.stats import _stats, ape
from validation.score.train_accuracy import RESULTS, amp_supported, usable
from validation.fit.train_classes import _median, grid_fit
from validation.fit.fit_train_bn import BN_FIGURES, bn_channel_field, bn_points, bn_us, fit_bn

FAMILIES = ("cnn", "vit", "encoder", "decoder", "encdec")
DATE = "2026-11-25"


class _Pickler(pickle.Pickler):
    """Pickles a captured graph: its shapes' SymInts as the ints they stand for."""

    def reducer_override(self, obj):
        import torch
        for t, f in ((torch.SymInt, int), (torch.SymFloat, float), (torch.SymBool, bool)):
            if isinstance(obj, t):
                return f, (f(obj),)
        return NotImplemented


def step_graph(rec: dict, cache: str | None = None):
    """Record ``rec``'s step captured as :mod:`validation.score.train_accuracy` does; with
    ``cache``, kept there (a capture takes 10-60 s; pricing it a fraction of a second)."""
    from gpusim.capture.tracing import capture
    from gpusim.predict.step import standard_step
    path = None
    if cache:
        os.makedirs(cache, exist_ok=True)
        path = os.path.join(cache, hashlib.sha1(rec["case_id"].encode()).hexdigest()[:16] + ".pkl")
        if os.path.exists(path):
            with open(path, "rb") as f:
                return pickle.load(f)
    kw = {"amp": rec.get("amp")} if rec.get("amp") else {}
    fn, args = standard_step(rec["model"], "float32", rec["sizes"], rec["optimizer"], **kw)
    g = capture(fn, args)
    if path:
        buf = io.BytesIO()
        _Pickler(buf).dump(g)
        with open(path + ".tmp", "wb") as f:
            f.write(buf.getvalue())
        os.replace(path + ".tmp", path)
    return g


def _channels(a: dict) -> int:
    shape = main_shape(a.get("shape"))
    return int(shape[1]) if len(shape) >= 2 else 1


def predicted_kernels(rec: dict, gpu, cache: str | None = None) -> list[dict]:
    """gpusim's kernels of record ``rec``'s step on ``gpu`` (a name or a spec): phase,
    class, role, impl, dtype, bytes, memory and compute time of each."""
    from gpusim import predict
    p = predict(step_graph(rec, cache), gpu=gpu)
    g = p.graph.g
    return [{"phase": g.nodes[k.ops[0]].get("phase", "forward"), "variant": k.variant,
             "scale_field": backward_scale_field(p.graph, k),
             "mta_bytes": mta_bytes(g.nodes[k.ops[0]]) if k.variant == "mta" else 0.0,
             "role": k.role, "impl": k.impl, "dtype": g.nodes[k.ops[0]]["dtype"],
             "kind": g.nodes[k.ops[0]]["kind"], "bytes": float(e.bytes), "us": float(e.us),
             "mem_us": float(e.mem_us), "comp_us": float(e.compute_us),
             "channels": _channels(g.nodes[k.ops[0]])}
            for k, e in zip(p.lowering.kernels, p.kernels)]


def mta_point(rec: dict, kernels: list[dict]) -> dict | None:
    """One step's optimizer: its family, measured multi-tensor-apply time, and gpusim's
    ops (first launches), extra launches and bytes."""
    meas = sum(k["us"] for k in rec.get("kernels") or []
               if k.get("phase") == "optimizer" and "multi_tensor_apply" in k.get("name", ""))
    opt = [k for k in kernels if k["phase"] == "optimizer"]
    ops = [k for k in opt if k["variant"] == "mta" and k["role"] == "main"]
    if not meas or not ops:
        return None
    extra = sum(1 for k in opt if k["role"] == "aux" and not k["bytes"])
    return {"case_id": rec.get("case_id"), "family": rec.get("family"), "us": meas,
            "ops": len(ops), "extra": extra,
            "bytes": sum(max(k.get("mta_bytes", 0.0), k["bytes"]) for k in ops)}


def mta_us(p: dict, figs, spec) -> float:
    """gpusim's multi-tensor-apply time of point ``p`` at (fraction, further launch us)
    ``figs``."""
    eff, launch = figs
    return (p["ops"] * spec.kernel_fixed_us + p["extra"] * launch
            + p["bytes"] / (eff * spec.bandwidth) * 1e6)


#: the grid the multi-tensor-apply figures are fitted on: fraction of the bandwidth, us per
#: further launch
MTA_EFFS = [round(0.40 + 0.01 * i, 2) for i in range(61)]
MTA_LAUNCH_US = [round(0.5 * i, 1) for i in range(1, 61)]


def fit_mta(points: list[dict], spec) -> tuple | None:
    """The (fraction, further launch us) of the grid with the least mean absolute error
    over the steps: the bytes stream at the fraction, each launch past an op's first costs
    the launch figure (a table of small tensors leaves the GPU under-filled: the CNNs'
    optimizer steps, many small tensors per launch, against the transformers' few large).
    The fraction stays under the GPU's copy fraction (``mem_efficiency``): left free, the
    fit trades a larger launch figure for a fraction above a plain copy's."""
    # no stream beats a copy: the fraction stays under the GPU's copy fraction
    return grid_fit(points, spec, mta_us, [e for e in MTA_EFFS if e < spec.mem_efficiency],
                    MTA_LAUNCH_US)


def leave_family_out(points: list[dict], spec, fit, law, key: str = "family", groups=FAMILIES) -> dict:
    """Per held-out group (a family; ``key="model"``: a model): the figure fitted on the
    other groups and the median / p90 absolute % error of ``law`` on the held-out steps;
    ``all``: in-sample."""
    out = {}
    for fam in tuple(groups) + ("all",):
        train = [p for p in points if fam == "all" or p[key] != fam]
        test = [p for p in points if fam == "all" or p[key] == fam]
        if not test or not train:
            continue
        fig = fit(train, spec)
        if fig is None:
            continue
        out[fam] = {"figure": fig, **_stats([ape(law(p, fig, spec), p["us"]) for p in test])}
    return out


# ------------------------------------------------------------------ backward column sums

#: the profiler's column sums (ATen's outer reduction); row sums run ``reduce_kernel<512, 1>``
COLUMN_SUM = re.compile(r"reduce_kernel<128, 4,.*sum_functor")


def column_sum_point(rec: dict, kernels: list[dict]) -> dict | None:
    """One step's backward column sums: the measured time of the class's kernels and the
    bytes of gpusim's ``column_sum`` kernels."""
    meas = sum(k["us"] for k in rec.get("kernels") or []
               if k.get("phase") == "backward" and COLUMN_SUM.search(k.get("name", "")))
    b = [k["bytes"] for k in kernels if k["variant"] == "column_sum"]
    if not meas or not b:
        return None
    return {"case_id": rec.get("case_id"), "family": rec.get("family"), "us": meas, "kernels": b}


def column_sum_us(p: dict, figs, spec) -> float:
    """gpusim's column-sum time of point ``p`` at (fraction, fixed us) ``figs``
    (:func:`gpusim.cost.kernel.estimate_kernel`, class ``column_sum``)."""
    eff, fixed = figs
    floor = spec.reduction_min_us or spec.kernel_min_us
    return sum(max(floor, fixed + b / (eff * spec.bandwidth) * 1e6) for b in p["kernels"])


COLUMN_SUM_EFFS = [round(0.02 + 0.02 * i, 2) for i in range(50)]
COLUMN_SUM_US = [round(0.5 * i, 1) for i in range(1, 41)]


def fit_column_sum(points: list[dict], spec) -> tuple | None:
    """The (fraction, fixed us) of the grid with the least mean absolute error."""
    return grid_fit(points, spec, column_sum_us, COLUMN_SUM_EFFS, COLUMN_SUM_US)


# ------------------------------------------------------------------ backward scales

#: cuDNN's and ATen's depthwise backward kernels (cuDNN's grouped implicit GEMMs: ``_g<n>_``
#: with n > 1, dense ones are ``_g1_``; with the generic transforms around them, which the
#: fp32 ones run)
DEPTHWISE_CUDNN_KERNELS = re.compile(r"2d_c1_k1|grouped_direct|wgrad2d_shmem_tiling"
                                     r"|[dw]grad.*_g(?:[2-9]|\d\d+)_")
DEPTHWISE_CUDNN = re.compile(DEPTHWISE_CUDNN_KERNELS.pattern + r"|tensorTransformGeneric")
DEPTHWISE_ATEN = re.compile(r"conv_depthwise2d")
#: the library kernels of dense convolutions and matrix products
DENSE = re.compile(r"dgrad|wgrad|gemm|nvjet|Kernel2|splitK|ImplicitGemm|xmma")


def _backward(rec: dict, pattern, exclude=None) -> float:
    return sum(k["us"] for k in rec.get("kernels") or [] if k.get("phase") == "backward"
               and pattern.search(k.get("name", "")) and not (exclude and exclude.search(k.get("name", ""))))


def backward_scale_points(rec: dict, kernels: list[dict]) -> dict:
    """Per backward-scale figure (:data:`gpusim.cost.kernel.BACKWARD_SCALES`): the step's measured
    time of the class's kernels (by name) and gpusim's at the forward law. A class is
    measured only where the step's profiler names and gpusim's dispatch agree on the
    library: cuDNN's depthwise figures on steps where ATen's depthwise kernels take under a
    tenth of the depthwise time, and the reverse; dense convolutions' pair of figures
    (spatial, 1x1; key :data:`DENSE_PAIRS`: one measured total, since the 1x1 gradients run
    as GEMMs whose names say neither direction nor geometry) where the step's other backward
    GEMMs (linear layers, at the forward law, and the stem's gradient) are under a tenth of
    the dense kernels; fp32 backward GEMMs on fp32 steps without convolutions."""
    pred = {}
    for k in kernels:
        if k.get("scale_field"):
            pred[k["scale_field"]] = pred.get(k["scale_field"], 0.0) + k["us"]
    if not pred:
        return {}
    base = {"case_id": rec.get("case_id"), "family": rec.get("family"), "model": rec.get("model")}
    aten, cudnn = _backward(rec, DEPTHWISE_ATEN), _backward(rec, DEPTHWISE_CUDNN_KERNELS)
    dw = re.compile(DEPTHWISE_ATEN.pattern + "|" + DEPTHWISE_CUDNN.pattern)
    meas = {}
    if cudnn and aten < 0.1 * (aten + cudnn):
        dgrad = _backward(rec, re.compile(r"dgrad")) - _backward(rec, re.compile(r"dgrad"), DEPTHWISE_CUDNN)
        meas["depthwise_dgrad_scale"] = dgrad
        meas["depthwise_wgrad_scale"] = meas["depthwise_wgrad_scale_16bit"] = (
            _backward(rec, DEPTHWISE_CUDNN) - dgrad)
    if aten and cudnn < 0.1 * (aten + cudnn):
        meas["depthwise_aten_dgrad_scale"] = _backward(rec, re.compile(r"conv_depthwise2d_backward"))
        meas["depthwise_aten_wgrad_scale"] = _backward(rec, re.compile(r"conv_depthwise2d_grad_weight"))
    others = sum(k["us"] for k in kernels if k["phase"] == "backward"
                 and (k["kind"] == "matmul" or k["variant"] == "conv_stem"))
    dense = _backward(rec, DENSE, dw)
    convs = any(k["kind"] == "conv" for k in kernels if k["phase"] == "backward")
    if not convs and not rec.get("amp"):
        meas["gemm_backward_scale"] = _backward(rec, DENSE, re.compile(r"dgrad|wgrad"))
    out = {f: dict(base, us=meas[f], pred=pred[f]) for f in pred if meas.get(f, 0) > 0
           and f not in DENSE_FIGURES}
    for pair in DENSE_PAIRS:
        # dense convolutions: one measured total, the spatial and 1x1 figures fitted jointly
        parts = [pred.get(f, 0.0) for f in pair]
        if any(parts) and dense - others > 0 and others < 0.1 * dense:
            out[pair] = dict(base, us=dense - others, parts=parts)
    return out


#: the dense convolutions' (spatial, 1x1) figures, fp32 and 16-bit
DENSE_PAIRS = (("conv_backward_scale", "conv_backward_scale_1x1"),
               ("conv_backward_scale_16bit", "conv_backward_scale_1x1_16bit"))
DENSE_FIGURES = {f for pair in DENSE_PAIRS for f in pair}


def pair_us(p: dict, figs, spec) -> float:
    """gpusim's dense-convolution backward time of point ``p`` at (spatial, 1x1) scales."""
    return sum(x * f for x, f in zip(p["parts"], figs))


def fit_pair(points: list[dict], spec) -> tuple | None:
    """The (spatial, 1x1) scales with the least squared relative error over the steps
    (each step: measured = spatial x its spatial gradients' forward-law time + 1x1 x its
    1x1 ones'); a geometry no step holds keeps the other's figure."""
    if not points:
        return None
    a = np.array([[x / p["us"] for x in p["parts"]] for p in points])
    cols = [j for j in range(a.shape[1]) if a[:, j].any()]
    sol = np.linalg.lstsq(a[:, cols], np.ones(len(points)), rcond=None)[0]
    figs = dict(zip(cols, (round(float(x), 3) for x in sol)))
    if not figs or min(figs.values()) <= 0:
        return None
    return tuple(figs.get(j, figs[cols[0]]) for j in range(a.shape[1]))


def scale_us(p: dict, fig, spec) -> float:
    """gpusim's class time of point ``p`` at scale ``fig``."""
    return p["pred"] * fig


def fit_scale(points: list[dict], spec) -> float | None:
    """The median over steps of measured over forward-law time."""
    m = _median([p["us"] / p["pred"] for p in points if p["pred"]])
    return None if m is None else round(m, 3)


# ------------------------------------------------------------------ training batch norm


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--results", default=RESULTS)
    ap.add_argument("--gpu", default="h100")
    ap.add_argument("--cache", default=None, help="keep the captured steps here (pickles)")
    ap.add_argument("--cases", action="append", default=None, help="case_id glob (repeatable)")
    ap.add_argument("--classes", default="mta,column_sum,backward,bn",
                    help="which classes to fit (comma-separated: mta, column_sum, backward, bn)")
    a = ap.parse_args(argv)
    classes = set(a.classes.split(","))
    if classes - {"mta", "column_sum", "backward", "bn"}:
        print(f"fit_train: unknown class in --classes {a.classes!r} (mta, column_sum, backward, bn)",
              file=sys.stderr)
        return 2
    # the training classes at their neutral laws: the fits see the forward conv law
    spec = spec_for(a.gpu).replace(**{k: None for k in TRAIN_FIGURES})
    amp = amp_supported()
    path = os.path.join(a.results, a.gpu, "train.jsonl.gz")
    mta, bn, cols, scales, gpu_name = [], {}, [], {}, None
    for rec in read_records(path):
        if usable(rec, amp) is not None or a.cases and not any(
                fnmatch.fnmatch(rec.get("case_id", ""), c) for c in a.cases):
            continue
        ks = predicted_kernels(rec, spec, a.cache)
        p = mta_point(rec, ks)
        if p:
            mta.append(p)
        q = column_sum_point(rec, ks)
        if q:
            cols.append(q)
        for fig, q in backward_scale_points(rec, ks).items():
            scales.setdefault(fig, []).append(q)
        for fig, q in bn_points(rec, ks).items():
            bn.setdefault(fig, []).append(q)
        gpu_name = gpu_name or (rec.get("env") or {}).get("gpu_name")
        print(rec["case_id"], file=sys.stderr, flush=True)
    ref = (f"{gpu_name}, {DATE}, validation/fit/fit_train.py on "
           f"validation/results/{a.gpu}/train.jsonl.gz")
    lines = []
    lofo = leave_family_out(mta, spec, fit_mta, mta_us) if "mta" in classes else {}
    for fam, s in lofo.items():
        print(f"# mta_efficiency, mta_launch_us held out {fam:<8} figures {s['figure']}  median "
              f"{s['median']:5.1f}%  p90 {s['p90']:5.1f}%  (n={s['n']})")
    if "all" in lofo:
        eff, launch = lofo["all"]["figure"]
        lines.append(figure_line("mta_efficiency", eff, "measured", ref))
        lines.append(figure_line("mta_launch_us", launch, "measured", ref))
    lofo = leave_family_out(cols, spec, fit_column_sum, column_sum_us) if "column_sum" in classes else {}
    for fam, s in lofo.items():
        print(f"# column_sum_efficiency, column_sum_us held out {fam:<8} figures {s['figure']}  median "
              f"{s['median']:5.1f}%  p90 {s['p90']:5.1f}%  (n={s['n']})")
    if "all" in lofo:
        eff, fixed = lofo["all"]["figure"]
        lines.append(figure_line("column_sum_efficiency", eff, "measured", ref))
        lines.append(figure_line("column_sum_us", fixed, "measured", ref))
    for pair in DENSE_PAIRS:
        if pair not in scales or "backward" not in classes:
            continue
        # two models (ResNet-50: 1x1 and 3x3; MobileNet-V3: 1x1 only): held out by step
        lo = leave_family_out(scales[pair], spec, fit_pair, pair_us, key="case_id",
                              groups=sorted({p["case_id"] for p in scales[pair]}))
        errs = sorted(s["median"] for g, s in lo.items() if g != "all")
        if errs:
            print(f"# {pair} held out by step: median {errs[len(errs) // 2]:5.1f}%  max {errs[-1]:5.1f}%"
                  f"  (n={len(errs)}); in sample {lo['all']['median']:5.1f}% / {lo['all']['p90']:5.1f}%")
        for f, v in zip(pair, lo["all"]["figure"]):
            lines.append(figure_line(f, v, "measured", ref))
    for fig in sorted(set(BACKWARD_SCALES.values()) - DENSE_FIGURES):
        if fig not in scales or "backward" not in classes:
            continue
        # a class seen in one family (CNNs: convolutions) is held out by model, in one
        # model by step
        key = next((k for k in ("family", "model") if len({p[k] for p in scales[fig]}) > 1), "case_id")
        groups = sorted({p[key] for p in scales[fig]})
        lo = leave_family_out(scales[fig], spec, fit_scale, scale_us, key=key, groups=groups)
        for g, s in lo.items():
            print(f"# {fig} held out {g:<28} figure {s['figure']}  median {s['median']:5.1f}%"
                  f"  p90 {s['p90']:5.1f}%  (n={s['n']})")
        lines.append(figure_line(fig, lo["all"]["figure"], "measured", ref))
    models = sorted({p["model"] for pts in bn.values() for p in pts})
    for fig in sorted(set(BN_FIGURES.values())):
        if fig not in bn or "bn" not in classes:
            continue
        lomo = leave_family_out(bn[fig], spec, fit_bn, bn_us, key="model", groups=models)
        for m, s in lomo.items():
            print(f"# {fig} held out {m:<28} figures {s['figure']}  median {s['median']:5.1f}%"
                  f"  p90 {s['p90']:5.1f}%  (n={s['n']})")
        eff, ch = lomo["all"]["figure"]
        lines.append(figure_line(fig, eff, "measured", ref))
        lines.append(figure_line(bn_channel_field(fig), ch, "measured", ref))
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
