"""Write the kernel-class figures a datasheet spec gets by the bandwidth-latency rule
(:data:`gpusim.hw.arch.BANDWIDTH_LATENCY_RULE`) into its TOML file, as ``derived`` figures
whose ref names the rule, its inputs and its leave-one-GPU-out error.

The rule: a memory-bound library kernel class (cuDNN's layout transforms, eval batch
norm, ATen's strided/reduction/norm kernels, skinny GEMMs' weight stream, fp32 gemv)
reaches a bandwidth set by two limits, the DRAM stream (``mem_efficiency`` x peak
bandwidth) and what the SMs keep in flight (SMs x clock x ``k`` bytes per SM-cycle, ``k`` a
property of the class's kernel): ``A^-p = (e B)^-p + (S f k)^-p``, the exponent ``p``
from ``hwspecs/arch/rules.toml`` (``validation/fit/fit_sm_scaling.py``: the green-context
sweeps fit 2.25; the series law ``p = 1`` is what it uses, and its ref says why). ``k`` is solved from each calibrated GPU's measured
fraction; a GPU gets the mean ``k`` of the calibrated GPUs other than itself. It is why
the H200 (43% more bandwidth than the H100, the same SMs and clock) measured lower
fractions of its bandwidth for every such class (:func:`leave_one_out` gives the error
leave one GPU out against copying the other GPU's fraction).

Large GEMMs on a GPU of a generation without a calibrated GPU: where a published
microbenchmark of that product's ``torch.matmul`` exists (``validation/components/
torch_matmul.csv``, a component-level measurement by others, not a whole-model result),
``matmul_tc_efficiency`` is its median fp16 rate over the datasheet fp16 tensor peak and
``matmul_efficiency`` (the fp32 CUDA-core GEMMs) its fp32 rate over the fp32 peak, source
``measured`` with the table named; elsewhere the tensor-load rule
(:data:`gpusim.hw.arch.TENSOR_LOAD_RULE`) at the spec's fp16 tensor peak
(:func:`tensor_load_check` gives the rule's error on the published GPUs). Classes tied to the tensor cores or to absolute times, cuDNN's
fp32 attention are not derived across generations: they stay at the neutral law there.
ATen's NCHW fp32 depthwise kernel and cuDNN's depthwise kernels' multiply-add rate (their
fixed and per-tap times are absolute, not derived), bound by the SMs and not by DRAM, get
their FLOPs per SM-cycle (:data:`gpusim.hw.arch.SM_CYCLE_RULE`, ``SM_FIELDS``). Nothing
is fitted on published whole-model results.

    python3 -m validation.fit.derive_specs [--check]
"""

from __future__ import annotations

import argparse
import functools
import re
import statistics
import sys

from gpusim.hw.arch import (BANDWIDTH_FIELDS, BANDWIDTH_LATENCY_RULE, SM_CYCLE_RULE,
                         TENSOR_LOAD_RULE, bandwidth_fraction, bandwidth_k, rule_constant,
                         rule_provenance, sm_ghz)
from gpusim.hw.spec import canonical_names, load_spec
from gpusim.hw.spec_io import figure_line
from gpusim.hw.schema import builtin_dir

FIELDS = BANDWIDTH_FIELDS
#: CUDA-core classes bound by the SMs' issue (gpusim.hw.arch.SM_CYCLE_RULE)
SM_FIELDS = ("depthwise_aten_efficiency", "conv_simt_efficiency", "depthwise_efficiency",
             "depthwise_efficiency_16bit")
#: the ref marker of a figure from a published microbenchmark of the product (by others)
PUBLISHED = "published microbenchmark, not run here"
#: refs of earlier rules' lines this script replaces
OLD_RULES = ("unit-fraction rule", BANDWIDTH_LATENCY_RULE, SM_CYCLE_RULE, TENSOR_LOAD_RULE,
             PUBLISHED)


def _p() -> float:
    return rule_constant("bandwidth_sm", "exponent")


#: the rule's own definitions (gpusim.hw.arch): SMs x clock, a class's bytes per SM-cycle, and
#: the fraction a class constant makes on a spec
_issue, k_of, fraction = sm_ghz, bandwidth_k, bandwidth_fraction


