"""Report: plain-text tables and JSON documents for predictions and searches.

Numbers, bytes, shapes and the table layout come from :mod:`gpusim.util.fmt` (one convention
for the text tables and the pictures).
"""

from __future__ import annotations

import json
import math

from gpusim.util.fmt import fmt_num, fmt_shape, table  # noqa: F401  (table: re-exported for callers)
from gpusim.sim.memory import fit_line, fmt_bytes
from gpusim.predict.pipeline import MODE_LABELS
from gpusim.sim.timeline import compiled_forward_factor, eager_factors, eager_forward_factor


def _ops_label(k, width: int = 40) -> str:
    s = "+".join(k.op_types) if len(k.op_types) > 1 else k.op_types[0]
    name = k.name if len(k.ops) == 1 else f"{k.ops[0]}..({len(k.ops)})"
    lab = f"{name} [{s}]" if len(k.ops) == 1 else f"{name} [{s}]"
    return lab if len(lab) <= width else lab[: width - 2] + ".."


def kernel_rows(kernels) -> list[list[str]]:
    rows = []
    for k in kernels:
        ai = "inf" if math.isinf(k.intensity) else f"{k.intensity:.3g}"
        rows.append([_ops_label(k), fmt_shape(k.shape), fmt_num(k.flops), fmt_num(k.bytes, "B"),
                     ai, k.bound, f"{k.us:.2f}"])
    return rows


KERNEL_HEADER = ["kernel [ops]", "shape", "FLOPs", "bytes", "FLOP/B", "bound", "us"]


def memory_lines(pred) -> list[str]:
    """Weights, inputs, the activation peak and where it happens, and whether it fits."""
    m = pred.memory
    where = "-"
    if m.timeline:
        ops = m.peak_ops
        where = f"kernel {m.peak_kernel + 1} of {len(m.timeline)} ({ops[0]}" + (
            f" +{len(ops) - 1} ops)" if len(ops) > 1 else ")")
    # reserved over the same baseline as the peak (never below it); what the call itself
    # added to the cache is the smaller figure a memory_reserved() delta shows
    new = (f", {fmt_bytes(m.peak_reserved_bytes)} of it new" if m.peak_reserved_bytes
           != m.reserved_for_peak_bytes else "")
    return [f"weights / inputs {fmt_bytes(m.weights_bytes)} / {fmt_bytes(m.inputs_bytes)}",
            f"peak memory      {fmt_bytes(m.peak_bytes)} activations above weights and inputs "
            f"(reserved {fmt_bytes(m.reserved_for_peak_bytes)}{new}), at {where}",
            f"memory           {fit_line(m, pred.spec)}"]


def host_source(host) -> str:
    """The host profile a prediction used, and the machine it describes (host speed
    belongs to the machine, not the GPU)."""
    return f"host profile {host.name}"


def forward_factor_used(pred) -> float | None:
    """The eager_forward_factor an eager prediction applied at its program's size (None:
    not eager, or the host has none)."""
    if pred.mode != "eager" or not pred.host.eager_forward_factor:
        return None
    return eager_forward_factor(pred.host, len(pred.kernels))


def host_factor_note(pred) -> str:
    """The host line's note of the in-forward factor a prediction applied at its program's
    size: eager's, or a compiled forward's (not a training step's: its graphs pay it at their
    own sizes); "" when none applied."""
    if pred.mode == "eager" and pred.host.eager_library_forward_factor:
        return f"; eager_library_forward_factor x{eager_factors(pred.host, len(pred.kernels))[1]:.2f} (library calls)"
    k = forward_factor_used(pred)
    if k:
        return f"; eager_forward_factor x{k:.2f}"
    if (pred.mode == "compiled" and pred.host.compiled_forward_factor
            and "train" not in pred.graph.meta):
        return f"; compiled_forward_factor x{compiled_forward_factor(pred.host, len(pred.kernels)):.2f}"
    return ""


