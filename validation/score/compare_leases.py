"""How much do measurements move between leases of the same GPU machine kind?

Compares the archived first H200 record set (leases 1-2) with the current one (one
lease) case by case, and prints the host-side calibration of each lease from the
committed spec files. Numbers quoted in the README come from this script.

    python validation/score/compare_leases.py
"""

import os

import numpy as np

import tomllib

from gpusim.hw.spec import load_spec
from validation.score.accuracy import _device_measured
from validation.records.store import read_records

HERE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OLD = os.path.join(HERE, "archive", "h200-leases-1-2")
NEW = os.path.join(HERE, "results", "h200")
SPECS = [("lease 2", os.path.join(OLD, "h200-sxm-calibrated-lease2.toml")),
         ("lease 3", os.path.join(HERE, "archive", "h200-sxm-calibrated-lease3.toml")),
         ("lease 4 (current records)", "h200-sxm-calibrated")]
HOSTS = {"h200-sxm-calibrated": os.path.join(HERE, "..", "hosts", "h200-sxm-host.toml")}


def host_figure(spec: str, key: str) -> float:
    """A host figure of an archived spec's [host] section (a plain number), or of the
    current spec's host profile (an inline table)."""
    with open(HOSTS.get(spec, spec), "rb") as f:
        v = tomllib.load(f)["host"][key]
    return v["value"] if isinstance(v, dict) else v


def main():
    dev, wall = [], []
    old_by_case = {r["case"]: r for r in read_records(os.path.join(OLD, "classic.jsonl.gz"))}
    for rec in read_records(os.path.join(NEW, "classic.jsonl.gz")):
        if rec["case"] not in old_by_case:
            continue
        new, old = rec["runs"], old_by_case[rec["case"]]["runs"]
        for run in ("eager", "compiled"):
            if run in new and run in old:
                dev.append(_device_measured(new[run]) / _device_measured(old[run]) - 1)
                wall.append(new[run]["wall"]["median_us"] / old[run]["wall"]["median_us"] - 1)
    for label, x in (("device time", np.abs(dev)), ("wall time", np.abs(wall))):
        print(f"{label:12s} n={len(x)}  |difference| median {np.median(x) * 100:.1f}%  "
              f"p90 {np.percentile(x, 90) * 100:.1f}%")
    print()
    print(f"{'calibration':28s} {'eager op us':>11s} {'region us':>9s} {'mem eff':>8s} {'min kernel us':>13s}")
    for label, spec in SPECS:
        s = load_spec(spec)
        print(f"{label:28s} {host_figure(spec, 'eager_op_us'):11.1f} "
              f"{host_figure(spec, 'compiled_region_us'):9.1f} "
              f"{s.mem_efficiency:8.3f} {s.kernel_min_us:13.2f}")


if __name__ == "__main__":
    main()
