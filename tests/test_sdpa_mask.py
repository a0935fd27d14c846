"""The masked-attention sweep (validation/measure/sdpa_mask.py) builds what it claims, on the CPU."""

import torch

from validation.measure.sdpa_mask import LAYOUTS, make, points


def test_every_shape_has_every_layout():
    ps = points()
    assert {p["layout"] for p in ps} == set(LAYOUTS)
    assert len(ps) == len(LAYOUTS) * len({(p["B"], p["H"], p["S"], p["D"]) for p in ps})


def test_mask_layouts_have_the_strides_they_name():
    seen = {}
    orig = torch.nn.functional.scaled_dot_product_attention

    def spy(q, k, v, attn_mask=None, **kw):
        seen["mask"] = attn_mask
        return orig(q, k, v, attn_mask=attn_mask, **kw)

    torch.nn.functional.scaled_dot_product_attention = spy
    try:
        for lay, stride_q in (("bcast_q", 0), ("dense", 16), ("dense_heads", 16)):
            p = {"B": 2, "H": 3, "S": 16, "D": 8, "layout": lay, "dtype": "float32"}
            fn, args = make(p, "cpu")
            fn(*args)
            m = seen["mask"]
            assert m.shape[-2:] == (16, 16) and m.stride(-2) == stride_q
            assert m.shape[1] == (3 if lay == "dense_heads" else 1)
    finally:
        torch.nn.functional.scaled_dot_product_attention = orig
