"""The training records' kernels by class (multi-tensor apply, column sums, batch norm, backward GEMMs and convolutions), and the grid search every training fit uses."""

from __future__ import annotations
import re
from validation.score.train_accuracy import LAYOUT


def _median(xs):
    xs = sorted(xs)
    return xs[len(xs) // 2] if xs else None


#: the profiler's kernel names by class (the first pattern that matches): training batch
#: norm (cuDNN's and ATen's native kernels), depthwise convolutions (ATen's, cuDNN's
#: ``*2d_c1_k1*`` and grouped direct kernels), cuDNN's backward-data and backward-filter,
#: cuDNN's layout transforms (:data:`validation.score.train_accuracy.LAYOUT`), GEMMs
KERNEL_CLASSES = (
    ("bn_backward", re.compile(r"bn_bw|batch_norm_backward")),
    ("bn_train", re.compile(r"bn_fw_tr|batch_norm_collect_statistics|batch_norm_transform_input"
                            r"|elementwise_kernel_for_multi_outputs")),
    ("depthwise", re.compile(r"conv_depthwise2d|depthwise|2d_c1_k1|grouped_direct")),
    ("conv_dgrad", re.compile(r"dgrad")),
    ("conv_wgrad", re.compile(r"wgrad|Wgrad")),
    ("layout", LAYOUT),
    ("gemm", re.compile(r"gemm|Kernel2|nvjet|splitKreduce|cutlass|xmma")),
)


def kernel_class(name: str) -> str:
    """The class of a profiled kernel by its name (:data:`KERNEL_CLASSES`; else ``other``)."""
    for cls, pat in KERNEL_CLASSES:
        if pat.search(name):
            return cls
    return "other"


def grid_fit(points: list[dict], spec, law, xs, ys) -> tuple | None:
    """The pair ``(x, y)`` of the grid ``xs`` x ``ys`` whose ``law(point, (x, y), spec)`` has
    the least mean absolute relative error against the points' ``us`` (the first such pair
    in grid order); None without points."""
    if not points:
        return None
    best = None
    for x in xs:
        for y in ys:
            e = sum(abs(law(p, (x, y), spec) - p["us"]) / p["us"] for p in points)
            if best is None or e < best[0] - 1e-12:
                best = (e, x, y)
    return best[1], best[2]
