"""validation/reports/collectives_residuals: the diagnostics of where the collective law misses."""

import statistics

import pytest

from gpusim.cost.collectives import BUSBW_FACTOR, ll_channel_gbs, ll_channels, nccl_protocol
from validation.fit import fit_collectives as F
from validation.reports import collectives_residuals as R


@pytest.fixture(scope="module")
def h200():
    return R.graph_data("NVIDIA H200")


def test_ll_slopes_recover_a_known_slope():
    base = F.base_link("nvlink4")
    rate = ll_channel_gbs(base) * base.nccl_coll["coll_channels"] * 1e3
    data = {("all_gather", n): {1 << k: 10.0 + 0.8 * (1 << k) / rate for k in range(10, 31)} for n in (2, 4)}
    rows = R.ll_slopes(data, base)
    assert {(c, n) for c, n, *_ in rows} == {("all_gather", 2), ("all_gather", 4)}
    for c, n, sizes, k, factor, calls in rows:
        assert k == pytest.approx(0.8, rel=1e-6)
        assert factor == BUSBW_FACTOR[c](n) and calls == 1.0
        assert all(nccl_protocol(c, b, n, base) == "ll" and ll_channels(b, n, base) == 24 for b in sizes)


def test_all_gather_ll_slope_follows_the_ctas_calls_not_the_busbw_factor(h200):
    """The records' LL all-gather on all 24 channels takes time per byte nearer n calls per chunk (1.0) than the
    busBw factor (n-1)/n the law prices it with, at every world size (docs/collectives_residuals.md)."""
    base, _, data, _ = h200
    rows = [r for r in R.ll_slopes(data, base) if r[0] == "all_gather"]
    assert [r[1] for r in rows] == [2, 3, 4]
    for c, n, _, k, factor, calls in rows:
        assert abs(k - calls) < abs(k - factor), (n, k)


def test_signed_rows_in_sample_match_the_scores(h200):
    base, gpu, data, _ = h200
    rows = R.signed_rows(data, base, gpu, "all_gather")
    worlds = sorted({n for _, n in data})
    full = F.with_fit(base, gpu, F.fit(data, base, worlds, ll_form=F.LL_FORM["graph"]))
    assert statistics.median(abs(r[5]) for r in rows) == pytest.approx(
        statistics.median(F.errors(full, gpu, data, worlds)["all_gather"]))
    assert len(rows) == sum(len(data[("all_gather", n)]) for n in worlds)


def test_small_by_run_lists_each_clean_run(h200):
    _, _, _, runs = h200
    rows = R.small_by_run(runs, "NVIDIA H200")
    assert {c for _, c, _ in rows} == {"send_recv", "broadcast"}
    holding = [r for r in runs if any(p["collective"] == "send_recv" for p in r["points"])]
    assert holding and len(rows) == 2 * len(holding) and all(5.0 < us < 30.0 for *_, us in rows)
