"""validation.score.dist_overlap: compute kernels beside resident NCCL kernels, on the DDP step records."""

import statistics

from validation.score import dist_overlap as D


def _k(name, ts, dur):
    return {"name": name, "ts_us": ts, "dur_us": dur}


def test_synthetic_record_measures_the_slowdown_under_nccl():
    one = {"kernels": [_k("a", 0, 10), _k("b", 10, 10), _k("c", 20, 10)]}
    rec = {"case": "x", "world": 2, "step_ms": {"median": 1.0},
           "kernels": [_k("a", 0, 10), _k("ncclDevKernel_AllReduce", 9, 40), _k("b", 10, 20), _k("c", 60, 10)]}
    r = D.overlap_row(rec, one)
    assert r["under_ratio"] == 2.0 and r["under_kernels"] == 1
    assert r["rest_ratio"] == 1.0 and r["rest_kernels"] == 1     # "a" is partly overlapped: neither
    assert r["nccl_resident_ms"] == 0.04
    assert D.overlap_row(rec, {"kernels": one["kernels"][:2]}) is None


def test_records_show_the_slowdown_only_under_nccl():
    rows = D.rows()
    assert len(rows) >= 8 and {r["case"] for r in rows} == {"ddp_resnet50", "ddp_gpt2"}
    under = [r["under_ratio"] for r in rows if r["under_w1_ms"] > 1.0]
    assert 1.1 < statistics.median(under) < 1.3
    assert all(0.99 < r["rest_ratio"] < 1.01 for r in rows)
