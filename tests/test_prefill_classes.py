"""The prefill's eager kernels (issue 34): ops over no elements launch nothing, widening copies run
ATen's unrolled cast kernel, and the warm prefill-class figures (row walk, non-vectorised floor,
strided cat, causal tile) with their sweep and fit."""

import dataclasses

import pytest
import torch

from gpusim.capture.tracing import capture
from gpusim.cost.roofline import CostOptions, aten_fraction, estimate_group
from gpusim.hw.schema import DECODE_CLASS_FIGURES
from gpusim.hw.spec import load_spec
from gpusim.predict.pipeline import lower

#: the prefill laws alone: the decode_classes figures (their laws at few rows: tests/test_few_rows.py) left out
H200 = dataclasses.replace(load_spec("h200-sxm-calibrated"), **{f: None for f in DECODE_CLASS_FIGURES})
BF16 = torch.bfloat16


def _eager(fn, *args, spec=H200):
    g = capture(fn, args)
    return g, lower(g, "eager", spec=spec)


def test_empty_cache_tensor_launches_nothing():
    """DynamicCache's first update: ``torch.tensor([])`` on the device, ``detach_``, then ``cat``
    with the keys. Only the cat launches a kernel (the H200 prefill records: no memcpy, no kernel
    for the empty tensor); the same cat with a real tensor before it still launches one."""
    def first_update(k):
        empty = torch.tensor([], dtype=k.dtype, device=k.device).detach_()
        return torch.cat([empty, k], dim=-2)
    k = torch.empty(1, 8, 128, 64, dtype=BF16, device="meta")
    g, low = _eager(first_update, k)
    ops = [g.g.nodes[kk.ops[0]]["op"] for kk in low.kernels]
    assert [o for o in ops if "cat" in o] == ["aten.cat.default"]
    assert len(low.kernels) == 1, ops


def test_widening_copy_is_the_unrolled_cast_kernel():
    """bf16 -> fp32 (RMSNorm's upcast) runs direct_copy with dynamic casts (the unrolled kernel,
    ``aten_cast_efficiency``); fp32 -> bf16 runs the vectorised bfloat16_copy kernel, at a copy's rate."""
    x = torch.empty(4096, 2048, dtype=BF16, device="meta")
    up_g, up = _eager(lambda x: x.to(torch.float32), x)
    down_g, down = _eager(lambda x: x.to(BF16), torch.empty(4096, 2048, device="meta"))
    opts = CostOptions(aten=True)
    t_up = estimate_group(up_g, up.kernels[0].ops, H200, opts)
    t_down = estimate_group(down_g, down.kernels[0].ops, H200, opts)
    # the same bytes (8 + 16 MB both ways, cold input); the upcast at the cast fraction
    assert t_up.bytes == pytest.approx(t_down.bytes)
    assert t_up.mem_us == pytest.approx(t_down.mem_us / H200.aten_cast_efficiency, rel=1e-6)


def _mean_rows(rows, cols):
    x = torch.empty(rows, cols, device="meta")
    return _eager(lambda x: x.pow(2).mean(-1, keepdim=True), x)


