"""The decode-attention sweep's code (validation/measure/sdpa_decode.py), dry-run on the CPU."""

import json

import torch

from validation.measure import sdpa_decode


def test_points_cover_the_static_paths_layouts():
    ps = sdpa_decode.points()
    assert len(ps) == 2 * 3 * 3 * 3 * 2
    assert {(p["kv"], p["KV"] == 1) for p in ps} == {("view", True), ("copy", False)}
    assert {p["mask"] for p in ps} == {"none", "bias"}


def test_mqa_keys_are_a_stride0_view_and_the_bias_masks_a_quarter():
    p = dict(sdpa_decode.points(small=True)[1])
    fn, (q, k, v) = sdpa_decode.make(p, "cpu")
    assert k.stride(1) == 0 and q.shape == (1, 2, 1, 8)
    out = fn(q, k, v)
    # with the bias, the output is the softmax over the first three quarters of the keys only
    ref = torch.nn.functional.scaled_dot_product_attention(q, k[:, :, :12], v[:, :, :12])
    assert torch.allclose(out, ref, atol=1e-2)


def test_dry_run_writes_every_point(tmp_path):
    out = tmp_path / "d.jsonl"
    assert sdpa_decode.main(["--out", str(out), "--device", "cpu", "--reps", "1"]) == 0
    lines = [json.loads(x) for x in out.read_text().splitlines()]
    assert lines[0]["kind"] == "environment" and lines[-1]["kind"] == "summary"
    pts = [x for x in lines if x["kind"] == "sdpa_decode"]
    assert len(pts) == 4 and not any("failed" in x for x in pts)
