"""How fast ``gpusim predict`` answers: the command's wall time, and capture + predict per model.

Targets (issue 24): ``gpusim predict`` (the default example) under 3 s wall; capture plus
predict under 2 s median per model, on the 2-core development machine.

1. The command, each started ``--runs`` times as a fresh process (``python -m gpusim predict
   [MODEL]``): median wall seconds and median CPU seconds (the child's user + system, which
   moves less than wall on a shared machine). Two floors no capture can go under, timed
   the same way: ``import torch``, and ``import torch`` plus ``make_fx`` of ``x + 1`` (make_fx
   imports ``torch._inductor.config`` and ``torch._dynamo`` on every call, tracing or not).
2. In one process, per model: build, capture, predict (eager) and the other two modes
   (the ``fastest`` line), in seconds. The first model of each library pays its import
   (torchvision, timm, transformers; ``*`` marks it); the median is over every model.

Not a test: timings on a shared machine are noisy. Quote the medians with the machine's load.

    python benchmarks/cli_speed.py [--runs 5] [--skip-cli] [--skip-models] [MODEL ...]
"""

import argparse
import os
import resource
import statistics
import subprocess
import sys
import time

CLI_MODELS = ["", "tv:resnet50", "timm:resnet50d", "hf:bert-base"]    # "": the default example
FLOORS = {
    "import torch": "import torch",
    "import torch + make_fx": "import torch\nfrom torch.fx.experimental.proxy_tensor import "
                              "make_fx\nmake_fx(lambda x: x + 1)(torch.ones(2))",
}


def timed_run(cmd: list[str]) -> tuple[float, float]:
    """``(wall s, CPU s)`` of one run of ``cmd`` (its output thrown away); raises on failure."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True)
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def medians(cmd: list[str], runs: int) -> tuple[float, float, float, float]:
    """Median and max wall, median and max CPU over ``runs`` runs after one warm-up run."""
    timed_run(cmd)      # warm the file cache
    walls, cpus = zip(*(timed_run(cmd) for _ in range(runs)))
    return statistics.median(walls), max(walls), statistics.median(cpus), max(cpus)


def cli_part(runs: int) -> None:
    print(f"## the command, {runs} runs each (median, max); load average before: "
          f"{os.getloadavg()[0]:.1f} on {os.cpu_count()} cores")
    print(f"{'command':40s} {'wall s':>7s} {'max':>6s} {'cpu s':>7s} {'max':>6s}")
    rows = [(label, [sys.executable, "-c", code]) for label, code in FLOORS.items()]
    rows += [(f"gpusim predict {m}".rstrip(), [sys.executable, "-m", "gpusim", "predict"]
              + ([m] if m else [])) for m in CLI_MODELS]
    for label, cmd in rows:
        w, wmax, c, cmax = medians(cmd, runs)
        print(f"{label:40s} {w:7.2f} {wmax:6.2f} {c:7.2f} {cmax:6.2f}", flush=True)
    print(f"load average after: {os.getloadavg()[0]:.1f}")


def model_part(names: list[str]) -> None:
    import torch

    from gpusim.models import zoo
    from gpusim.capture.tracing import capture
    from gpusim.models.examples import EXAMPLES
    from gpusim.models.resolve import load_model
    from gpusim.predict.pipeline import modes_by_speed, predict

    names = names or list(EXAMPLES) + list(zoo.ZOO)
    print(f"\n## capture + predict in one process (defaults, float32, H100); load average "
          f"{os.getloadavg()[0]:.1f}")
    print(f"{'model':30s} {'build':>6s} {'capture':>8s} {'predict':>8s} {'modes':>6s} "
          f"{'total s':>8s}  kernels")
    totals, libs = [], set()
    for name in names:
        lib = name.split(":")[0] if ":" in name else None
        first = lib is not None and lib not in libs
        libs.add(lib)
        t0 = time.perf_counter()
        fn, args, label = load_model(name)
        t1 = time.perf_counter()
        g = capture(fn, args, name=label)
        t2 = time.perf_counter()
        p = predict(g, gpu="h100", mode="eager")
        t3 = time.perf_counter()
        modes_by_speed(g, "h100", have=p)
        t4 = time.perf_counter()
        totals.append(t4 - t0)
        mark = "*" if first else " "
        print(f"{name + mark:30s} {t1 - t0:6.2f} {t2 - t1:8.2f} {t3 - t2:8.3f} {t4 - t3:6.3f} "
              f"{t4 - t0:8.2f}  {len(p.kernels)}", flush=True)
    print(f"median {statistics.median(totals):.2f} s, max {max(totals):.2f} s over {len(totals)} "
          f"models (target median < 2 s; * pays its library's import; "
          f"{torch.get_num_threads()} torch threads)")


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--skip-cli", action="store_true")
    ap.add_argument("--skip-models", action="store_true")
    ap.add_argument("names", nargs="*", help="models for part 2 (default: every example and "
                    "zoo model)")
    a = ap.parse_args(argv)
    if not a.skip_cli:
        cli_part(a.runs)
    if not a.skip_models:
        import torch
        with torch.no_grad():
            model_part(a.names)


if __name__ == "__main__":
    main()
