"""CI guard on the held-out models (``gpusim.models.zoo.HOLDOUT``): whole-model device time,
kernel count, activation peak and torch.compile's speed-up, predicted from re-captured
graphs against the committed H100 held-out records; never worse than
``validation/holdout_thresholds.json``. These records are a test set: nothing is tuned
on them. Needs the zoo extra."""

import json
import os

import pytest

from validation.records.stats import fail_if_worse, worse_than
from validation.score.zoo_accuracy import zoo_available

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
RESULTS = os.path.join(ROOT, "validation", "results")
THRESHOLDS = os.path.join(ROOT, "validation", "holdout_thresholds.json")

pytestmark = pytest.mark.skipif(not zoo_available(), reason="zoo extra not installed")


@pytest.fixture(scope="module")
def limits():
    with open(THRESHOLDS) as f:
        return {k: v for k, v in json.load(f).items() if not k.startswith("_")}


@pytest.fixture(scope="module")
def reports(limits):
    from validation.score.holdout_accuracy import holdout_report
    return {gpu: holdout_report(RESULTS, gpu) for gpu in limits}


def test_holdout_accuracy_not_worse_than_thresholds(reports, limits):
    worse = []
    for gpu, by in limits.items():
        rep = reports[gpu]
        assert rep["records"] >= by["records"], f"{gpu}: held-out records went missing"
        for run, cats in by["calibrated"].items():
            for cat, lim in cats.items():
                worse += worse_than(rep["calibrated"][run]["all"][cat], lim, f"{gpu} {run} {cat}")
        for run, cats in by["memory"].items():
            for cat, lim in cats.items():
                worse += worse_than(rep["memory"]["summary"][run]["all"][cat], lim,
                                    f"{gpu} {run} memory {cat}")
        sp = rep["speedup"]["summary"]["device"]
        worse += worse_than(sp, by["speedup"]["device"], f"{gpu} compile speed-up")
        if sp["verdict_right"] < by["speedup"]["verdict_right"]:
            worse.append(f"{gpu} compile helps/hurts right {sp['verdict_right']} "
                         f"< threshold {by['speedup']['verdict_right']}")
    fail_if_worse(worse, "held-out accuracy")


def test_every_holdout_record_is_predicted(reports):
    from gpusim.models import zoo
    for gpu, rep in reports.items():
        rows = rep["calibrated"]["rows"]
        assert len(rows) == rep["records"]
        assert all(r["pred_us"] > 0 and r["pred_kernels"] > 0 for r in rows)
        assert {r["model"] for r in rows} == set(zoo.HOLDOUT)      # every held-out model
        assert not {r["model"] for r in rows} & set(zoo.ZOO)
        assert {r["run"] for r in rows} == {"eager", "compiled"}


def test_holdout_markdown_renders_every_table(reports):
    from validation.score.holdout_accuracy import holdout_markdown
    for rep in reports.values():
        md = holdout_markdown(rep)
        assert "| run | peak allocated med / p90 (cases) |" in md
        assert md.count("\n| hf:") + md.count("\n| tv:") + md.count("\n| timm:") >= 60
