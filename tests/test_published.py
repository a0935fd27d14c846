"""Published whole-model measurements (validation/published/): rows load with their
source, and a row is scored through the same zoo build -> capture -> predict path."""

import pytest

from validation.published import load_rows, markdown, predict_row, summary


def test_rows_name_their_source_and_are_device_bound():
    rows = load_rows()
    assert len(rows) >= 100
    for r in rows:
        assert r["source"].startswith(("huggingface/pytorch-image-models@", "NVIDIA/DeepLearningExamples@"))
        # large batches and steps of 10 ms or more (the host side: the next test)
        assert r["batch"] >= 32 and r["step_ms"] >= 10
    assert {r["gpu"] for r in rows} >= {"rtx3090"}


def test_scored_rows_are_device_bound():
    """Every scored row's step is longer than the reference host needs to issue its
    kernels (kernel count x the measured wall per eager op), so the published time is
    the GPU's, which is what the scores compare with gpusim's device time."""
    import json
    import os

    from gpusim.host import load_host
    from validation.published import HERE
    per_op_ms = load_host("reference").eager_op_us / 1e3
    with open(os.path.join(HERE, "scores.json")) as f:
        rows = [r for r in json.load(f)["rows"] if "kernels" in r]
    assert len(rows) >= 150
    for r in rows:
        assert r["kernels"] * per_op_ms < r["step_ms"], (r["gpu"], r["model"], r["batch"])


def test_one_row_is_predicted_and_summarised():
    pytest.importorskip("timm")
    r = next(r for r in load_rows(["rtx3090"]) if r["model"] == "timm:seresnet18" and r["layout"] == "nchw")
    p = predict_row(r)
    assert p["pred_ms"] > 0 and p["kernels"] > 20
    s = summary([p])
    assert s["rtx3090 nchw"]["all"]["n"] == 1
    assert "seresnet18" not in markdown(s) and "rtx3090" in markdown(s)
