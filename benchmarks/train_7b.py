"""Capture and predict time of a 7B-class decoder's training step on this machine.

Target (training issue): capture plus predict under 15 s on the 2-core machine. The step is
``gpusim predict llama7b --train --amp bf16``'s (LLaMA-style 7B decoder, 32 layers, d=4096,
batch 1 x 2048 tokens; fp32 weights, the loss under bf16 autocast, foreach AdamW), built on
the meta device: 6.7B parameters and their optimizer states cost no memory.

    python benchmarks/train_7b.py [--mode eager|compiled]
"""

import argparse
import resource
import time


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--mode", default="eager", choices=("eager", "compiled"))
    a = ap.parse_args()
    t0 = time.perf_counter()
    import torch  # noqa: F401  (import time reported separately)

    import gpusim
    from gpusim.capture.tracing import capture
    from gpusim.predict.step import standard_step
    t_import = time.perf_counter() - t0
    t1 = time.perf_counter()
    fn, args = standard_step("llama7b", "float32", None, "adamw", amp="bf16")
    t_build = time.perf_counter() - t1
    t2 = time.perf_counter()
    g = capture(fn, args, name="llama7b training step")
    t_cap = time.perf_counter() - t2
    t3 = time.perf_counter()
    p = gpusim.predict(g, gpu="h100", mode=a.mode)
    t_pred = time.perf_counter() - t3
    rss_gb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20
    s = p.train
    print(f"llama7b training step ({a.mode}, bf16 autocast, AdamW): {len(g.compute_nodes)} ops, "
          f"{len(p.kernels)} kernels, device {p.device_us / 1e3:.0f} ms, peak "
          f"{s['peak_bytes'] / 2**30:.0f} GiB ({'fits' if s['fits'] else 'does not fit'} an H100)")
    print(f"import {t_import:.1f} s, build on meta {t_build:.1f} s, capture {t_cap:.1f} s, "
          f"predict {t_pred:.1f} s: capture + predict {t_cap + t_pred:.1f} s (target 15 s); "
          f"peak RSS {rss_gb:.2f} GB")


if __name__ == "__main__":
    main()
