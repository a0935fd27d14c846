"""The decode-step kernel-class sweep's code (validation/measure/decode_classes.py), dry-run on the CPU."""

import json

import torch

from validation.measure import decode_classes


def test_points_cover_each_class_at_decode_rows():
    ps = decode_classes.points()
    by = {}
    for p in ps:
        by.setdefault(p["case"], []).append(p)
    assert set(by) == {"rmsnorm", "layernorm", "rope", "kv_cat"}
    assert min(p["rows"] for p in by["rmsnorm"]) == 1 and max(p["rows"] for p in by["rmsnorm"]) == 128
    assert {p["state"] for p in by["kv_cat"]} == {"warm", "cold"}
    assert len(ps) < 140                     # ~1 s a point on an H200: within the ~3 min of a request


def test_each_case_computes_what_the_model_does():
    p = {"case": "kv_cat", "B": 2, "Hk": 3, "D": 4, "S": 5, "state": "cold"}
    fn, args = decode_classes.make(p, "cpu")
    assert fn(*args).shape == (2, 3, 6, 4)
    p = {"case": "rope", "B": 2, "H": 3, "D": 8}
    assert decode_classes.make(p, "cpu")[0]().shape == (2, 3, 1, 8)
    p = {"case": "rmsnorm", "rows": 3, "cols": 16}
    out = decode_classes.make(p, "cpu")[0]()
    assert out.shape == (3, 16) and out.dtype == torch.bfloat16


def test_dry_run_writes_every_point(tmp_path):
    out = tmp_path / "d.jsonl"
    assert decode_classes.main(["--out", str(out), "--device", "cpu", "--reps", "1"]) == 0
    lines = [json.loads(x) for x in out.read_text().splitlines()]
    assert lines[0]["kind"] == "environment" and lines[-1]["kind"] == "summary"
    pts = [x for x in lines if x["kind"] == "decode_class"]
    assert len(pts) == 5 and not any("failed" in x for x in pts)


def test_skinny_bias_set_pairs_biased_products_with_unbiased_rows_between():
    from validation.measure import skinny_gemm
    cs = skinny_gemm.cases("bias")
    assert {c["M"] for c in cs if c["bias"]} == {1, 2, 4, 8, 16}
    assert any(not c["bias"] and (c["N"], c["K"]) == (2048, 8192) and c["M"] == 4 for c in cs)
    assert len(skinny_gemm.cases()) == 94          # the default set is the one validation/results/h200 holds
