"""Carry the decode-step and ViT sweeps' laws of one calibrated GPU to a calibrated GPU of the same architecture
row that never ran those sweeps (issue 34: the H100 has no skinny_gemm, sdpa_decode, decode_classes or prefill_classes
records; issue 35: nor sdpa_mask, vit_small_ops, vit_patchify or aten_reduce records; the H200 has all eight), each figure by a named rule whose
inputs are the two GPUs' own figures:

- a **bandwidth** (a fraction of the datasheet bandwidth, a TB/s, or a fraction of a copy's bandwidth) by the
  bandwidth-latency rule (:data:`gpusim.hw.arch.BANDWIDTH_LATENCY_RULE`): the class's bytes per SM-cycle solved
  from the source GPU's figure, the fraction it reaches on the target's stream, SMs and clock
  (:func:`gpusim.hw.arch.bandwidth_fraction`), as validation/fit/derive_specs.py derives a datasheet spec's classes;
- a **time** (a kernel's fixed µs, ns per K column, per key, per column; a tile) by the same-architecture rule
  (:data:`gpusim.hw.arch.SAME_ARCH_RULE`): the same sm_90 kernels on the same SMs at the same clock take the same
  time, so it is taken as the source measured it. Refused when the two GPUs' SMs or clocks differ.

Each figure is written into the target's calibrated spec as ``derived`` (its ref: the rule, the source figure and
where it was measured, and the rule's H200 <-> H100 error on the classes both GPUs measured: :func:`checks`).
A GPU with its own sweep keeps its measured figure (nothing here overwrites a ``measured`` line).
``gpusim.hw.spec.transfer_spec`` drops these figures when it carries the target back to the source GPU (they are
the source's own measurements).

    python3 -m validation.fit.carry_decode [--source h200] [--target h100] [--check]
"""

from __future__ import annotations

import argparse
import statistics
import sys

from gpusim.hw.arch import BANDWIDTH_LATENCY_RULE, SAME_ARCH_RULE, bandwidth_fraction, bandwidth_k
from gpusim.hw.schema import (ATEN_REDUCE_FIGURES, DECODE_ATTENTION_FIGURES, DECODE_CLASS_FIGURES, MASK_FIGURES,
                              PATCHIFY_FIGURES, PREFILL_FIGURES, SMALL_OP_FIGURES, STREAM_FIGURES, builtin_dir)
from gpusim.hw.spec import calibrated_name, load_spec
from gpusim.hw.spec_io import figure_line

#: the sweeps whose figures a decode step's kernels use (validation/fit/fit_skinny.py, fit_sdpa_decode.py,
#: fit_decode_classes.py, fit_prefill_classes.py), and the ViT sweeps' (issue 35: masked 16-bit attention,
#: fit_sdpa_mask.py; ViT blocks' small ATen kernels, fit_vit_small_ops.py; patch embeddings, fit_patchify.py: the
#: dispatch sweeps' 16x16 embeddings run within 0.5% on both GPUs, and the H200's law prices the H100's at 3.6%)
FIELDS = STREAM_FIGURES + DECODE_ATTENTION_FIGURES + DECODE_CLASS_FIGURES + PREFILL_FIGURES + MASK_FIGURES \
    + SMALL_OP_FIGURES + PATCHIFY_FIGURES + ATEN_REDUCE_FIGURES
#: figures that are a fraction of the datasheet bandwidth
OF_BANDWIDTH = ("gemm_stream_efficiency", "aten_reduce_efficiency")
#: figures in TB/s
TBPS = ("attention_decode_tbps",)
# (the mask-read rates of masked 16-bit attention, MASK_FIGURES, carry by the same-architecture rule, as times:
# the mask is read inside cuDNN's fused kernel, which is not DRAM-bound (the zoo records' 16-bit attention
# kernels, masked BERT/RoBERTa/ALBERT included, run 1.00-1.03x as long on the H100 as on the H200, whose
# bandwidth is 1.43x), so the same kernel on the same SMs and clock reads it at the same rate)

#: figures that are a fraction of a contiguous copy's bandwidth (``mem_efficiency`` x datasheet)
OF_COPY = ("aten_cat_append_efficiency", "aten_cat_strided_efficiency")
#: the marker of this module's lines in a spec's refs (rewrite replaces them)
MARK = "validation/fit/carry_decode.py"


def of_datasheet(spec, f: str) -> float:
    """Figure ``f`` of ``spec`` as a fraction of its datasheet bandwidth."""
    v = getattr(spec, f)
    if f in TBPS:
        return v * 1e3 / spec.bandwidth_gbs
    return v * spec.mem_efficiency if f in OF_COPY else v


def from_datasheet(spec, f: str, frac: float) -> float:
    """The inverse of :func:`of_datasheet` on ``spec``."""
    if f in TBPS:
        return frac * spec.bandwidth_gbs / 1e3
    return frac / spec.mem_efficiency if f in OF_COPY else frac


def bandwidth_figure(f: str) -> bool:
    return f in OF_BANDWIDTH + TBPS + OF_COPY


def carried(source, target) -> dict[str, float]:
    """``{field: value}`` of :data:`FIELDS` that ``source`` has, on ``target`` (each by its rule)."""
    if source.compute_capability != target.compute_capability:
        raise ValueError(f"{source.name} and {target.name} are of different architecture rows")
    if (source.sm_count, source.boost_clock_mhz) != (target.sm_count, target.boost_clock_mhz):
        raise ValueError(f"{source.name} and {target.name} differ in SMs or clock: the times do not carry")
    out = {}
    for f in FIELDS:
        v = getattr(source, f, None)
        if v is None:
            continue
        if bandwidth_figure(f):
            # the rule on the class's share of the datasheet bandwidth (bandwidth_k works on a spec's field:
            # a spec whose field holds that share)
            share = source.replace(**{f: of_datasheet(source, f)}) if f not in OF_BANDWIDTH else source
            v = from_datasheet(target, f, bandwidth_fraction(target, bandwidth_k(share, f)))
        out[f] = v
    return out


