"""Host syncs: every sync the profiler saw is in the prediction, and none extra."""

import os

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def test_host_tensors_copied_to_the_device_are_syncs():
    """``torch.tensor(x, device=...)`` in a forward and a host tensor moved with
    ``type_as`` are host-to-device copies from pageable memory: eager syncs the stream
    for each (``memcpy_and_sync``); a host constant used as a number is not."""
    torch = pytest.importorskip("torch")
    from gpusim import capture, predict

    class M(torch.nn.Module):
        def forward(self, x):
            lo = torch.tensor(-1e4, device=x.device, dtype=x.dtype)     # a copy + sync
            k = torch.tensor(3).type_as(x)                              # a copy + sync
            s = torch.tensor(2.0)                                       # host scalar: none
            return torch.maximum(x, lo) * k / s
    g = capture(M(), (torch.empty(64, 64, device="meta"),))
    assert len(g.meta["syncs"]) == 2
    p = predict(g, gpu="h100")
    assert len(p.timeline.syncs) == 2
    assert p.kernel_count == len(p.kernels) - 2          # copies are memcpys, not kernels
    assert len(predict(g, gpu="h100", mode="compiled").timeline.syncs) == 0


def test_predicted_syncs_equal_the_profilers_on_every_record():
    """The profiler's ``cudaStreamSynchronize`` count per call, on every zoo and held-out
    record of both GPUs (eager, torch.compile, CUDA graphs), against the sync nodes of
    the captured graph (compiled runs have none: Dynamo takes ``is_compiling`` paths and
    makes host-built tensors graph constants)."""
    from validation.score.zoo_accuracy import load_zoo_records, record_graph, zoo_available
    if not zoo_available():
        pytest.skip("zoo extra not installed")
    wrong, n = [], 0
    for gpu in ("h100", "h200"):
        for sub in ("zoo", "holdout"):
            for r in load_zoo_records(os.path.join(ROOT, "validation", "results"), gpu, sub):
                meas = (r.get("host") or {}).get("host_syncs")
                if meas is None:
                    continue
                pred = len(record_graph(r).meta["syncs"]) if r["run"] == "eager" else 0
                n += 1
                if pred != meas:
                    wrong.append(f"{gpu}/{r['case_id']}: {pred} predicted, {meas} measured")
    assert n >= 400
    assert not wrong, "; ".join(wrong)
