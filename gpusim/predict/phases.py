"""A training step's prediction read by phase: each kernel belongs to the phase of the op it
computes (``forward``, ``backward``, ``optimizer``), and so does the memory it holds while it
runs (:mod:`gpusim.sim.memory`'s per-kernel timeline). Resident memory is the weights (parameters
and buffers) and the optimizer states; gradients are allocated by backward and held to the
step's end (freed by the next step's ``zero_grad(set_to_none=True)``), so they are part of the
peak, not of the resident baseline. The step is captured by :mod:`gpusim.capture.train`."""

from __future__ import annotations

PHASES = ("forward", "backward", "optimizer")


def kernel_phases(pred) -> list[str]:
    """The phase of each kernel of ``pred`` (the phase of its first op)."""
    g = pred.graph.g
    return [g.nodes[k.ops[0]].get("phase", "forward") for k in pred.lowering.kernels]


def step_summary(pred) -> dict:
    """Per phase: kernels, device time (µs) and the memory peak while it runs (bytes allocated,
    resident state, the BLAS workspaces and the allocator's rounding of the resident tensors
    included: ``torch.cuda.max_memory_allocated()`` over the phase); the phase of the step's peak; the
    resident bytes (weights, optimizer states) and the gradients' bytes."""
    from gpusim.sim.timeline import is_sync
    phases = kernel_phases(pred)
    mem = pred.memory
    base = mem.baseline_bytes + mem.workspace_bytes + mem.resident_overhead_bytes
    out = {}
    for ph in PHASES:
        idx = [i for i, p in enumerate(phases) if p == ph]
        out[ph] = {"kernels": sum(1 for i in idx if not is_sync(pred.kernels[i])),
                   "device_us": sum(pred.kernels[i].us for i in idx),
                   "peak_bytes": base + max((mem.timeline[i] for i in idx), default=0)}
    train = pred.graph.meta.get("train", {})
    peak_phase = phases[mem.peak_kernel] if phases else "forward"
    return {"phases": out, "peak_phase": peak_phase, "peak_bytes": mem.total_bytes,
            "weights_bytes": train.get("weights_bytes", 0),
            "optimizer_state_bytes": train.get("state_bytes", 0),
            "gradient_bytes": train.get("grad_bytes", 0), "optimizers": train.get("optimizers", []),
            "fits": pred.fits}


def step_lines(pred) -> list[str]:
    """The text report's training lines: time and memory by phase, the peak's phase."""
    from gpusim.sim.memory import fmt_bytes
    s = step_summary(pred)
    lines = [f"training step    {', '.join(s['optimizers']) or 'no optimizer'}; resident "
             f"weights {fmt_bytes(s['weights_bytes'])}, optimizer states "
             f"{fmt_bytes(s['optimizer_state_bytes'])}; gradients {fmt_bytes(s['gradient_bytes'])}"]
    for ph in PHASES:
        p = s["phases"][ph]
        lines.append(f"  {ph:<10} {p['kernels']:>5} kernels {p['device_us'] / 1e3:>9.3f} ms device, "
                     f"memory peak {fmt_bytes(p['peak_bytes'])}")
    lines.append(f"  peak memory {fmt_bytes(s['peak_bytes'])} in the {s['peak_phase']} phase")
    return lines
