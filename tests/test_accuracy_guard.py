"""CI guard: accuracy on the committed GPU records may never get worse.

Recomputes `gpusim accuracy` from ``validation/results/<gpu>/`` (no GPU needed: each
record holds the graph that was measured) and compares with ``validation/thresholds.json``.
Thresholds may only be tightened; records may only be added.
"""

import json
import os

import pytest

from validation.score.accuracy import RESULTS_DIR, accuracy_report
from validation.records.stats import fail_if_worse, worse_than

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
THRESHOLDS = os.path.join(ROOT, "validation", "thresholds.json")
CATS = ("kernel", "device", "end_to_end", "speedup")


@pytest.fixture(scope="module")
def report():
    return accuracy_report(RESULTS_DIR)


def _limits():
    with open(THRESHOLDS) as f:
        th = json.load(f)
    return [(gpu, label, lim) for gpu, by in th.items() if not gpu.startswith("_")
            for label, lim in by.items() if isinstance(lim, dict)]


def test_every_recorded_gpu_has_thresholds(report):
    with open(THRESHOLDS) as f:
        th = json.load(f)
    assert set(report) <= set(th), f"records without thresholds: {set(report) - set(th)}"
    for gpu in th:
        if not gpu.startswith("_"):
            assert report[gpu]["records"] >= th[gpu]["min_records"], (
                f"{gpu}: {report[gpu]['records']} records, fewer than the "
                f"{th[gpu]['min_records']} the thresholds were set on")


@pytest.mark.parametrize("gpu,label,lim", _limits(), ids=lambda x: x if isinstance(x, str) else "")
def test_accuracy_not_worse_than_thresholds(report, gpu, label, lim):
    got = report[gpu][label]
    worse = []
    for c in CATS:
        worse += worse_than(got[c], {s: lim[c][s] for s in ("median", "p90")}, f"{gpu} {label} {c}")
    v = got["verdict_right"]
    frac = v["right"] / (v["right"] + v["wrong"])
    if frac < lim["verdict_right_fraction"] - 1e-9:
        worse.append(f"{gpu} {label} helps/hurts right {frac:.3f} "
                     f"< threshold {lim['verdict_right_fraction']}")
    if got["tau"]["median"] < lim["tau_median"] - 1e-9:
        worse.append(f"{gpu} {label} Kendall tau median {got['tau']['median']:.2f} "
                     f"< threshold {lim['tau_median']}")
    fail_if_worse(worse, "accuracy")
