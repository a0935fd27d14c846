"""Published whole-model measurements (validation/published/): rows load with their
source, and a row is scored through the same zoo build -> capture -> predict path."""

import pytest

from validation.published import load_rows, markdown, predict_row, summary


def test_rows_name_their_source_and_are_device_bound():
    rows = load_rows()
    assert len(rows) >= 100
    for r in rows:
        assert r["source"].startswith(("huggingface/pytorch-image-models@", "NVIDIA/DeepLearningExamples@"))
        # large batches, steps of 40 ms or more: the GPU is the bottleneck, not the host
        assert r["batch"] >= 32 and r["step_ms"] >= 40
    assert {r["gpu"] for r in rows} >= {"rtx3090"}


def test_one_row_is_predicted_and_summarised():
    pytest.importorskip("timm")
    r = next(r for r in load_rows(["rtx3090"]) if r["model"] == "timm:seresnet18" and r["layout"] == "nchw")
    p = predict_row(r)
    assert p["pred_ms"] > 0 and p["kernels"] > 20
    s = summary([p])
    assert s["rtx3090 nchw"]["all"]["n"] == 1
    assert "seresnet18" not in markdown(s) and "rtx3090" in markdown(s)
