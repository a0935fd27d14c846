"""Training batch norm's figures (cuDNN's bn_fw_tr / bn_bw, ATen's native kernels for bf16): efficiency and per-channel time per phase and dtype, grid-fitted on the training records (:func:`fit_bn`)."""

from __future__ import annotations
from gpusim.cost.classes import bn_train_us
from validation.fit.train_classes import grid_fit, kernel_class


#: the batch-norm figure of a kernel: (class, cuDNN?, 16-bit?) -> spec field
BN_FIGURES = {("bn_train", True, False): "bn_train_efficiency",
              ("bn_train", True, True): "bn_train_efficiency_16bit",
              ("bn_backward", True, False): "bn_backward_efficiency",
              ("bn_backward", True, True): "bn_backward_efficiency_16bit",
              ("bn_train", False, False): "bn_native_train_efficiency",
              ("bn_train", False, True): "bn_native_train_efficiency",
              ("bn_backward", False, False): "bn_native_backward_efficiency",
              ("bn_backward", False, True): "bn_native_backward_efficiency"}


BN_PHASE = {"bn_train": "forward", "bn_backward": "backward"}


def bn_figure(k: dict) -> str | None:
    """The spec field that prices gpusim kernel ``k`` (None: not a training batch norm)."""
    if k["variant"] not in BN_PHASE:
        return None
    return BN_FIGURES[(k["variant"], k["impl"] == "library", k["dtype"] in ("float16", "bfloat16"))]


def bn_points(rec: dict, kernels: list[dict]) -> dict:
    """Per batch-norm figure: the step's measured time of the class's kernels and gpusim's
    kernels of it (bytes, main or aux)."""
    out = {}
    for k in kernels:
        fig = bn_figure(k)
        if fig:
            out.setdefault(fig, []).append(k)
    pts = {}
    for fig, ks in out.items():
        cls = ks[0]["variant"]
        meas = sum(m["us"] for m in rec.get("kernels") or []
                   if m.get("phase") == BN_PHASE[cls] and kernel_class(m.get("name", "")) == cls)
        if meas:
            pts[fig] = {"case_id": rec.get("case_id"), "family": rec.get("family"),
                        "model": rec.get("model"), "us": meas,
                        "kernels": [(k["bytes"], k["channels"], k["role"] == "main") for k in ks]}
    return pts


def bn_channel_field(fig: str) -> str:
    """The per-channel figure beside efficiency ``fig`` (``bn_train_efficiency_16bit`` ->
    ``bn_train_channel_us_16bit``)."""
    return fig.replace("_efficiency", "_channel_us")


def bn_us(p: dict, figs: tuple, spec) -> float:
    """gpusim's time of point ``p``'s batch-norm kernels at (fraction, per-channel us)
    ``figs`` (:func:`gpusim.cost.classes.bn_train_us`; fixed cost, at least the reduction floor for
    the main kernel, the launch floor for the native path's aux kernels)."""
    eff, ch = figs
    t = 0.0
    for b, c, main in p["kernels"]:
        floor = (spec.reduction_min_us or spec.kernel_min_us) if main else spec.kernel_min_us
        t += max(floor, spec.kernel_fixed_us + bn_train_us(b, c, eff, ch, spec)) if b else spec.kernel_min_us
    return t


#: the grid the batch-norm figures are fitted on: fraction of the bandwidth, us per channel wave
BN_EFFS = [round(0.02 + 0.01 * i, 2) for i in range(99)]


BN_CHANNEL_US = [round(0.05 * i, 2) for i in range(61)]


def fit_bn(points: list[dict], spec) -> tuple | None:
    """The (fraction, per-channel us) of the grid with the least mean absolute error over
    the steps."""
    return grid_fit(points, spec, bn_us, BN_EFFS, BN_CHANNEL_US)
