"""Architecture table: what a GPU generation can do, as data (``hwspecs/arch/*.toml``).

Library defaults and kernel families change by generation, not by product: cuDNN runs fp32
convolutions on TF32 tensor cores from Ampere (PyTorch's ``cudnn.allow_tf32`` is on by
default), flash attention needs sm80, bf16 attention has no fused kernel before sm80,
cuDNN's attention comes first on Hopper. Dispatch rules read these facts through a spec's
``compute_capability`` instead of comparing capability numbers in code, so a new GPU is
a row in a table. Every fact carries its source like a spec figure does
(``{ value, source, ref }``, :data:`gpusim.hw.schema.SOURCES`).
"""

from __future__ import annotations

import functools
import tomllib
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType
from typing import Any, Mapping

from gpusim.hw.schema import SOURCES, SpecError, builtin_dir

#: the facts every generation's row gives
FACTS = ("name", "tensor_core_dtypes", "cudnn_conv_tf32", "matmul_tf32", "mma_family",
         "max_smem_per_sm_kib", "max_smem_per_block_kib", "registers_per_sm",
         "max_registers_per_thread", "attention_backends", "cp_async", "tma",
         "cublas_workspace_kib", "max_threads_per_sm")
#: The rule a datasheet spec's kernel-class figures are derived by (source ``derived``):
#: GPUs of one architecture row run the same cuDNN, cuBLAS and ATen kernels, so a class
#: figure (a fraction of the datasheet peaks, or a floor) is taken from a calibrated GPU of
#: the same row, never the GPU's own calibration (then it would be measured) and never a
#: GPU of another row. Evidence, leave one GPU out: the zoo's eager device time predicted
#: for the H100 from the H200's calibration is off by 7.7% median, the H200 from the
#: H100's by 10.1% (tests/test_zoo_accuracy.py, the "unseen" rows). Rows with one
#: calibrated GPU or none get no derived classes: they run at the neutral law.
SAME_ARCH_RULE = "same-architecture rule"
#: Memory-bound library kernel classes (layout transforms, eval batch norm, ATen's
#: strided/reduction/norm kernels, skinny GEMMs, fp32 gemv) on any GPU without its own
#: calibration: the DRAM stream and what the SMs keep in flight, combined as
#: ``A^-p = (mem_efficiency x bandwidth)^-p + (SMs x clock x k)^-p``, ``k`` per class from
#: the calibrated GPUs (``validation/fit/derive_specs.py``, which also gives its
#: leave-one-GPU-out error against copying a fraction). The exponent ``p``
#: (``rule_constant("bandwidth_sm", "exponent")``) is measured: 12 classes timed on 8 to
#: 132 SMs of one GPU (CUDA green contexts, ``validation/measure/sm_scaling.py``) bend from the SMs'
#: limit to the stream's more sharply than two limits in series (``p = 1``) do.
BANDWIDTH_LATENCY_RULE = "bandwidth-latency rule"
#: Large tensor-core GEMMs on a GPU without its own calibration: a kernel reaches ``e0`` of
#: the peak of the SMs it runs on when the GPU's whole tensor rate ``R`` is small, and less
#: as ``R`` grows, ``1/e = 1/e0 + R/C`` (``rule_constant("tensor_load", ...)``). Measured on
#: 8 to 132 SMs of an H100 and an H200 (green contexts): 0.95 on 8 SMs, 0.77 on 132, alike on
#: both (so not DRAM, of which the H200 has 1.43x). Assumption, stated: what caps the whole
#: chip (power, L2) scales with the tensor rate as it does on Hopper; GPUs of low tensor rate
#: (V100, T4, GA102) sit near ``e0`` whatever ``C`` is.
TENSOR_LOAD_RULE = "tensor-load rule"
#: CUDA-core kernel classes bound by what each SM issues, not by DRAM or by the fp32 lanes
#: (ATen's NCHW fp32 depthwise kernel, ``conv_depthwise2d_forward_kernel``; cuDNN's dense
#: fp32 convolutions without TF32, sm80-built implicit-GEMM and FFT kernels): the class
#: reaches ``k`` FLOPs per SM-cycle, so its fraction of a GPU's fp32 peak is
#: ``min(1, k x SMs x clock / fp32 peak)``, ``k`` the mean over the calibrated GPUs other
#: than the target (``validation/fit/derive_specs.py``). Evidence: the H200 has 1.43x the
#: H100's bandwidth and the same SMs and clock, and the two measured the same fractions
#: (depthwise 0.0272 / 0.0273, fp32 convolutions 0.4777 / 0.4771); the convolutions reach
#: 122 FLOPs per SM-cycle, 0.48 of Hopper's 128 fp32 lanes per SM and 0.95 of the 64 that
#: the sm80 kernels were built for. A fraction of the fp32 peak would carry Hopper's 128
#: lanes to GPUs with 64 (V100, T4, A100), which these kernels do not use.
SM_CYCLE_RULE = "SM-cycle rule"
#: SDPA backends, in PyTorch's names (sdp_utils.cpp); ``math`` is the unfused fallback
BACKENDS = ("cudnn", "flash", "efficient", "math")


