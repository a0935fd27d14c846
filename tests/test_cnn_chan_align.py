"""The misaligned-channel 1x1 convolution sweep (validation/measure/cnn_chan_align.py): its CPU dry run, and what the
recorded H200 sweep (validation/results/h200/cnn_chan_align.jsonl) says cuDNN runs, the data of a dispatch rule
not yet written (issue 35 note)."""

from __future__ import annotations

import json
import os

from validation.measure import cnn_chan_align

SWEEP = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "validation", "results", "h200",
                     "cnn_chan_align.jsonl")


def test_sweep_dry_run_on_the_cpu(tmp_path):
    out = tmp_path / "c.jsonl"
    assert cnn_chan_align.main(["--out", str(out), "--device", "cpu", "--reps", "1"]) == 0
    recs = [json.loads(line) for line in out.read_text().splitlines()]
    assert recs[0]["kind"] == "environment" and recs[-1]["kind"] == "summary"
    assert len([r for r in recs if r.get("kind") == "cnn_chan_align"]) == len(cnn_chan_align.points(small=True))


def test_recorded_sweep_runs_cuda_core_kernels_only_in_16_bit_at_batch_16_and_up():
    """cuDNN's CUDA-core ``implicit_convolve_sgemm`` ran 118 of the 1,176 points: 16-bit only, batch 16 and 32 only,
    on maps of 7-20 px, never at 176-244 channels (where cuBLAS's kernels run)."""
    with open(SWEEP) as f:
        rows = [r for r in map(json.loads, f) if r.get("kind") == "cnn_chan_align" and not r.get("failed")]
    assert len(rows) == 1176
    sgemm = [r for r in rows if any("implicit_convolve_sgemm" in k["name"] for k in r["kernels"])]
    assert len(sgemm) == 118
    assert {r["dtype"] for r in sgemm} == {"float16", "bfloat16"}
    assert {r["N"] for r in sgemm} == {16, 32} and max(r["HW"] for r in sgemm) <= 20
    assert max(r["Cin"] for r in sgemm) < 176


def test_recorded_warm_points_run_faster_than_cold():
    """The warm set (``--set warm``: the input written by the kernel before, L2-resident) runs the same CUDA-core kernel
    at 0.78x its cold time (median of 118 pairs); in-model, ShuffleNetV2's run 0.73-0.88x the cold sweep's."""
    with open(SWEEP) as f:
        cold = {tuple(r[k] for k in ("N", "Cin", "Cout", "HW", "dtype")): r for r in map(json.loads, f)
                if r.get("kind") == "cnn_chan_align"}
    with open(SWEEP.replace(".jsonl", "_warm.jsonl")) as f:
        warm = [r for r in map(json.loads, f) if r.get("kind") == "cnn_chan_align"]
    assert len(warm) == 224 and all(r["warm"] for r in warm)

    def us(r):
        return sum(k["us"] for k in r["kernels"] if "implicit_convolve_sgemm" in k["name"])
    ratios = sorted(us(r) / us(c) for r in warm
                    if (c := cold[tuple(r[k] for k in ("N", "Cin", "Cout", "HW", "dtype"))]) and us(r) and us(c))
    assert len(ratios) == 118 and 0.7 < ratios[len(ratios) // 2] < 0.86
