"""The after-a-convolution law (gpusim.cost.sequence) and its fit on the chain sweep
(validation/fit/fit_chain.py), on synthetic records with a planted extra."""

import dataclasses
import json

import pytest

from gpusim.cost.kernel import estimate_kernel
from gpusim.cost.sequence import after_conv, after_conv_extra_us
from gpusim.hw.spec import load_spec
from gpusim.predict.pipeline import lower
from validation.fit import fit_chain

SPEC = dataclasses.replace(load_spec("h200-sxm-calibrated"), after_conv_us=None, after_conv_bytes=None)
#: a measured kernel name per predicted kernel class (as the profiler names them)
NAMES = {"conv": "sm90_xmma_fprop_implicit_gemm_f32f32", "layout": "cudnn::nchwToNhwcKernel",
         "bn": "cudnn::bn_fw_inf_1C11_kernel_NCHW", "aux": "unrolled_elementwise_kernel direct_copy_kernel_cuda",
         "pw": "vectorized_elementwise_kernel<4, MulFunctor>"}


def _name(g, k):
    a = g.g.nodes[k.ops[0]]
    if k.role == "aux":
        return NAMES["layout"] if a["kind"] == "conv" else NAMES["aux"]
    return {"conv": NAMES["conv"], "norm": NAMES["bn"]}.get(a["kind"], NAMES["pw"])


def _records(extra_us: float) -> list[dict]:
    recs = []
    for chain in ("cbr", "cbar", "bnr"):
        for n in (1, 8):
            for dt in ("float32", "bfloat16"):
                p = {"kind": "cnn_chain", "chain": chain, "N": n, "C": 64, "HW": 14, "dtype": dt, "layout": "nchw"}
                g = fit_chain.chain_graph(p)
                ks = lower(g, "eager", spec=SPEC).kernels
                names = [_name(g, k) for k in ks]
                us = [estimate_kernel(g, k, SPEC).us for k in ks]
                gap = [{"name": nm, "us": u} for nm, u in zip(names, us)]
                chain_k = [{"name": nm, "us": u + (extra_us if i and names[i - 1] == NAMES["conv"] else 0.0)}
                           for i, (nm, u) in enumerate(zip(names, us))]
                spins = [{"name": "spin_kernel", "us": 25.0}] * len(gap)
                recs.append(dict(p, kernels=chain_k, gap=[x for pair in zip(spins, gap) for x in pair][1:]))
    return recs


def test_no_figure_leaves_every_estimate_alone():
    g = fit_chain.chain_graph({"chain": "cbr", "N": 2, "C": 64, "HW": 14, "dtype": "float32", "layout": "nchw"})
    est = [estimate_kernel(g, k, SPEC) for k in lower(g, "eager", spec=SPEC).kernels]
    assert after_conv(est, SPEC) == est


def test_only_a_memory_bound_kernel_after_a_convolution_pays_and_the_taper_ends_it():
    spec = dataclasses.replace(SPEC, after_conv_us=1.0, after_conv_bytes=8e6)
    g = fit_chain.chain_graph({"chain": "cbr", "N": 2, "C": 64, "HW": 14, "dtype": "float32", "layout": "nchw"})
    est = [estimate_kernel(g, k, spec) for k in lower(g, "eager", spec=spec).kernels]
    out = after_conv(est, spec)
    for i, (a, b) in enumerate(zip(est, out)):
        follows = i > 0 and est[i - 1].kind == "conv" and est[i - 1].role == "main"
        if follows and a.kind != "conv":
            assert b.us == pytest.approx(a.us + 1.0 * (1 - a.bytes / 8e6))
        else:
            assert b.us == a.us
    assert any(b.us > a.us for a, b in zip(est, out))
    big = dataclasses.replace(est[-1], bytes_read=8e6, bytes_written=8e6)
    assert after_conv_extra_us(big, spec) == 0.0


def test_fit_recovers_a_planted_extra(tmp_path, capsys):
    path = tmp_path / "cnn_chain.jsonl"
    recs = _records(0.8)
    path.write_text("\n".join(json.dumps(r) for r in [{"kind": "environment", "gpu_name": "test"}] + recs) + "\n")
    rows, _ = fit_chain.kernel_rows(recs, SPEC)
    assert {r["after"] for r in rows} == {"lib", "mem"}
    assert all(r["extra"] == pytest.approx(0.8 if r["after"] == "lib" else 0.0) for r in rows)
    us, span, rms = fit_chain.fit(rows)
    assert us == pytest.approx(0.8) and span is None and rms < 1e-9
    assert fit_chain.main(["--gpu", "h200", "--sweep", str(path)]) == 0
    assert "after_conv_us = { value = 0.800" in capsys.readouterr().out


def test_predecessor_table_splits_by_the_kernel_before():
    from validation.reports.cnn_predecessor import table
    rs = [{"cls": "bn_cudnn", "after": "lib", "bytes": 5e5, "meas": 2.0, "pred": 1.0},
          {"cls": "bn_cudnn", "after": "mem", "bytes": 5e5, "meas": 1.2, "pred": 1.0}]
    t = table(rs, 100.0)
    assert "| bn_cudnn | lib | 64 kB-1 MB | 1 | 2 | 1 | 0.50 | +1.00 |" in t
    assert "| all | mem | all | 1 |" in t and "+1.0% of the measured total" in t


def test_a_kernel_after_a_matmul_keeps_its_price():
    import torch
    from gpusim.capture.tracing import capture
    spec = dataclasses.replace(SPEC, after_conv_us=1.0)
    g = capture(lambda x, w: torch.relu(x @ w), (torch.empty(64, 64, device="meta"), torch.empty(64, 64, device="meta")))
    est = [estimate_kernel(g, k, spec) for k in lower(g, "eager", spec=spec).kernels]
    assert after_conv(est, spec) == est
