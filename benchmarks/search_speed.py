"""Search time and predicted speed-up on whole models (issue #3 targets: GPT-2 small and
ResNet-50 under 5 s each for greedy and auto, the 7B decoder under 30 s for greedy, on a
2-core machine).

    python benchmarks/search_speed.py
"""

import time

from gpusim.capture.tracing import capture
from gpusim.models.examples import build_example
from gpusim.fusion.search import search

CASES = [("gpt2", ["greedy", "auto"]), ("resnet50", ["greedy", "auto"]), ("llama7b", ["greedy"])]


def main():
    print(f"{'model':10s} {'algo':12s} {'nodes':>6s} {'kernels':>13s} {'search s':>9s} "
          f"{'speed-up dev':>12s} {'speed-up e2e':>12s}")
    for name, algos in CASES:
        fn, args = build_example(name, device="meta")
        g = capture(fn, args, name=name)
        for algo in algos:
            t0 = time.perf_counter()
            r = search(g, gpu="h100", mode="compiled", algo=algo)
            dt = time.perf_counter() - t0
            print(f"{name:10s} {r.algo:12s} {len(g.compute_nodes):6d} "
                  f"{len(r.unfused.kernels):6d}->{len(r.fused.kernels):<6d} {dt:9.2f} "
                  f"{r.speedup_device:11.2f}x {r.speedup_end_to_end:11.2f}x")


if __name__ == "__main__":
    main()
