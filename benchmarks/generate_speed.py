"""How fast ``gpusim generate`` answers for a 7B decoder (issue 34: target < 10 s on the 2-core
development machine).

Each command is started ``--runs`` times as a fresh process; prints median wall seconds and
median CPU seconds (the child's user + system: it moves less than wall on a shared machine),
and the load average. The commands:

* ``gpusim generate hf:mistral-7b --batch 8 --prompt 512 --new 256``: the zoo's Mistral-7B
  (its real width, 4 of its 32 layers), both paths side by side (dynamic eager, static
  compiled): 8 captures (two prefills, generate's tail, 3 + 2 decode steps);
* the same with ``--cache static`` (one path: 4 captures);
* ``benchmarks/mistral_7b_full.py:model``, Mistral-7B at all 32 layers, ``--cache static``;
* the same model, both paths (the default command, issue 34's target);
* ``benchmarks/llama_8b_full.py:model``, Llama-3.1-8B at all 32 layers, both paths.

Not a test: timings on a shared machine are noisy.

    python benchmarks/generate_speed.py [--runs 3] [--skip-full]
"""

import argparse
import os
import resource
import statistics
import subprocess
import sys
import time

BASE = ["generate", "hf:mistral-7b", "--batch", "8", "--prompt", "512", "--new", "256"]
HERE = os.path.dirname(os.path.abspath(__file__))
SIZES = ["--batch", "8", "--prompt", "512", "--new", "256", "--gpu", "h100"]
FULL_BOTH = ["generate", os.path.join(HERE, "mistral_7b_full.py") + ":model"] + SIZES
FULL = FULL_BOTH + ["--cache", "static"]
LLAMA_BOTH = ["generate", os.path.join(HERE, "llama_8b_full.py") + ":model"] + SIZES


def timed_run(cmd: list[str]) -> tuple[float, float]:
    """``(wall s, CPU s)`` of one run of ``cmd`` (its output thrown away); raises on failure."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True)
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--skip-full", action="store_true")
    a = ap.parse_args(argv)
    cases = [("both paths", BASE), ("--cache static", BASE + ["--cache", "static"])]
    if not a.skip_full:
        cases += [("32 layers, --cache static", FULL), ("32 layers, both paths", FULL_BOTH),
                  ("32 layers, both paths", LLAMA_BOTH)]
    print(f"load average before: {os.getloadavg()[0]:.1f}")
    print(f"{'command':60s} {'wall s':>7s} {'cpu s':>7s}")
    for label, args in cases:
        runs = [timed_run([sys.executable, "-m", "gpusim"] + args) for _ in range(a.runs)]
        print(f"{'gpusim ' + ' '.join(args[:2]) + ' ... ' + label:60s} "
              f"{statistics.median(r[0] for r in runs):7.2f} {statistics.median(r[1] for r in runs):7.2f}")
    print(f"load average after: {os.getloadavg()[0]:.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
