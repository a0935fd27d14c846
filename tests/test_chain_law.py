"""Eval batch norm's cold-parameter term (``bn_cold_us``, gpusim.cost.laws.bn_eval) and its fit on
the chain sweep (validation/fit/fit_chain.py), on synthetic records with a planted difference."""

import dataclasses
import json

import pytest

from gpusim.cost.kernel import estimate_kernel
from gpusim.hw.spec import load_spec
from gpusim.predict.pipeline import lower
from validation.fit import fit_chain

SPEC = dataclasses.replace(load_spec("h200-sxm-calibrated"), bn_cold_us=None)
POINT = {"chain": "cbr", "N": 2, "C": 64, "HW": 14, "dtype": "float32", "layout": "nchw"}


def _est(spec, p=POINT):
    g = fit_chain.chain_graph(p)
    return g, [estimate_kernel(g, k, spec) for k in lower(g, "eager", spec=spec).kernels]


def test_the_figure_adds_to_eval_batch_norm_only():
    on = dataclasses.replace(SPEC, bn_cold_us=1.0)
    for dt in ("float32", "bfloat16"):
        g, off_est = _est(SPEC, dict(POINT, dtype=dt))
        _, on_est = _est(on, dict(POINT, dtype=dt))
        for a, b in zip(off_est, on_est):
            if a.variant == "bn_eval":
                assert b.us == pytest.approx(a.us + 1.0)
            else:
                assert b.us == a.us
        assert sum(b.us for b in on_est) == pytest.approx(sum(a.us for a in off_est) + 1.0)


def test_the_shipped_reference_specs_have_no_figure():
    """The figure is measured on the H200 only: no other GPU's spec carries it."""
    for name in ("h200-sxm", "h100-sxm", "h100-sxm-calibrated", "a100-sxm4-80gb", "rtx3090"):
        assert load_spec(name).bn_cold_us is None


def _records(cold_us: float) -> list[dict]:
    recs = []
    for chain in ("cbr", "cbar", "bnr"):
        for dt in ("float32", "bfloat16"):
            for lay in ("nchw", "cl"):
                p = {"kind": "cnn_chain", "chain": chain, "N": 2, "C": 64, "HW": 14, "dtype": dt, "layout": lay,
                     "bytes": 2 * 64 * 14 * 14 * (4 if dt == "float32" else 2)}
                stages = ["producer"] + (["conv"] if chain != "bnr" else []) + ["bn"] + (
                    ["add"] if chain == "cbar" else []) + ["relu"]
                warm = {s: [{"name": f"vectorized_elementwise_kernel {s}" if s != "conv" else "sm90_xmma_fprop",
                             "us": 2.0}] for s in stages}
                warm["bn"] = [{"name": "cudnn::bn_fw_inf_1C11_kernel_NCHW", "us": 3.0}]
                chain_k = [dict(k, us=k["us"] + (cold_us if s == "bn" else 0.0)) for s in stages for k in warm[s]]
                gap = [x for k in chain_k for x in ({"name": "spin_kernel", "us": 25.0}, k)][1:]
                recs.append(dict(p, stages=stages, kernels=chain_k, gap=gap, warm=warm, cold=warm))
    return recs


def test_fit_recovers_a_planted_cold_term(tmp_path, capsys):
    recs = _records(0.7)
    rows = fit_chain.bn_rows(recs, SPEC)
    assert len(rows) == len(recs) and fit_chain.fit(rows) == pytest.approx(0.7)
    pre = fit_chain.predecessor_rows(recs)
    assert {r["after"] for r in pre} == {"conv", "mem"} and all(r["extra"] == 0 for r in pre)
    path = tmp_path / "cnn_chain.jsonl"
    path.write_text("\n".join(json.dumps(r) for r in [{"kind": "environment", "gpu_name": "test"}] + recs) + "\n")
    assert fit_chain.main(["--gpu", "h200", "--sweep", str(path)]) == 0
    out = capsys.readouterr().out
    assert "bn_cold_us = { value = 0.700" in out and "leave layout=cl out" in out


def test_predecessor_table_splits_by_the_kernel_before():
    from validation.reports.cnn_predecessor import table
    rs = [{"cls": "bn_cudnn", "after": "lib", "bytes": 5e5, "meas": 2.0, "pred": 1.0},
          {"cls": "bn_cudnn", "after": "mem", "bytes": 5e5, "meas": 1.2, "pred": 1.0}]
    t = table(rs, 100.0)
    assert "| bn_cudnn | lib | 64 kB-1 MB | 1 | 2 | 1 | 0.50 | +1.00 |" in t
    assert "| all | mem | all | 1 |" in t and "+1.0% of the measured total" in t
