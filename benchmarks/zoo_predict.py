"""Capture + eager and compiled prediction of every zoo model at its large size.

Target (real-models and torch.compile issues): under 10 s per model on the 2-core
machine. Prints one line per model (build, capture, predict eager, predict compiled,
in seconds) and the maximum.

    python benchmarks/zoo_predict.py [NAME ...]
"""

import sys
import time

import torch

import gpusim
from gpusim.models import zoo
from gpusim.models.resolve import parse_dtype


def main(names):
    worst = 0.0
    for name in names or list(zoo.ZOO):
        e = zoo.ZOO[name]
        t0 = time.perf_counter()
        fn, args = zoo.build(name, device="meta", dtype=parse_dtype(e.dtypes[-1]), **e.large)
        t1 = time.perf_counter()
        g = gpusim.capture(fn, args, name=name)
        t2 = time.perf_counter()
        p = gpusim.predict(g, gpu="h100", mode="eager")
        t3 = time.perf_counter()
        c = gpusim.predict(g, gpu="h100", mode="compiled")
        t4 = time.perf_counter()
        total = t4 - t0
        worst = max(worst, total)
        print(f"{name:32s} build {t1 - t0:5.2f}  capture {t2 - t1:5.2f}  eager {t3 - t2:5.2f}  "
              f"compiled {t4 - t3:5.2f}  total {total:5.2f} s  ({len(p.kernels)} / {len(c.kernels)} kernels)",
              flush=True)
    print(f"slowest: {worst:.2f} s (target < 10 s)")


if __name__ == "__main__":
    with torch.no_grad():
        main(sys.argv[1:])