def test_prefill_figures_absent_change_nothing_and_present_bound_the_kernels():
    """Without the prefill_classes figures the classes keep their old laws; with them a last-dim
    row reduction takes at least cols x reduction_col_ns, a strided 16-bit elementwise kernel at
    least aten_strided_min_us (an fp32 one not), and a strided cat streams at aten_cat_strided_efficiency."""
    assert H200.reduction_col_ns is None or H200.reduction_col_ns > 0
    plain = dataclasses.replace(H200, reduction_col_ns=None, aten_strided_min_us=None, aten_cat_strided_efficiency=None)
    # illustrative figures (not measurements): only the laws' arithmetic is under test
    figs = dataclasses.replace(plain, reduction_col_ns=2.0, aten_strided_min_us=3.0, aten_cat_strided_efficiency=0.2)
    opts = CostOptions(aten=True)
    g, low = _mean_rows(128, 4096)
    red = next(k for k in low.kernels if g.g.nodes[k.ops[0]]["kind"] == "reduction")
    before, after = estimate_group(g, red.ops, plain, opts), estimate_group(g, red.ops, figs, opts)
    assert after.us >= plain.kernel_fixed_us + 4096 * 2.0e-3 - 1e-9 > before.us
    w = torch.empty(64, dtype=BF16, device="meta")
    g2, low2 = _eager(lambda x, w: x * w, torch.empty(2, 64, dtype=BF16, device="meta"), w)
    k2 = low2.kernels[0]
    assert estimate_group(g2, k2.ops, plain, opts).us < 3.0 <= estimate_group(g2, k2.ops, figs, opts).us
    g4, low4 = _eager(lambda x, w: x * w, torch.empty(2, 64, device="meta"), torch.empty(64, device="meta"))
    k4 = low4.kernels[0]     # fp32 (elementwise_kernel<128, 2>): no floor of its own
    assert estimate_group(g4, k4.ops, figs, opts).us == estimate_group(g4, k4.ops, plain, opts).us < 3.0

    def rotate(x):
        q = x.view(8, 512, 32, 64).transpose(1, 2)
        return torch.cat((-q[..., 32:], q[..., :32]), dim=-1)
    g3, low3 = _eager(rotate, torch.empty(8, 512, 2048, dtype=BF16, device="meta"))
    cat = next(k for k in low3.kernels if "cat" in g3.g.nodes[k.ops[0]]["op"])
    est, old = estimate_group(g3, cat.ops, figs, opts), estimate_group(g3, cat.ops, plain, opts)
    # the same stream (L2-resident reads credited), at 0.2 of a copy instead of the strided fraction
    node = [g3.g.nodes[cat.ops[0]]]
    assert est.mem_us * 0.2 == pytest.approx(old.mem_us * aten_fraction(node, plain), rel=1e-6)


def test_prefill_laws_stay_in_the_sweeps_domain():
    """The row walk is not carried past the sweep's widest row (an argmax over a 128k vocabulary
    splits each row over blocks: 36 us measured for 8 x 128256 on the H200), and the strided-cat rate
    is for cats of strided inputs (RoPE's halves, the first cat of the transposed values), not a decode
    step's KV cat, whose largest input is the contiguous cache."""
    from gpusim.cost.roofline import ROW_WALK_MAX_COLS, row_walk_share, row_walk_us, strided_cat
    figs = dataclasses.replace(H200, reduction_col_ns=2.0, aten_cat_strided_efficiency=0.2)
    for cols, walks in ((ROW_WALK_MAX_COLS, True), (128256, False)):
        g, low = _mean_rows(8, cols)
        red = next(k for k in low.kernels if g.g.nodes[k.ops[0]]["kind"] == "reduction")
        # 8 rows: ATen's block walks each row with 64 threads, half a warp's walk (row_walk_share)
        assert row_walk_us(g, red.ops[0], figs) == (pytest.approx(cols * 2.0e-3 * row_walk_share(8, cols))
                                                    if walks else 0.0)

    def step(cache, v, w):
        rot = torch.cat((-v[..., 32:], v[..., :32]), dim=-1)
        first = torch.cat([torch.tensor([], dtype=w.dtype, device=w.device), w.transpose(1, 2)], dim=-2)
        return torch.cat([cache, v.transpose(1, 2)], dim=-2), rot, first
    g, low = _eager(step, torch.empty(8, 8, 4096, 64, dtype=BF16, device="meta"),
                    torch.empty(8, 1, 8, 64, dtype=BF16, device="meta"),
                    torch.empty(8, 128, 8, 64, dtype=BF16, device="meta"))
    cats = {len(g.g.nodes[k.ops[0]]["shape"]) and g.g.nodes[k.ops[0]]["shape"][-2]: k for k in low.kernels
            if "cat" in g.g.nodes[k.ops[0]]["op"]}
    kv, rope, first = cats[4097], cats[8], cats[128]
    plain = dataclasses.replace(figs, aten_cat_strided_efficiency=None)
    assert not strided_cat(g, kv.ops[0], figs) and strided_cat(g, rope.ops[0], figs)
    assert strided_cat(g, first.ops[0], figs) and not strided_cat(g, rope.ops[0], plain)
    opts = CostOptions(aten=True)
    assert estimate_group(g, kv.ops, figs, opts).mem_us == estimate_group(g, kv.ops, plain, opts).mem_us
    for k in (rope, first):
        assert estimate_group(g, k.ops, figs, opts).mem_us > estimate_group(g, k.ops, plain, opts).mem_us