def flops_per_sm_cycle(spec, field: str) -> float:
    """FLOPs per SM-cycle of a class measured as a fraction of ``spec``'s fp32 peak."""
    return getattr(spec, field) * spec.peak_flops("fp32") / (_issue(spec) * 1e9)


def sm_fraction(spec, k: float) -> float:
    """The fraction of ``spec``'s fp32 peak that ``k`` FLOPs per SM-cycle make, at most
    the whole peak (the lanes' limit)."""
    return min(1.0, k * _issue(spec) * 1e9 / spec.peak_flops("fp32"))


@functools.lru_cache(maxsize=1)
def sm_loo_errors() -> tuple[float, float]:
    """Median absolute % error of the SM-cycle rule's and of a copied fraction, leave one
    calibrated GPU out (both directions, every SM_FIELDS class)."""
    cals = calibrated()
    rule, copy = [], []
    for f in SM_FIELDS:
        for t in cals:
            for s in cals:
                if s is t or getattr(s, f) is None or getattr(t, f) is None:
                    continue
                m = getattr(t, f)
                rule.append(abs(sm_fraction(t, flops_per_sm_cycle(s, f)) - m) / m * 100)
                copy.append(abs(getattr(s, f) - m) / m * 100)
    return statistics.median(rule), statistics.median(copy)


def calibrated() -> list:
    return [s for s in map(load_spec, canonical_names()) if s.source == "measured"]


def _same_gpu(a, b) -> bool:
    return a.name.split("-")[0] == b.name.split("-")[0] and "pcie" not in a.name + b.name


def leave_one_out() -> dict:
    """``{field: [(target, from, rule's fraction, copied fraction, measured)]}``."""
    cals = calibrated()
    out = {}
    for f in FIELDS:
        rows = []
        for t in cals:
            for s in cals:
                if s is t or getattr(s, f) is None or getattr(t, f) is None:
                    continue
                rows.append((t.name, s.name, fraction(t, k_of(s, f)), getattr(s, f), getattr(t, f)))
        out[f] = rows
    return out


@functools.lru_cache(maxsize=1)
def loo_errors() -> tuple[float, float]:
    """Median absolute % error of the rule's and of the copied fractions, leave one out."""
    rule, copy = [], []
    for rows in leave_one_out().values():
        for _, _, r, c, m in rows:
            rule.append(abs(r - m) / m * 100)
            copy.append(abs(c - m) / m * 100)
    return statistics.median(rule), statistics.median(copy)


def targets() -> list:
    return [s for s in map(load_spec, canonical_names()) if s.source == "datasheet"]


