"""Write the kernel-class figures a datasheet spec gets by the unit-fraction rule
(:data:`gpusim.arch.UNIT_FRACTION_RULE`) into its TOML file, as ``derived`` figures whose
ref names the rule, its inputs and its uncertainty.

Which classes transfer, and why: a class whose figure is a fraction of DRAM bandwidth
(cuDNN's layout transforms, eval batch norm, ATen's strided/reduction/norm kernels, skinny
GEMMs' weight stream, fp32 gemv) or of the fp32 CUDA-core peak (ATen's and cuDNN's
depthwise kernels, fp32 memory-efficient attention) runs on the memory system or the CUDA
cores, whose design these kernels share across generations. Classes tied to the
tensor-core generation (a cuDNN conv against a cuBLAS GEMM: wgmma on Hopper; misaligned
GEMMs; 16-bit attention; the stem conv) and absolute times (floors, fixed costs per kernel
or per row) do not: they stay at the neutral law on every generation without a calibration.

The value is the mean over the calibrated GPUs (today two Hoppers: H100, H200); the
uncertainty is stated as their spread plus the untested assumption that the fraction
carries across generations (no GPU of another generation has been measured here).
Nothing is fitted on published whole-model results.

    python3 -m validation.derive_specs [--check]
"""

from __future__ import annotations

import argparse
import re
import statistics
import sys

from gpusim.arch import UNIT_FRACTION_RULE
from gpusim.hardware import builtin_dir, canonical_names, load_spec

BANDWIDTH = ("layout_transform_efficiency", "bn_eval_efficiency", "bn_eval_efficiency_16bit",
             "aten_strided_efficiency", "aten_strided_efficiency_16bit",
             "aten_reduction_efficiency", "aten_norm_efficiency", "aten_norm_efficiency_16bit",
             "gemm_mem_efficiency", "gemv_fp32_efficiency")
CUDA_CORE = ("depthwise_aten_efficiency", "depthwise_efficiency", "depthwise_efficiency_16bit",
             "attention_fp32_efficiency")
FIELDS = BANDWIDTH + CUDA_CORE


def calibrated() -> list:
    return [load_spec(n) for n in canonical_names() if load_spec(n).source == "measured"]


def targets() -> list:
    """Datasheet specs of a generation no calibrated GPU belongs to."""
    cal_cc = {s.compute_capability for s in calibrated()}
    return [s for s in (load_spec(n) for n in canonical_names())
            if s.source == "datasheet" and s.compute_capability not in cal_cc]


def derived_lines(cals) -> dict[str, str]:
    """``{field: TOML line}`` of the rule's figures from the calibrated specs ``cals``."""
    out = {}
    for f in FIELDS:
        vals = [(s.name, getattr(s, f)) for s in cals if getattr(s, f) is not None]
        if not vals:
            continue
        v = round(statistics.fmean(x for _, x in vals), 4)
        unit = "DRAM bandwidth" if f in BANDWIDTH else "the fp32 CUDA-core peak"
        spread = (max(x for _, x in vals) - min(x for _, x in vals)) / 2
        inputs = ", ".join(f"{n} = {x:.4g}" for n, x in vals)
        ref = (f"{UNIT_FRACTION_RULE} (gpusim.arch.UNIT_FRACTION_RULE): a fraction of {unit} "
               f"carries across generations; mean of the calibrated GPUs ({inputs}; "
               f"validation/derive_specs.py); uncertainty +-{spread:.2g} between them and "
               f"untested across generations (no GPU of this generation measured here)")
        out[f] = f'{f} = {{ value = {v}, source = "derived", ref = "{ref}" }}'
    return out


def rewrite(path, lines: dict[str, str]) -> str:
    """The TOML text of ``path`` with the rule's lines in its [model] section (replacing
    earlier ones)."""
    text = open(path).read()
    for f in lines:
        text = re.sub(rf"^{f} = .*\n", "", text, flags=re.M)
    m = re.search(r"^\[model\]\n(?:(?!^\[).*\n)*", text, flags=re.M)
    block = m.group(0).rstrip("\n") + "\n" + "\n".join(lines.values()) + "\n"
    after = text[m.end():]
    return text[:m.start()] + block + ("\n" + after.lstrip("\n") if after.strip() else "")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python3 -m validation.derive_specs")
    ap.add_argument("--check", action="store_true", help="exit 1 if a spec file is stale")
    a = ap.parse_args(argv)
    lines = derived_lines(calibrated())
    stale = []
    for s in targets():
        path = builtin_dir() / f"{s.name}.toml"
        new = rewrite(path, lines)
        if new != open(path).read():
            stale.append(s.name)
            if not a.check:
                open(path, "w").write(new)
    verb = "stale" if a.check else "rewrote"
    print(f"{verb}: {', '.join(stale) or 'none'}", file=sys.stderr)
    return 1 if a.check and stale else 0


if __name__ == "__main__":
    sys.exit(main())