def test_sweep_cases_build_and_run_on_the_cpu(monkeypatch):
    """The H200 sweep's cases are real PyTorch code: the small ones run here on the CPU."""
    import validation.measure.prefill_classes as pc
    monkeypatch.setattr(pc, "DEVICE", "cpu")
    ran = 0
    for meta, make in pc.cases():
        if meta.get("rows", 0) > 512 or meta.get("S", 0) > 512:
            continue
        call, producers = make()
        call()
        ran += 1
    assert ran >= 10


def test_fit_reads_the_sweep_records():
    """The fit's arithmetic on two hand-made records (illustrative numbers, not a GPU's)."""
    from validation.fit.fit_prefill_classes import fit
    rows = [{"kind": "prefill_class", "case": "rmsnorm", "rows": 128, "cols": 2048, "kernels": [
                {"name": "void at::native::unrolled_elementwise_kernel<direct_copy>", "us": 2.0},
                {"name": "void at::native::reduce_kernel<512, 1>", "us": H200.kernel_fixed_us + 4.096},
                {"name": "void at::native::elementwise_kernel<128, 2, mul>", "us": 1.5},    # fp32: not the floor
                {"name": "void at::native::elementwise_kernel<128, 4, mul>", "us": 2.5}]},
            {"kind": "prefill_class", "case": "rope", "rows": 2048, "heads": 32, "d": 64, "kernels": [
                {"name": "void at::native::elementwise_kernel<128, 4, mul>", "us": 9.0},
                {"name": "CatArrayBatchedCopy<OpaqueType<2u>>", "us": H200.kernel_fixed_us + 16.777216}]}]
    figs, _ = fit(rows, H200)
    assert figs["reduction_col_ns"] == pytest.approx(2.0)
    assert figs["aten_strided_min_us"] == pytest.approx(2.5)
    assert figs["aten_cat_strided_efficiency"] == pytest.approx(1e12 / (H200.mem_efficiency * H200.bandwidth), rel=1e-6)


def test_causal_share_and_its_fit():
    """Without the figure a causal attention costs the full square; with key tiles of 128 a causal
    self-attention over 2048 keys computes 17/32 of it, a decode step (one query) all of it. The fit
    recovers the tile from causal/full pairs (illustrative times, not a GPU's)."""
    from gpusim.cost.laws import causal_share
    from validation.fit.fit_prefill_classes import fit
    a = {"sdpa": {"is_causal": True, "q_len": 2048, "kv_len": 2048}}
    assert causal_share(a, H200) == 1.0 or H200.attention_causal_tile
    spec = dataclasses.replace(H200, attention_causal_tile=128)
    assert causal_share(a, spec) == pytest.approx(17 / 32)
    assert causal_share({"sdpa": {"is_causal": True, "q_len": 1, "kv_len": 2048}}, spec) == 1.0
    f = H200.kernel_fixed_us
    rows = [{"case": "sdpa", "B": 8, "S": 2048, "causal": c, "kernel_sum_us": f + (100 * 17 / 32 if c else 100)}
            for c in (True, False)]
    figs, _ = fit(rows, H200)
    assert figs["attention_causal_tile"] == pytest.approx(128)
