"""The order the datasheets imply (issue #22): eager device time on the datasheet specs
falls from the V100 to the A100, H100 and H200 where the GPU bounds the run; at batch 1
(latency-bound) the one documented exception is the H100 <-> H200 pair, whose datasheet
specs each carry the other Hopper's measured floors (docs/model.md)."""

import pytest

from validation.score.gpu_order import ORDER, check

pytest.importorskip("torchvision")          # the zoo extra


@pytest.mark.parametrize("model,sizes,dtype", [
    ("tv:resnet50", {"batch": 32, "hw": 224}, "float16"),
    ("tv:vit_b_16", {"batch": 32, "hw": 224}, "bfloat16"),
])
def test_device_bound_runs_keep_the_datasheet_order(model, sizes, dtype):
    r = check(model, sizes, dtype)
    assert r["out_of_order"] == [], r["us"]
    # every step is a real gain where the GPU bounds the run (H100 -> H200: bandwidth only)
    us = [r["us"][g] for g in ORDER]
    assert all(b < a * 0.97 for a, b in zip(us, us[1:])), r["us"]


def test_latency_bound_exception_is_only_the_hopper_pair_and_small():
    r = check("tv:resnet18", {"batch": 1, "hw": 224}, "float16")
    us = r["us"]
    assert us["v100"] > us["a100"] * 1.01 > us["h100"] * 1.01
    assert abs(us["h200"] - us["h100"]) / us["h100"] < 0.05, us
    assert set(r["out_of_order"]) <= {("h100", "h200")}, r["out_of_order"]
