"""CI guard on the real-model zoo: whole-model device time and kernel count, predicted
from re-captured zoo graphs, against the committed H100 records; never worse than
``validation/zoo_thresholds.json``. Needs the zoo extra."""

import json
import os

import pytest

from validation.records.stats import fail_if_worse, worse_than
from validation.score.zoo_accuracy import zoo_available, zoo_report

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
RESULTS = os.path.join(ROOT, "validation", "results")
THRESHOLDS = os.path.join(ROOT, "validation", "zoo_thresholds.json")

pytestmark = pytest.mark.skipif(not zoo_available(), reason="zoo extra not installed")


@pytest.fixture(scope="module")
def limits():
    with open(THRESHOLDS) as f:
        return {k: v for k, v in json.load(f).items() if not k.startswith("_")}


@pytest.fixture(scope="module")
def report(limits):
    return zoo_report(RESULTS, sorted(limits))


def test_zoo_accuracy_not_worse_than_thresholds(report, limits):
    worse = []
    for gpu, by in limits.items():
        assert report[gpu]["records"] >= by["records"], f"{gpu}: records went missing"
        for label, runs in by.items():
            if label == "records":
                continue
            for run, cats in runs.items():
                for cat, stats in cats.items():
                    worse += worse_than(report[gpu][label][run]["all"][cat], stats,
                                        f"{gpu} {label} {run} {cat}")
    fail_if_worse(worse, "zoo accuracy")


def test_every_zoo_record_is_predicted(report):
    for gpu, e in report.items():
        rows = e["calibrated"]["rows"] if "calibrated" in e else e["datasheet"]["rows"]
        assert len(rows) == e["records"]
        assert all(r["pred_us"] > 0 and r["pred_kernels"] > 0 for r in rows)


def test_every_compiled_record_has_end_to_end_rows_on_its_lease(report):
    for gpu, e in report.items():
        comp = [r for r in e["calibrated"]["rows"] if r["run"] != "eager"]
        rows = e["e2e"]["rows"]
        # each compiled / reduce-overhead record, plus the eager run measured beside each
        # compiled one, predicted with a host calibration of its own lease
        assert len(rows) == len(comp) + sum(r["run"] == "compiled" for r in comp)
        assert all(r["lease"] and r["pred_us"] > 0 and r["meas_us"] > 0 for r in rows)


def test_every_host_lease_wall_is_predicted(report):
    """Each host lease's walls (validation/device_host.sh: every zoo model, default and
    large) get an eager prediction with that lease's calibration, with its reference
    forwards re-fitted beside the case, and without the forward factor."""
    for gpu, e in report.items():
        rows = (e.get("host_leases") or {}).get("rows", [])
        assert len(rows) >= 56, f"{gpu}: host-lease walls went missing"
        for r in rows:
            # the host may run a case faster than its tight loops (one H100 case: 0.998)
            assert 0.5 < r["case_factor"] < 5.0 and 1.0 < r["lease_factor"] < 3.0
            # a larger factor never makes a forward faster
            lo, hi = sorted([(r["case_factor"], r["pred_case_us"]), (1.0, r["pred_flat_us"]),
                             (r["lease_factor"], r["pred_us"])])[::2]
            assert hi[1] >= lo[1] - 1e-6