@dataclass(frozen=True)
class Arch:
    """One generation's row: ``sm`` (``"sm_86"``), its facts and their provenance."""
    sm: str
    facts: Mapping[str, Any]
    provenance: Mapping[str, tuple[str, str]]

    def __getattr__(self, key):
        try:
            return self.facts[key]
        except KeyError:
            raise AttributeError(key) from None


def arch_dir() -> Path:
    return builtin_dir() / "arch"


def _row(path: Path, sm: str, row) -> Arch:
    if not isinstance(row, dict):
        raise SpecError(f"{path}: [{sm}] must be a table of facts")
    facts, prov = {}, {}
    for k in FACTS:
        f = row.get(k)
        if not isinstance(f, dict) or set(f) != {"value", "source", "ref"}:
            raise SpecError(f"{path}: [{sm}].{k} must be {{ value = ..., source = ..., ref = ... }}")
        if f["source"] not in SOURCES or not isinstance(f["ref"], str) or not f["ref"].strip():
            raise SpecError(f"{path}: [{sm}].{k}: source must be one of {', '.join(SOURCES)} "
                            "and ref a non-empty string")
        facts[k], prov[k] = f["value"], (f["source"], f["ref"])
    for dtype, order in facts["attention_backends"].items():
        if not order or order[-1] != "math" or set(order) - set(BACKENDS):
            raise SpecError(f"{path}: [{sm}].attention_backends.{dtype} must list backends of "
                            f"{', '.join(BACKENDS)} ending with math, got {order!r}")
    return Arch(sm, MappingProxyType(facts), MappingProxyType(prov))


@functools.lru_cache(maxsize=None)
def table() -> Mapping[str, Arch]:
    """Every generation, ``{"sm_70": Arch, ...}``, from the files under ``hwspecs/arch``."""
    out = {}
    for path in sorted(arch_dir().glob("*.toml")):
        if path.name == RULES_FILE:
            continue
        with open(path, "rb") as f:
            data = tomllib.load(f)
        for sm, row in data.items():
            out[sm] = _row(path, sm, row)
    return MappingProxyType(out)


RULES_FILE = "rules.toml"


@functools.lru_cache(maxsize=None)
def _rules() -> Mapping[str, Any]:
    path = arch_dir() / RULES_FILE
    with open(path, "rb") as f:
        return tomllib.load(f)


def _rule(section: str, key: str) -> Mapping[str, Any]:
    """One figure of ``hwspecs/arch/rules.toml``: ``{ value, source, ref }``."""
    try:
        return _rules()[section][key]
    except KeyError:
        raise SpecError(f"{arch_dir() / RULES_FILE}: no [{section}].{key}") from None


def rule_constant(section: str, key: str) -> float:
    """A cross-generation rule's fitted constant (``hwspecs/arch/rules.toml``, written with
    its provenance by ``validation/fit/fit_sm_scaling.py``)."""
    return float(_rule(section, key)["value"])


def rule_provenance(section: str, key: str) -> tuple[str, str]:
    fig = _rule(section, key)
    return fig["source"], fig["ref"]