def derived_lines(target, cals) -> dict[str, str]:
    """``{field: TOML line}`` of the rule's figures for ``target`` from the calibrated
    specs ``cals`` other than ``target``'s own GPU."""
    src = [s for s in cals if not _same_gpu(s, target)]
    rule_err, copy_err = loo_errors()
    out = {}
    for f in FIELDS:
        ks = [(s, k_of(s, f)) for s in src if getattr(s, f) is not None]
        if not ks:
            continue
        finite = [k for _, k in ks if k is not None]
        k = statistics.fmean(finite) if len(finite) == len(ks) else None
        v = round(fraction(target, k), 4)
        inputs = ", ".join(f"{c.name}: {getattr(c, f):.4g} -> k {kk:.3g}" if kk else
                           f"{c.name}: at the stream" for c, kk in ks)
        ref = (f"{BANDWIDTH_LATENCY_RULE} (gpusim.hw.arch.BANDWIDTH_LATENCY_RULE): A^-p = "
               f"(mem_efficiency x bandwidth)^-p + (SMs x clock x k)^-p, p {_p():g} "
               f"(hwspecs/arch/rules.toml), k the class's bytes per "
               f"SM-cycle from the calibrated GPUs ({inputs}; mean k "
               f"{k if k else float('inf'):.3g}; validation/fit/derive_specs.py); leave one GPU out "
               f"(H100 <-> H200) the rule is off by {rule_err:.1f}% median against "
               f"{copy_err:.1f}% for a copied fraction; untested across generations")
        out[f] = figure_line(f, v, "derived", ref)
    sm_err, sm_copy = sm_loo_errors()
    for f in SM_FIELDS:
        ks = [(s, flops_per_sm_cycle(s, f)) for s in src if getattr(s, f) is not None]
        if not ks:
            continue
        k = statistics.fmean(kk for _, kk in ks)
        inputs = ", ".join(f"{c.name}: {getattr(c, f):.4g} -> k {kk:.3g}" for c, kk in ks)
        ref = (f"{SM_CYCLE_RULE} (gpusim.hw.arch.SM_CYCLE_RULE): fraction of the fp32 peak = "
               f"k x SMs x clock / fp32 peak, k the class's FLOPs per SM-cycle from the "
               f"calibrated GPUs ({inputs}; mean k {k:.3g}; validation/fit/derive_specs.py); leave "
               f"one GPU out (H100 <-> H200) off by {sm_err:.1f}% ({sm_copy:.1f}% for a copied "
               f"fraction: the two have the same SMs, clock and lanes; what they show is that "
               f"1.43x the bandwidth leaves the rate unchanged); untested across generations")
        out[f] = figure_line(f, round(sm_fraction(target, k), 4), "derived", ref)
    if not any(s.compute_capability == target.compute_capability for s in src):
        # a calibrated GPU of the same architecture row measured the GEMMs these kernels
        # run (its matmul_efficiency, same-architecture rule); a published measurement of
        # this product's GEMMs comes next, the cross-generation rule last
        out.update(published_gemm_lines(target) or
                   {"matmul_tc_efficiency": tensor_load_line(target)})
    return out


#: published torch.matmul microbenchmarks of GPUs nobody here has (component level)
MATMUL_TABLE = "validation/components/torch_matmul.csv"
MATMUL_SOURCE = ("zzc0721/torch-performance-test-data@078586871da3:database.md (torch.matmul "
                 "of square fp32/fp16/bf16 matrices 1024-10240, the best size's TFLOP/s, "
                 "its test.py; PyTorch defaults: fp32 without TF32)")


@functools.lru_cache(maxsize=1)
def published_matmul() -> dict[str, list[dict]]:
    """``{spec name: [row, ...]}`` of :data:`MATMUL_TABLE` (one row per contributor)."""
    import csv
    import os
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    out: dict[str, list[dict]] = {}
    with open(os.path.join(root, MATMUL_TABLE)) as f:
        for r in csv.DictReader(f):
            out.setdefault(r["gpu"], []).append(r)
    return out


def published_rate(spec, column: str) -> float | None:
    """Median published TFLOP/s of ``spec``'s product in ``column`` (fp32, fp16), or None."""
    rows = published_matmul().get(spec.name)
    return statistics.median(float(r[column]) for r in rows) if rows else None


def published_gemm_lines(target) -> dict[str, str]:
    """``matmul_tc_efficiency`` and ``matmul_efficiency`` from the published GEMM
    microbenchmark of ``target``'s product; empty where there is none. The fp16 figure
    may exceed 1: GeForce datasheets state the tensor peak at the rated boost clock, which
    the card runs above while power and temperature allow (RTX 3090: 75.6 TFLOP/s
    measured by three contributors against 71 at 1695 MHz)."""
    rows = published_matmul().get(target.name)
    if not rows:
        return {}
    out = {}
    rule = tensor_load_efficiency(target)
    for field, col, unit in (("matmul_tc_efficiency", "fp16", "fp16_tc"),
                             ("matmul_efficiency", "fp32", "fp32")):
        rate = published_rate(target, col)
        v = round(rate / target.peak_tflops[unit], 4)
        vals = ", ".join(f"{float(r[col]):g} ({r['contributor']}: {r['setup'] or r['device']})"
                         for r in rows)
        note = (f"; the tensor-load rule would give {rule:.4f}, off by "
                f"{(rule - v) / v * 100:+.1f}%" if field == "matmul_tc_efficiency" else
                "; fp32 GEMMs on the CUDA cores, PyTorch's default")
        ref = (f"{target.name.upper()} ({target.display_name}) {col}, {PUBLISHED}: "
               f"{MATMUL_SOURCE}; {vals}; median {rate:g} TFLOP/s over the datasheet {unit} peak "
               f"{target.peak_tflops[unit]:g}{note} ({MATMUL_TABLE}, validation/fit/derive_specs.py)")
        out[field] = figure_line(field, v, "measured", ref)
    return out


