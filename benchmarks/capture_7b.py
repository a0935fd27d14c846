"""Capture time and memory of the LLaMA-style 7B decoder (32 layers, d=4096, seq 2048).

Target (issue #2): under 30 s and 2 GB of RAM on a 2-core machine. Everything lives on
the meta device, so the 6.7B parameters cost no memory.

    python benchmarks/capture_7b.py
"""

import resource
import time


def main():
    t0 = time.perf_counter()
    import torch  # noqa: F401  (import time reported separately)

    from gpusim.capture.tracing import capture
    from gpusim.models.examples import build_example
    t_import = time.perf_counter() - t0
    t1 = time.perf_counter()
    fn, args = build_example("llama7b", device="meta")
    t_build = time.perf_counter() - t1
    t2 = time.perf_counter()
    g = capture(fn, args, name="llama7b")
    t_cap = time.perf_counter() - t2
    rss_gb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20
    n_params = sum(p.numel() for p in fn.parameters()) if hasattr(fn, "parameters") else 0
    tot = g.totals()
    print(f"llama7b: {n_params / 1e9:.2f}B parameters, {tot['nodes']} graph nodes, "
          f"{tot['kernels']} kernels, {tot['flops'] / 1e12:.1f} TFLOP per forward")
    print(f"import {t_import:.1f} s, build on meta {t_build:.2f} s, capture {t_cap:.1f} s, "
          f"peak RSS {rss_gb:.2f} GB")


if __name__ == "__main__":
    main()
