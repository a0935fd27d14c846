"""cuDNN's layout transforms priced by their transpose tiles (gpusim.cost.layout) and the fit on the
GPU's own conv sweeps (validation/fit/fit_layout.py)."""

import dataclasses

import pytest

from gpusim.cost.layout import FIGURES, TILE, layout_transform_us, moved_bytes, tile_elements
from gpusim.hw.spec import load_spec
from validation.fit import fit_layout

H200 = load_spec("h200-sxm-calibrated")


def conv(n=32, cin=64, cout=64, hw=56, k=3, dtype="bfloat16", groups=1):
    return {"N": n, "Cin": cin, "Cout": cout, "H": hw, "W": hw, "kh": k, "kw": k, "Ho": hw, "Wo": hw,
            "groups": groups, "dtype": dtype}


def test_tiles_pad_narrow_dims():
    """A 3-channel stem input fills 3 of a tile's rows: its tile elements are TILE/3 its elements;
    a 3x3 weight 9 of TILE columns; a 64-channel 56x56 activation no padding."""
    stem = conv(cin=3, hw=224)
    assert tile_elements(stem, "to_nhwc") == 32 * TILE * 224 * 224
    assert tile_elements(conv(), "weight_to_nhwc") == 64 * 64 * TILE
    assert tile_elements(conv(), "to_nhwc") == 32 * 64 * 56 * 56
    assert moved_bytes(conv(), "to_nchw") == 2 * 32 * 64 * 56 * 56 * 2


def test_law_orders_and_regimes():
    """Same elements: a 16-bit and an fp32 transform take the same time within the L2-resident cap;
    past it the fp32 one streams at its own DRAM rate; a stem input costs more than a wide tensor of
    the same bytes; more elements never cost less."""
    small16, small32 = conv(n=4), conv(n=4, dtype="float32")
    assert layout_transform_us(small16, "to_nhwc", H200) == pytest.approx(layout_transform_us(small32, "to_nhwc", H200))
    big16, big32 = conv(n=128), conv(n=128, dtype="float32")
    assert layout_transform_us(big32, "to_nhwc", H200) > layout_transform_us(big16, "to_nhwc", H200) * 0.9
    stem = conv(n=32, cin=3, hw=224)
    wide = conv(n=32, cin=64, hw=int((3 * 224 * 224 / 64) ** 0.5))
    assert layout_transform_us(stem, "to_nhwc", H200) > 3 * layout_transform_us(wide, "to_nhwc", H200)
    times = [layout_transform_us(conv(n=n), "to_nchw", H200) for n in (1, 2, 4, 8, 16, 32, 64, 128, 256)]
    assert times == sorted(times)


def test_without_figures_the_stream_prices_it():
    """A GPU without the fitted figures keeps the byte stream (the law answers None)."""
    bare = dataclasses.replace(H200, **{f: None for f in FIGURES})
    assert layout_transform_us(conv(), "to_nhwc", bare) is None
    assert layout_transform_us(conv(), "weight_transform", H200) is None
    for name in ("a100-sxm4-80gb", "rtx3090", "h200-sxm"):
        assert not any(getattr(load_spec(name), f) for f in FIGURES)


def test_lowering_names_the_transforms():
    """An NCHW 16-bit 3x3 conv at batch 32 lowers to the input, weight and output transforms around
    its kernel, and the estimate uses the tile law."""
    import torch
    import gpusim
    from gpusim.capture.tracing import capture
    from gpusim.cost.kernel import estimate_kernel
    from gpusim.predict.pipeline import lower
    x = torch.empty(32, 64, 56, 56, dtype=torch.bfloat16, device="meta")
    w = torch.empty(64, 64, 3, 3, dtype=torch.bfloat16, device="meta")
    g = capture(lambda x, w: torch.nn.functional.conv2d(x, w, None, 1, 1), (x, w))
    ks = lower(g, "eager", spec=H200).kernels
    assert [k.variant for k in ks if k.role == "aux"] == ["to_nhwc", "weight_to_nhwc", "to_nchw"]
    est = [estimate_kernel(g, k, H200) for k in ks if k.role == "aux"]
    assert est[0].us == pytest.approx(layout_transform_us(conv(), "to_nhwc", H200))
    assert gpusim.predict(g, gpu=H200).device_us > 0


def test_fit_recovers_its_figures():
    """Points made by the law with known figures are fitted back (rate within the grid's step)."""
    truth = {"layout_transform_us": 1.5, "layout_transform_gelems": 700.0,
             "layout_transform_dram_efficiency": 0.8, "layout_transform_dram_efficiency_16bit": 0.45}
    spec = dataclasses.replace(H200, **truth)
    pts = []
    for dt in ("float32", "bfloat16"):
        for n in (1, 2, 4, 8, 16, 32, 64, 128):
            for v, cin in (("to_nchw", 64), ("weight_to_nhwc", 64), ("to_nhwc", 3)):
                c = conv(n=n, cin=cin, dtype=dt)
                pts.append({"c": c, "variant": v, "us": layout_transform_us(c, v, spec), "src": "x", "state": "cold"})
    figs = fit_layout.fit(pts, spec)
    assert figs["layout_transform_gelems"] == pytest.approx(700.0, rel=0.02)
    assert figs["layout_transform_us"] == pytest.approx(1.5, abs=0.05)
    assert figs["layout_transform_dram_efficiency_16bit"] == pytest.approx(0.45, rel=0.05)


def test_fit_on_the_h200_sweeps_beats_the_stream():
    """On the H200's own sweeps the fitted law's median error on the fitted points is under a
    third of the byte stream's."""
    spec = dataclasses.replace(H200, **{f: None for f in FIGURES})
    pts = [p for p in fit_layout.load_points("h200") if fit_layout.model_like(p)]
    assert len(pts) > 100
    figs = fit_layout.fit(pts, spec)
    med = lambda e: sorted(map(abs, e))[len(e) // 2]
    assert med(fit_layout.errors(pts, spec, figs)) < med(fit_layout.errors(pts, spec, None)) / 3
