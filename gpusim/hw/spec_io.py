"""Writing GPU specs: a spec back to TOML with every figure's provenance (:func:`dump_spec`), and
the tables ``gpusim specs`` prints (:func:`figures_table`, :func:`specs_table`)."""

from __future__ import annotations

import dataclasses
import numbers
from typing import Mapping

from gpusim.hw.schema import ALIASES, COMPUTE, MEMORY, MODEL, OPTIONAL_MODEL, SECTIONS
from gpusim.hw.spec import GPUSpec
from gpusim.util.fmt import table

def toml_value(v) -> str:
    """One TOML value as gpusim's data files write it."""
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, numbers.Integral):       # numpy's integers too
        return str(int(v))
    if isinstance(v, numbers.Real):           # numpy's floats written as Python's
        return repr(float(v))
    return '"' + str(v).replace("\\", "\\\\").replace('"', '\\"') + '"'


def figure_line(key: str, value, source: str, ref: str, fmt: str | None = None) -> str:
    """``key = { value = ..., source = ..., ref = ... }``: how every figure is written.
    ``fmt``: the value's format spec where a fit fixes its decimals (``".4f"``); else
    :func:`toml_value`."""
    v = toml_value(value) if fmt is None else format(value, fmt)
    return f"{key} = {{ value = {v}, source = {toml_value(source)}, ref = {toml_value(ref)} }}"


def _figure_line(spec: GPUSpec, key: str, pkey: str | None = None) -> str:
    """``spec``'s figure ``key`` with its provenance (``key = value`` for one without)."""
    v = spec.figure(pkey or key)
    v = float(v) if (pkey or key).startswith("peak_tflops.") else v
    p = spec.provenance.get(pkey or key)
    if p is None:
        return f"{key} = {toml_value(v)}"
    return figure_line(key, v, *p)


def with_provenance(spec: GPUSpec, prov: Mapping[str, tuple[str, str]]) -> GPUSpec:
    """``spec`` with these figures' provenance replaced (the figures a calibration
    measured or fitted: the rest keep where they came from)."""
    return spec.replace(provenance={**spec.provenance, **prov})


def dump_spec(spec: GPUSpec, path) -> None:
    """Write ``spec`` as TOML in the hwspecs schema, every figure as an inline table with
    its provenance (``spec.provenance``; set it with :func:`with_provenance`)."""
    out = [f"# {spec.display_name}: written by gpusim", f"name = {toml_value(spec.name)}",
           f"display_name = {toml_value(spec.display_name)}", f"source = {toml_value(spec.source)}"]
    for k in ("measured_on", "measured_date"):
        if getattr(spec, k):
            out.append(f"{k} = {toml_value(getattr(spec, k))}")
    for section, keys in SECTIONS.items():
        out += ["", f"[{section}]"]
        out += [_figure_line(spec, k) for k in keys]
        if section == "model":
            out += [_figure_line(spec, k) for k in OPTIONAL_MODEL if _given(spec, k)]
        if section == "compute":
            if spec.compute_capability is not None:
                out.append(_figure_line(spec, "compute_capability"))
            out += ["", "[compute.peak_tflops]"]
            out += [_figure_line(spec, k, f"peak_tflops.{k}") for k in spec.peak_tflops]
    from gpusim.util.atomic import atomic_write
    atomic_write(str(path), "\n".join(out) + "\n")


#: the dataclass defaults (neutral laws: 1.0 for the ATen fractions, else None)
_DEFAULTS = {f.name: f.default for f in dataclasses.fields(GPUSpec)}


def _given(spec: GPUSpec, key: str) -> bool:
    """Whether ``spec`` has a figure of its own for an optional field (else the field's
    neutral law applies: None, or 1.0 for the ATen fractions)."""
    return key in spec.provenance or getattr(spec, key) not in (None, _DEFAULTS.get(key))


def figure_keys(spec: GPUSpec) -> list[str]:
    """Every figure of ``spec`` a prediction may read, in file order (provenance keys)."""
    keys = list(MEMORY + COMPUTE) + (["compute_capability"] if spec.compute_capability else [])
    keys += [f"peak_tflops.{u}" for u in spec.peak_tflops] + list(MODEL)
    keys += [k for k in OPTIONAL_MODEL if _given(spec, k)]
    return keys


def figures_table(spec: GPUSpec) -> str:
    """``gpusim specs GPU``: every figure with its value, source and ref."""
    rows = []
    for k in figure_keys(spec):
        src, ref = spec.provenance.get(k, ("-", "-"))
        rows.append([k, f"{spec.figure(k):g}", src, ref])
    shown = set(figure_keys(spec))
    unset = [k for k in OPTIONAL_MODEL if k not in shown]
    note = (f"\n\nNo figure for {', '.join(unset)}: each is priced by its neutral law (the plain "
            "roofline, mem_efficiency, the common kernel floor; ATen kernels as fast as a plain "
            "copy)." if unset else "")
    return f"{spec.display_name} ({spec.path})\n" + table(rows, ["figure", "value", "source", "ref"],
                                                           "lrll") + note


def source_counts(spec: GPUSpec) -> str:
    """``datasheet 14, assumed 9``: the spec's figures counted by source."""
    counts: dict[str, int] = {}
    for src, _ in spec.provenance.values():
        counts[src] = counts.get(src, 0) + 1
    return ", ".join(f"{s} {n}" for s, n in sorted(counts.items(), key=lambda kv: -kv[1]))


def specs_table(specs) -> str:
    rows = []
    for s in specs:
        pk = s.peak_tflops
        rows.append([s.name, s.display_name, f"{s.bandwidth_gbs:g}", f"{s.l2_mib:g}",
                     str(s.sm_count), f"{pk['fp32']:g}"] +
                    [f"{pk[u]:g}" if u in pk else "-" for u in ("tf32_tc", "fp16_tc", "bf16_tc")] +
                    [s.source + (f" ({s.measured_date})" if s.measured_date else ""),
                     source_counts(s)])
    aliases = ", ".join(f"{a} = {c}" for a, c in sorted(ALIASES.items()))
    return table(rows, ["name", "GPU", "GB/s", "L2 MiB", "SMs", "FP32", "TF32", "FP16",
                        "BF16", "source", "figures by source"], "llrrrrrrrll") + \
        f"\n\nTFLOP/s dense; TF32/FP16/BF16 on tensor cores. Aliases: {aliases}.\n" \
        "`gpusim specs GPU` lists a spec's every figure with its source and ref."
