"""exact against greedy and bytes on every built-in classic: predicted compiled-mode
time of each partition on the H100 spec (the README table).

    python benchmarks/exact_vs_heuristics.py
"""

from gpusim.capture.tracing import capture
from gpusim.models.examples import EXAMPLES, build_example
from gpusim.lower.partition import Partition
from gpusim.fusion.scoring import Scorer
from gpusim.fusion.search import exact, fold_conv_bn, greedy


def main():
    print("| example | ops | unfused | bytes | greedy | exact | exact groups |")
    print("|---|---|---|---|---|---|---|")
    for name, ex in EXAMPLES.items():
        if ex.category != "classic":
            continue
        fn, args = build_example(name, device="meta")
        g, _ = fold_conv_bn(capture(fn, args, name=name))
        sc = Scorer(g, __import__("gpusim.hw.spec", fromlist=["x"]).load_spec("h100"), "compiled")
        single = sc.cost(Partition.singletons(g))
        b = sc.cost(greedy(g, sc, "bytes"))
        gr = sc.cost(greedy(g, sc, "time"))
        pe, opt, over, _ = exact(g, sc)
        e = sc.cost(pe)
        assert e <= min(b, gr) + 1e-9, name
        print(f"| {name} | {len(g.compute_nodes)} | {single:.1f} | {b:.1f} | {gr:.1f} | {e:.1f} | "
              f"{len(pe)}{'' if opt else ' (not proven)'} |")


if __name__ == "__main__":
    main()