def checks(source, target) -> dict[str, float]:
    """The rules' error from ``source`` to ``target`` on what both calibrations measured: ``"bandwidth"``, the
    median |error| of the bandwidth-latency rule over the memory-bound classes both fitted
    (:data:`gpusim.hw.arch.BANDWIDTH_FIELDS`), ``"gemm_stream"`` its error on the GEMM weight stream both
    dispatch sweeps measured (``gemm_mem_efficiency``), ``"copy"`` the median |error| of copying those fractions;
    ``"times"``: the median |error| of taking the source's kernel times (every ``*_us``/``*_ns`` figure both
    measured) as the target's, ``"times_n"`` their count."""
    from gpusim.hw.arch import BANDWIDTH_FIELDS
    rule, copy = [], []
    for f in BANDWIDTH_FIELDS:
        s, t = getattr(source, f, None), getattr(target, f, None)
        if s is None or t is None:
            continue
        rule.append(abs(bandwidth_fraction(target, bandwidth_k(source, f)) / t - 1) * 100)
        copy.append(abs(s / t - 1) * 100)
    g = bandwidth_fraction(target, bandwidth_k(source, "gemm_mem_efficiency")) / target.gemm_mem_efficiency - 1
    times = []
    for f, (src, _) in target.provenance.items():
        if not (f.endswith("_us") or f.endswith("_ns")) or src != "measured" or f in FIELDS:
            continue
        s, t = getattr(source, f, None), getattr(target, f, None)
        if s and t and source.provenance.get(f, ("",))[0] == "measured":
            times.append(abs(s / t - 1) * 100)
    return {"bandwidth": statistics.median(rule), "copy": statistics.median(copy), "gemm_stream": g * 100,
            "times": statistics.median(times), "times_n": len(times)}


def lines(source, target) -> dict[str, str]:
    """``{field: TOML line}`` of the carried figures, for ``target``'s calibrated spec."""
    c = checks(source, target)
    out = {}
    for f, v in carried(source, target).items():
        src, ref = source.provenance[f]
        was = f"{source.name} = {getattr(source, f):.6g} ({ref})"
        if bandwidth_figure(f):
            why = (f"{BANDWIDTH_LATENCY_RULE} (gpusim.hw.arch.BANDWIDTH_LATENCY_RULE; {MARK}): the class's bytes per "
                   f"SM-cycle from {was}, on this GPU's datasheet bandwidth, mem_efficiency, SMs and clock; "
                   f"{source.name} -> {target.name} on the memory-bound classes both calibrations fitted the rule is "
                   f"off by {c['bandwidth']:.1f}% median ({c['copy']:.1f}% for a copied fraction), on the "
                   f"dispatch sweeps' GEMM weight stream by {c['gemm_stream']:+.1f}%")
        else:
            why = (f"{SAME_ARCH_RULE} (gpusim.hw.arch.SAME_ARCH_RULE; {MARK}): the same sm_90 kernels on the same "
                   f"{target.sm_count} SMs at {target.boost_clock_mhz:g} MHz, so the time is taken as measured: {was}; "
                   f"the {c['times_n']} kernel times both calibrations measured differ by {c['times']:.1f}% median")
        out[f] = figure_line(f, round(v, 4), "derived", why)
    return out


def rewrite(path, new: dict[str, str]) -> str:
    """``path``'s text with this module's lines replaced by ``new`` (appended to the [model] section, which
    the calibrated specs end with); a figure the spec measured itself is never replaced."""
    import re
    text = open(path).read()
    text = "".join(ln for ln in text.splitlines(keepends=True) if MARK not in ln)
    mine = {f: ln for f, ln in new.items() if not re.search(rf"^{f} = ", text, flags=re.M)}
    return text.rstrip("\n") + "\n" + "".join(ln + "\n" for ln in mine.values())


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python3 -m validation.fit.carry_decode", description=__doc__.split("\n\n")[0])
    ap.add_argument("--source", default="h200")
    ap.add_argument("--target", default="h100")
    ap.add_argument("--check", action="store_true", help="exit 1 if the target's spec file is stale")
    a = ap.parse_args(argv)
    source = load_spec(calibrated_name(a.source))
    path = builtin_dir() / f"{calibrated_name(a.target)}.toml"
    target = load_spec(calibrated_name(a.target))
    base = target.replace(**{f: None for f in FIELDS if target.provenance.get(f, ("",))[0] == "derived"})
    c = checks(source, base)
    print(f"{source.name} -> {target.name}: bandwidth-latency rule {c['bandwidth']:.1f}% median over the classes "
          f"both fitted (copied fractions {c['copy']:.1f}%), GEMM weight stream {c['gemm_stream']:+.1f}%; kernel "
          f"times {c['times']:.1f}% median over {c['times_n']}", file=sys.stderr)
    new = rewrite(path, lines(source, base))
    stale = new != open(path).read()
    if stale and not a.check:
        open(path, "w").write(new)
    print(f"{'stale' if a.check else 'rewrote'}: {path.name if stale else 'none'}", file=sys.stderr)
    return 1 if a.check and stale else 0


if __name__ == "__main__":
    sys.exit(main())