def python_lines(pred) -> list[str]:
    """Eager: the model's own Python per call, and how it was priced (capture's counts
    times the host's per-call figures: the same on every run)."""
    tl, meta, host = pred.timeline, pred.graph.meta, pred.host
    if pred.mode == "compiled" and "train" in meta and tl.python_us:
        c = meta.get("step_calls") or {}
        return [f"step's Python    {tl.python_us:.1f} us per step, outside the compiled model "
                f"({c.get('module_calls', 0)} nn.Module calls, {c.get('torch_calls', 0)} torch calls: "
                "zero_grad, the loss, the optimizer's loops; eager factor included)"]
    if pred.mode != "eager":
        return []
    k = forward_factor_used(pred)
    f = f" x {k:.2f}" if k else ""
    if "torch_calls" in meta and (host.python_module_call_us is not None
                                  or host.python_torch_call_us is not None):
        how = (f"({meta.get('module_calls', 0)} nn.Module calls x "
               f"{host.python_module_call_us or 0.0:.2f} us + {meta.get('torch_calls', 0)} torch "
               f"calls x {host.python_torch_call_us or 0.0:.2f} us){f}")
    elif host.eager_module_us:
        how = (f"{meta.get('module_calls', 0)} nn.Module calls x eager_module_us "
               f"{host.eager_module_us:.2f} us{f}")
    else:
        how = "the host profile prices none"
    return [f"model's Python   {tl.python_us:.1f} us per call ({how})"]


def sync_lines(pred) -> list[str]:
    """Host syncs per call and what they cost: the host's wait for the stream to drain."""
    sy = pred.timeline.syncs
    if not sy:
        return []
    reads = pred.graph.meta.get("syncs") or []
    what = ", ".join(sorted(set(reads))) if reads else ", ".join(k for k, _ in sy)
    wait = sum(w for _, w in sy)
    each = f", plus {pred.host.sync_us:.1f} us per read" if pred.host.sync_us else ""
    return [f"host syncs       {len(sy)} per call (at {what}): the host waits "
            f"{wait:.1f} us for the GPU to drain{each}"]


def modes_line(ranked) -> str:
    """``[(mode, Prediction)]`` fastest first -> one line naming the fastest mode."""
    (m0, p0), slowest = ranked[0], ranked[-1][1]
    parts = " < ".join(f"{MODE_LABELS[m]} {p.end_to_end_us:.1f} us" for m, p in ranked)
    return (f"fastest          {MODE_LABELS[m0]}, {slowest.end_to_end_us / p0.end_to_end_us:.2f}x "
            f"over the slowest ({parts}, end to end per call)")


NO_FIT_ADVICE = ("to fit           smaller --size values (`gpusim examples` lists each model's), "
                 "a 16-bit --dtype (bfloat16), a GPU with more memory (`gpusim specs`), or "
                 "`gpusim search --memory-limit` for a fusion that needs less")


