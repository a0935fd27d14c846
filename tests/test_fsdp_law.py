"""FSDP2's per-unit host law: fitted on the fully_shard microbenchmark (validation/fit/fsdp_law.py), read from the
host profile, priced per hook call and per unit sync by gpusim.sim.ranks."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpusim.hw.host import load_host
from gpusim.sim.ranks import fsdp_host_law

LAW = ("fsdp_unit_us", "fsdp_unit_sync_us", "fsdp_unit_sync_doubling_us")     # the default form, "unit"


def test_host_without_the_law_keeps_the_lower_bound():
    host = load_host("reference").replace(fsdp_hook_call_us=None, fsdp_unit_us=None, fsdp_unit_sync_us=None,
                                          fsdp_unit_sync_doubling_us=None)
    per_call, per_unit = fsdp_host_law(host, 4)
    assert per_call == pytest.approx((host.python_torch_call_us or 0.0) + host.eager_view_us)
    assert per_unit == 0.0


def test_h200_host_carries_the_fitted_law_with_its_provenance():
    host = load_host("h200-sxm-host")
    for k in LAW:
        assert getattr(host, k) is not None, k
        source, ref = host.provenance[k]
        assert source == "derived" and "fsdp-hooks.jsonl" in ref and "validation.fit.fsdp_law" in ref
    assert host.fsdp_hook_call_us is None       # calls at the floor, the rest per unit
    # the microbenchmark's 1.24 ms a unit at 1 rank, 2.14 at 2, 2.56 at 4, less its 38 / 65 calls at the floor
    floor = (host.python_torch_call_us or 0.0) + host.eager_view_us
    assert fsdp_host_law(host, 1) == (pytest.approx(floor), pytest.approx(host.fsdp_unit_us))
    assert 1000 < host.fsdp_unit_us < 1240
    assert fsdp_host_law(host, 4)[1] + 65 * floor == pytest.approx(2558 - 130, abs=30)


@settings(max_examples=30, deadline=None)
@given(st.floats(1.0, 100.0), st.floats(0.0, 2000.0), st.floats(-200.0, 500.0), st.floats(0.0, 800.0),
       st.integers(1, 6))
def test_law_by_world(call, unit, sync4, doubling, k):
    host = load_host("reference").replace(fsdp_hook_call_us=call, fsdp_unit_us=unit, fsdp_unit_sync_us=sync4,
                                          fsdp_unit_sync_doubling_us=doubling)
    world = 2 ** k
    per_call, per_unit = fsdp_host_law(host, world)
    assert per_call == call
    assert per_unit == pytest.approx(unit + sync4 + (math.log2(world) - 2) * doubling)
    assert fsdp_host_law(host, 1) == (call, unit)            # one rank: no other rank to sync with
    assert fsdp_host_law(host, 2 * world)[1] >= per_unit     # never cheaper with more ranks


def test_microbenchmark_slopes_are_the_records():
    from validation.fit.fsdp_law import records, slope
    rows = {(r["world"], r["units"], r["wrapped"]): r["rank0_step_ms"]["median"] for _, r, _ in records()}
    for world, per_unit_ms in ((1, 1.24), (2, 2.14), (4, 2.56)):
        units = [4, 16, 64]
        s = slope(units, [rows[world, u, True] - rows[world, u, False] for u in units])
        assert s == pytest.approx(per_unit_ms, abs=0.01)


def test_sync_is_priced_per_unit_across_ranks_only():
    """A unit's sync costs the host per step across ranks, never on one rank."""
    from gpusim.hw.spec import spec_for
    from gpusim.predict.distributed import predict_distributed
    from validation.fit.fsdp_law import builder
    base = load_host("h200-sxm-host")
    off = base.replace(fsdp_unit_sync_us=0.0, fsdp_unit_sync_doubling_us=0.0)
    more = base.replace(fsdp_unit_sync_us=1000.0, fsdp_unit_sync_doubling_us=0.0)
    one_off = predict_distributed(builder(4, True), spec_for("h200"), 1, 1, host=off, world1=False)
    b = builder(4, True)
    p_off = predict_distributed(b, spec_for("h200"), 2, 1, host=off, world1=False)
    p_more = predict_distributed(b, spec_for("h200"), 2, 1, host=more, world1=False)
    # half a sync before each unit's forward, half before its backward (where the plan found one)
    units = sum(0.5 * ((u["fwd"] is not None) + (u["bwd"] is not None)) for u in p_off.plan.units)
    assert units >= 3.5
    assert sum(p_off.plan.host_units.values()) == pytest.approx(units)
    # 1 ms a unit more, host-bound microbenchmark: the step grows by about that much per unit
    assert p_more.step_us - p_off.step_us == pytest.approx(1000.0 * units, rel=0.05)
    one = predict_distributed(b, spec_for("h200"), 1, 1, host=more, world1=False)
    assert one.step_us == pytest.approx(one_off.step_us)         # one rank: no sync


def test_stored_predictions_show_in_the_docs():
    """docs/distributed.md's generated block and docs/accuracy.md's section across GPUs are what the stored
    predictions give (python3 -m validation.score.dist_accuracy rewrites all three)."""
    import os

    from validation.reports.dist_page import DIST_HEAD, dist_markdown, load
    from validation.score.dist_accuracy import DOC, render
    data = load()
    assert data and {x["case"] for x in data["rows"]} == {"ddp_resnet50", "ddp_gpt2", "fsdp_llama1b"}
    assert render(data["rows"]) in open(DOC).read()
    page = open(os.path.join(os.path.dirname(DOC), "accuracy.md")).read()
    assert page.rstrip().endswith((DIST_HEAD + "\n" + dist_markdown()).rstrip())
