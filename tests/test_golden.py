"""Behaviour unchanged: the golden predictions (validation/golden_predictions.json, written by
``python3 -m validation.score.golden`` from the code before the stage packages, commit c1cb240)
re-predicted through the front door are byte-identical, figure by figure."""

import json
from pathlib import Path

import pytest
import torch

from validation.score.golden import golden

GOLDEN = Path(__file__).resolve().parents[1] / "validation" / "golden_predictions.json"


@pytest.fixture(scope="module")
def stored():
    doc = json.loads(GOLDEN.read_text())
    if doc["torch"] != torch.__version__.split("+")[0]:
        pytest.skip(f"golden predictions were captured with torch {doc['torch']}")
    return doc["cases"]


def test_golden_predictions_identical(stored):
    now = golden()
    assert sorted(now) == sorted(stored)
    changed = [k for k in stored if now[k] != stored[k]]
    assert not changed, f"{len(changed)} of {len(stored)} cases changed, first: {changed[:5]}"