def tensor_load_check() -> list[tuple[str, float, float]]:
    """``[(spec, rule, published)]``: the tensor-load rule's large-GEMM fraction against the
    published measurement on every GPU of :data:`MATMUL_TABLE` with a builtin spec (the
    rule's test across generations; the Hopper rows are the GPUs it was fitted on)."""
    out = []
    for name in sorted(published_matmul()):
        spec = load_spec(name)
        out.append((name, round(tensor_load_efficiency(spec), 4),
                    round(published_rate(spec, "fp16") / spec.peak_tflops["fp16_tc"], 4)))
    return out


def tensor_load_efficiency(spec) -> float:
    """Large tensor-core GEMMs' fraction of ``spec``'s tensor peak by the tensor-load rule."""
    e0, c = rule_constant("tensor_load", "e0"), rule_constant("tensor_load", "shared_tflops")
    return 1.0 / (1.0 / e0 + spec.peak_tflops["fp16_tc"] / c)


def tensor_load_line(spec) -> str:
    e0, c = rule_constant("tensor_load", "e0"), rule_constant("tensor_load", "shared_tflops")
    v = round(tensor_load_efficiency(spec), 4)
    ref = (f"{TENSOR_LOAD_RULE} (gpusim.hw.arch.TENSOR_LOAD_RULE): 1/e = 1/e0 + R/C, R the fp16 "
           f"dense tensor peak {spec.peak_tflops['fp16_tc']:g} TFLOP/s, e0 {e0:g} and C {c:g} "
           f"TFLOP/s (hwspecs/arch/rules.toml: {rule_provenance('tensor_load', 'e0')[1][:160]}...); "
           f"assumes the kernels this GPU runs reach the per-SM fraction Hopper's do when the "
           f"chip is lightly loaded; uncertainty about +-10%")
    return figure_line("matmul_tc_efficiency", v, "derived", ref)


def rewrite(path, lines: dict[str, str]) -> str:
    """The TOML text of ``path`` with the rule's lines in its [model] section (replacing
    earlier ones)."""
    text = open(path).read()
    for f in lines:
        text = re.sub(rf"^{f} = .*\n", "", text, flags=re.M)
    for rule in OLD_RULES:          # lines an earlier run of a rule wrote and this one drops
        text = re.sub(rf"^\w+ = .*{re.escape(rule)}.*\n", "", text, flags=re.M)
    m = re.search(r"^\[model\]\n(?:(?!^\[).*\n)*", text, flags=re.M)
    block = m.group(0).rstrip("\n") + "\n" + "\n".join(lines.values()) + "\n"
    after = text[m.end():]
    return text[:m.start()] + block + ("\n" + after.lstrip("\n") if after.strip() else "")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python3 -m validation.fit.derive_specs")
    ap.add_argument("--check", action="store_true", help="exit 1 if a spec file is stale")
    a = ap.parse_args(argv)
    cals = calibrated()
    stale = []
    for s in targets():
        path = builtin_dir() / f"{s.name}.toml"
        new = rewrite(path, derived_lines(s, cals))
        if new != open(path).read():
            stale.append(s.name)
            if not a.check:
                open(path, "w").write(new)
    for name, rule, pub in tensor_load_check():
        print(f"tensor-load rule {name}: {rule:.3f} against published {pub:.3f} "
              f"({(rule - pub) / pub * 100:+.1f}%)", file=sys.stderr)
    verb = "stale" if a.check else "rewrote"
    print(f"{verb}: {', '.join(stale) or 'none'}", file=sys.stderr)
    return 1 if a.check and stale else 0


if __name__ == "__main__":
    sys.exit(main())