#: the memory-bound kernel classes the bandwidth-latency rule carries between GPUs
#: (:data:`BANDWIDTH_LATENCY_RULE`): fractions of the datasheet bandwidth
BANDWIDTH_FIELDS = ("layout_transform_efficiency", "bn_eval_efficiency", "bn_eval_efficiency_16bit",
                    "aten_strided_efficiency", "aten_strided_efficiency_16bit",
                    "aten_reduction_efficiency", "aten_norm_efficiency", "aten_norm_efficiency_16bit",
                    "gemm_mem_efficiency", "gemv_fp32_efficiency",
                    # ATen's elementwise paths of the broad sample (validation/fit/fit_broad.py)
                    "aten_cast_efficiency", "aten_strided_cast_efficiency",
                    "aten_permuted_efficiency", "aten_permuted_efficiency_16bit")


def sm_ghz(spec) -> float:
    """SMs x clock, in SM-GHz: how many SM-cycles per ns the GPU has."""
    return spec.sm_count * spec.boost_clock_mhz / 1e3


def bandwidth_k(spec, field: str) -> float | None:
    """Bytes per SM-cycle a memory-bound class keeps in flight on ``spec``, solved from
    its fraction there by :data:`BANDWIDTH_LATENCY_RULE` (None: the class reaches the DRAM
    stream itself)."""
    p = rule_constant("bandwidth_sm", "exponent")
    a = getattr(spec, field) * spec.bandwidth_gbs
    gap = a ** -p - (spec.mem_efficiency * spec.bandwidth_gbs) ** -p
    return None if gap <= 0 else gap ** (-1.0 / p) / sm_ghz(spec)


def bandwidth_fraction(spec, k: float | None) -> float:
    """The class's fraction of ``spec``'s datasheet bandwidth for a class constant ``k``:
    ``A^-p = (mem_efficiency x bandwidth)^-p + (SMs x clock x k)^-p``."""
    stream = spec.mem_efficiency * spec.bandwidth_gbs
    if k is None:
        return spec.mem_efficiency
    p = rule_constant("bandwidth_sm", "exponent")
    return (stream ** -p + (sm_ghz(spec) * k) ** -p) ** (-1.0 / p) / spec.bandwidth_gbs


def carried_fractions(source, target) -> dict:
    """``{field: fraction}`` of ``source``'s memory-bound classes (:data:`BANDWIDTH_FIELDS`)
    on ``target``, by :data:`BANDWIDTH_LATENCY_RULE` with ``source``'s constants: what a
    calibration says about a GPU it did not measure (``target`` has the source's stream
    efficiency and the target's bandwidth, SMs and clock)."""
    return {f: bandwidth_fraction(target, bandwidth_k(source, f))
            for f in BANDWIDTH_FIELDS if getattr(source, f, None)}


def sm_name(compute_capability: float) -> str:
    """``8.6`` -> ``"sm_86"``."""
    return f"sm_{round(compute_capability * 10)}"


def arch_of(spec) -> Arch | None:
    """The row of ``spec``'s generation, or None when the spec gives no compute
    capability or the table has no row for it (callers then use their fallback law)."""
    cc = getattr(spec, "compute_capability", None)
    return None if cc is None else table().get(sm_name(cc))


def cudnn_conv_tf32(spec) -> bool:
    """Whether cuDNN runs fp32 convolutions on TF32 tensor cores under PyTorch's
    defaults. Without a row: whether the spec has a TF32 tensor-core peak (TF32 hardware
    and cuDNN's default arrived together, with Ampere)."""
    a = arch_of(spec)
    if a is None:
        return "tf32_tc" in spec.peak_tflops
    return bool(a.cudnn_conv_tf32) and "tf32" in a.tensor_core_dtypes


def attention_backend(spec, dtype: str) -> str:
    """The SDPA backend PyTorch picks first for ``dtype`` inputs on ``spec``'s GPU (when
    the inputs suit it: :func:`gpusim.capture.sdpa.fused_backend_possible`). Without a row or a
    spec: the calibrated Hopper GPUs' order (cuDNN for 16-bit, memory-efficient for fp32)."""
    a = arch_of(spec) if spec is not None else None
    if a is None:
        a = table()["sm_90"]
    order = a.attention_backends.get(dtype)
    return order[0] if order else "math"


__all__ = ["Arch", "SAME_ARCH_RULE", "BANDWIDTH_LATENCY_RULE", "SM_CYCLE_RULE",
           "TENSOR_LOAD_RULE", "rule_constant", "rule_provenance", "arch_of", "attention_backend", "cudnn_conv_tf32", "table"]
