"""Training-step accuracy on recorded steps: a fast guard.

Three eager steps of the training zoo (validation/results/<gpu>/train.jsonl.gz, measured on
the H100 and the H200): ResNet-50 bf16 (batch 8, AdamW: convolutions' dgrad/wgrad, native
batch norm), BERT-base bf16 (sequence 128, AdamW: bias-gradient column sums, flash
attention) and GPT-2 fp32 (sequence 128, AdamW: fp32 backward GEMMs). Each is captured once
and predicted on both GPUs' calibrated specs; the step's kernel time and its backward's must
stay within the bounds below, each the error measured on 2026-11-25 (after the backward
classes of validation/fit/fit_train.py) plus 5 points. A regression in the training classes, the
backward dispatch or the optimizer law shows here in under a minute; the full score is
``python3 -m validation.score.train_accuracy``.
"""

from __future__ import annotations

import os

import pytest

from gpusim import predict
from gpusim.hw.spec import spec_for
from validation.records.store import read_records

RESULTS = os.path.join(os.path.dirname(__file__), "..", "validation", "results")

#: case -> (GPU -> (step, backward) bound in absolute % error of the kernel time)
BOUNDS = {      # measured 2026-11-25 (step, backward): H100 6.3, 7.8; H200 8.5, 9.4
    "tv:resnet50__batch8_hw224__bf16__adamw__eager": {"h100": (11.3, 12.8), "h200": (13.5, 14.4)},
    # H100 6.7, 17.8; H200 8.7, 21.3
    "hf:bert-base__batch8_seq128__bf16__adamw__eager": {"h100": (11.7, 22.8), "h200": (13.7, 26.3)},
    # H100 2.1, 2.7; H200 2.3, 3.0
    "hf:gpt2__batch8_seq128__fp32__adamw__eager": {"h100": (7.1, 7.7), "h200": (7.3, 8.0)},
}


def _records(gpu: str) -> dict:
    return {r["case_id"]: r for r in read_records(os.path.join(RESULTS, gpu, "train.jsonl.gz"))
            if r.get("case_id") in BOUNDS}


@pytest.fixture(scope="module")
def steps():
    """Each case's captured step (once: 5-15 s a capture) and its records per GPU."""
    from validation.fit.fit_train import step_graph
    recs = {gpu: _records(gpu) for gpu in ("h100", "h200")}
    return {case: (step_graph(recs["h100"][case]), {gpu: recs[gpu][case] for gpu in recs})
            for case in BOUNDS}


@pytest.mark.parametrize("case", sorted(BOUNDS))
def test_training_step_within_its_bound(steps, case):
    graph, recs = steps[case]
    for gpu, (step_bound, bwd_bound) in BOUNDS[case].items():
        rec = recs[gpu]
        p = predict(graph, gpu=spec_for(gpu))
        step = abs(float(p.device_us) / rec["kernel_sum_us"] - 1) * 100
        bwd = abs(float(p.train["phases"]["backward"]["device_us"])
                  / rec["phases"]["backward"]["kernel_sum_us"] - 1) * 100
        assert step <= step_bound, f"{gpu} {case}: step kernel time off by {step:.1f}% (bound {step_bound}%)"
        assert bwd <= bwd_bound, f"{gpu} {case}: backward kernel time off by {bwd:.1f}% (bound {bwd_bound}%)"
