"""Decode-step laws of ATen's kernels at few rows (gpusim/cost/few_rows.py, roofline.row_walk_share, cat_path)."""

import dataclasses

from hypothesis import given, strategies as st

from gpusim.cost import few_rows
from gpusim.cost.roofline import row_walk_share
from gpusim.hw.spec import load_spec

from gpusim.hw.schema import DECODE_CLASS_FIGURES

H200 = dataclasses.replace(load_spec("h200-sxm-calibrated"), **{f: None for f in DECODE_CLASS_FIGURES})
FIGS = dict(aten_strided_lane_us=0.8, aten_strided_elem_us=0.3, aten_strided_grid_us=0.1, aten_cat_append_us=1.6,
            aten_cat_append_efficiency=0.95, aten_cast_min_us=2.3, aten_cat_strided_min_us=1.6)


def test_row_walk_share_follows_atens_block_shape():
    # 16 rows and more: a warp a row (the prefill sweep's shapes, the figure as fitted)
    assert row_walk_share(16, 2048) == row_walk_share(16384, 4096) == 1.0
    # one row of 2048 columns: 512 threads, 4 columns each (vector loads of 4): 1/16 of a warp's walk
    assert row_walk_share(1, 2048) == 1 / 16
    assert row_walk_share(8, 2048) == 0.5 and row_walk_share(1, 896) == 0.25


@given(st.integers(1, 4096), st.integers(1, 8192))
def test_row_walk_share_grows_with_rows(rows, cols):
    assert 0 < row_walk_share(rows, cols) <= row_walk_share(rows * 2, cols) <= 1.0


@given(st.integers(1, 1 << 20))
def test_strided_floor_never_above_the_prefill_floor_and_monotone(n):
    spec = dataclasses.replace(H200, **FIGS)
    f = few_rows.strided_floor_us
    assert f(n, spec) <= H200.aten_strided_min_us
    assert f(n, spec) <= f(n + 1, spec)
    assert f(n, H200) == H200.aten_strided_min_us        # without the figures: the old floor


def test_strided_floor_counts_elements_a_thread_computes():
    spec = dataclasses.replace(H200, **FIGS)
    assert few_rows.strided_floor_us(128, spec) == 0.8 + 0.3
    assert abs(few_rows.strided_floor_us(256, spec) - (0.8 + 0.6)) < 1e-12
    assert abs(few_rows.strided_floor_us(2048, spec) - (0.8 + 1.2 + 0.2)) < 1e-12       # 4 blocks: 2 doublings
    assert few_rows.strided_floor_us(65537, spec) == H200.aten_strided_min_us    # past the sweep's grids


def test_append_cat_is_a_copy_without_figures_and_the_line_with_them():
    nb = 8.4e6
    plain = few_rows.append_cat_us(H200, nb)
    assert abs(plain - (H200.kernel_fixed_us + nb / (H200.mem_efficiency * H200.bandwidth) * 1e6)) < 1e-9
    spec = dataclasses.replace(H200, **FIGS)
    assert abs(few_rows.append_cat_us(spec, nb) - (1.6 + nb / (0.95 * H200.mem_efficiency * H200.bandwidth) * 1e6)) < 1e-9
    assert few_rows.append_cat_us(spec, 0) == 1.6


def test_a_decode_steps_kv_cats_append_and_its_rotary_cats_do_not():
    import torch
    from transformers import DynamicCache, LlamaConfig, LlamaForCausalLM

    from gpusim.capture.tracing import capture
    from gpusim.cost.roofline import cat_path
    from gpusim.graph.ops import packet_name
    cfg = LlamaConfig(num_hidden_layers=1, hidden_size=64, intermediate_size=128, num_attention_heads=4,
                      num_key_value_heads=2, vocab_size=100)
    with torch.device("meta"):
        model = LlamaForCausalLM(cfg).eval()
    cache = DynamicCache(config=cfg)
    kv = torch.empty(1, 2, 16, 16, device="meta")
    cache.update(kv, kv, 0)
    g = capture(lambda ids, cache: model(ids, past_key_values=cache, use_cache=True).logits,
                (torch.zeros(1, 1, dtype=torch.long, device="meta"), cache))
    cats = [n for n in g.g.nodes if packet_name(g.g.nodes[n].get("op", "")) == "cat"]
    paths = sorted(cat_path(g, n, H200) for n in cats)
    assert paths.count("append") == 2 and len(paths) > 2, paths
