"""Time of the memory liveness simulation (gpusim.sim.memory) on the LLaMA-style 7B decoder
(32 layers, d=4096, seq 2048, bf16), eager and torch.compile lowerings.

Target (issue #12): under 2 s on a 2-core machine. Capture and lowering are timed apart:
the simulation is what this measures.

    python benchmarks/memory_liveness.py
"""

import time


def main():
    import torch

    from gpusim.capture.tracing import capture
    from gpusim.models.examples import build_example
    from gpusim.predict.pipeline import lower
    from gpusim.sim.memory import fmt_bytes, simulate_memory
    fn, args = build_example("llama7b", device="meta", dtype=torch.bfloat16)
    t0 = time.perf_counter()
    g = capture(fn, args, name="llama7b")
    t_cap = time.perf_counter() - t0
    for mode in ("eager", "compiled"):
        t1 = time.perf_counter()
        low = lower(g, mode)
        t_low = time.perf_counter() - t1
        t2 = time.perf_counter()
        m = simulate_memory(low)
        t_mem = time.perf_counter() - t2
        print(f"llama7b seq 2048 {mode}: {len(low.kernels)} kernels, peak {fmt_bytes(m.peak_bytes)} "
              f"(reserved {fmt_bytes(m.peak_reserved_bytes)}), weights {fmt_bytes(m.weights_bytes)}; "
              f"liveness simulation {t_mem:.3f} s (lower {t_low:.2f} s, capture {t_cap:.1f} s)")


if __name__ == "__main__":
    main()