def prediction_text(pred, top: int | None = None, body: str | None = None) -> str:
    """The prediction as text: the kernel table (the ``top`` slowest; all when None) or,
    given, ``body`` in its place (the per-module roll-up), then the totals."""
    if not pred.fits:       # a time for a run that cannot happen would mislead
        return "\n".join([f"{pred.graph.name} on {pred.spec.display_name} ({pred.gpu}), "
                          f"mode {pred.mode}: {fit_line(pred.memory, pred.spec)}"]
                         + memory_lines(pred)[:2] + _train_lines(pred) + [NO_FIT_ADVICE])
    ks = pred.kernels
    shown = sorted(ks, key=lambda k: -k.us)[:top] if top else ks
    out = [body] if body is not None else [
        f"{pred.graph.name} on {pred.spec.display_name} ({pred.gpu}), mode {pred.mode}",
        table(kernel_rows(shown), KERNEL_HEADER)]
    if top and len(ks) > top and body is None:
        out.append(f"... {len(ks) - top} more kernels (top {top} by time shown; --all for all)")
    bounds = {}
    for k in ks:
        bounds[k.bound] = bounds.get(k.bound, 0.0) + k.us
    out.append("")
    out.append(f"kernels          {len(ks)}")
    out.append(f"FLOPs / bytes    {fmt_num(pred.flops)} / {fmt_num(pred.bytes, 'B')}")
    out.append(f"device time      {pred.device_us:.1f} us  (" + ", ".join(
        f"{b} {v / pred.device_us * 100:.0f}%" for b, v in sorted(bounds.items(), key=lambda x: -x[1])
    ) + ")" if pred.device_us else "device time      0 us")
    out.append(f"host time        {pred.timeline.host_us:.1f} us per call ({host_source(pred.host)}"
               f"{host_factor_note(pred)})")
    out += python_lines(pred)
    out.append(f"end-to-end       {pred.end_to_end_us:.1f} us per call (steady state; GPU idle "
               f"{pred.idle_us:.1f} us of the first call)")
    out += sync_lines(pred)
    if pred.unmodelled_counts:
        out.append("unmodelled ops   " + ", ".join(
            f"{op} x{k}" for op, k in pred.unmodelled_counts.items())
            + "  (outside the cost model: priced as memory-bound copies, or not at all "
              "when they return no tensor)")
    out += memory_lines(pred)
    out += _train_lines(pred)
    return "\n".join(out)


def _train_lines(pred) -> list[str]:
    """A training step's phases (:func:`gpusim.predict.phases.step_lines`); none for a forward."""
    if "train" not in pred.graph.meta:
        return []
    from gpusim.predict.phases import step_lines
    return step_lines(pred)


def search_text(res, top: int | None = None) -> str:
    f = res.fused
    rows = []
    ks = sorted(f.kernels, key=lambda k: -k.us)[:top] if top else f.kernels
    for k in ks:
        rows.append([_ops_label(k, 56), fmt_num(k.bytes_read, "B"), fmt_num(k.bytes_written, "B"),
                     k.bound, f"{k.us:.2f}"])
    out = [f"{res.graph.name} on {f.spec.display_name}: fusion search ({res.algo}, "
           f"{res.seconds:.2f} s), fused run in mode {f.mode}",
           table(rows, ["group [ops]", "bytes in", "bytes out", "bound", "us"])]
    if top and len(f.kernels) > top:
        out.append(f"... {len(f.kernels) - top} more groups")
    rows = [[label, str(len(p.kernels)), fmt_num(p.bytes, "B"), f"{p.device_us:.1f}",
             f"{p.end_to_end_us:.1f}", fmt_bytes(p.peak_memory_bytes)] for label, p in res.rows]
    rows.append(["speed-up (fused over eager)", "", "", f"{res.speedup_device:.2f}x",
                 f"{res.speedup_end_to_end:.2f}x", ""])
    out += ["", table(rows, ["", "kernels", "bytes", "device us", "end-to-end us", "peak memory"])]
    m = f.memory
    out.append(f"memory: weights {fmt_bytes(m.weights_bytes)}, inputs {fmt_bytes(m.inputs_bytes)}; "
               f"fused {fit_line(m, f.spec)}")
    if not f.fits:
        out.append(NO_FIT_ADVICE)
    if res.optimal_over:
        out.append(f"exact: {'optimal' if res.optimal else 'best found'} over {res.optimal_over}"
                   + (f" (gap {res.gap:.2%})" if res.gap else ""))
    for n in res.notes:
        out.append(f"note: {n}")
    return "\n".join(out)


def dumps(doc) -> str:
    return json.dumps(doc, indent=2, default=_default)


def _default(o):
    if isinstance(o, float) and (math.isinf(o) or math.isnan(o)):
        return None
    if isinstance(o, (set, frozenset, tuple)):
        return list(o)
    return str(o)
