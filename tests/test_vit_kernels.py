"""ViT-family kernels priced by waves (gpusim.cost.vit_kernels, issue 35): fp32 attention's memory-efficient kernel
(fitted on each GPU's dispatch sweep, validation/sweeps/<gpu>.json) and patch embeddings (fitted on the H200's
vit_patchify sweep, validation/results/h200/vit_patchify.jsonl, carried to the H100 by the same-architecture rule)."""

import json
import os

import pytest
import torch
import torch.nn.functional as F

from gpusim.capture.tracing import capture
from gpusim.cost.kernel import kernel_us
from gpusim.cost.vit_kernels import attention_fp32_us, patchify_us, patchify_waves
from gpusim.hw.schema import ATTENTION_FP32_FIGURES, PATCHIFY_FIGURES
from gpusim.hw.spec import load_spec
from gpusim.lower.lowering import lower
from validation.fit import fit_attention_fp32 as fa
from validation.fit import fit_patchify as fp

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
H100, H200 = load_spec("h100-sxm-calibrated"), load_spec("h200-sxm-calibrated")


def sdpa_node(bh, s, d, mask=False, causal=False):
    return {"gemm": {"b": bh}, "sdpa": {"q_len": s, "kv_len": s, "head_dim": d, "mask": mask, "is_causal": causal}}


@pytest.mark.parametrize("gpu", ["h100", "h200"])
def test_attention_fp32_fit_reproduces_the_spec(gpu):
    spec = load_spec(f"{gpu}-sxm-calibrated")
    sweep = json.load(open(os.path.join(ROOT, "validation", "sweeps", f"{gpu}.json")))
    pts = [p for p in fa.points(sweep) if p["mask"] != "causal" and p["S"] >= fa.KEY_TILE[p["D"] > 64]]
    for f, v in fa.fit(pts, spec.sm_count).items():
        assert getattr(spec, f) == pytest.approx(v, abs=1e-4), f
        assert spec.provenance[f][0] == "measured"
    # within 10% of every fitted point (the law's in-sample error is 2-3% median)
    for p in pts:
        assert fa.predict(p, {f: getattr(spec, f) for f in ATTENTION_FP32_FIGURES}, spec.sm_count) \
            == pytest.approx(p["us"], rel=0.10)


def test_attention_fp32_by_waves_of_key_blocks():
    # BEiT-B at 256 px: 12 heads x 257 tokens, fp32, an additive mask: one wave of 60 CTAs, 5 key blocks of 64
    us = attention_fp32_us(sdpa_node(12, 257, 64, mask=True), H200)
    assert us == pytest.approx(5 * H200.attention_fp32_block_us * H200.attention_fp32_mask_factor)
    # twice the CTAs that fit (2 per SM) run two waves
    big = 2 * 132 * 2
    assert attention_fp32_us(sdpa_node(big, 64, 64), H200) == pytest.approx(2 * H200.attention_fp32_block_us)
    # outside the domain: causal, or under one key block
    assert attention_fp32_us(sdpa_node(12, 257, 64, causal=True), H200) is None
    assert attention_fp32_us(sdpa_node(32, 16, 128), H200) is None
    assert attention_fp32_us(sdpa_node(12, 257, 64), H200.replace(**{f: None for f in ATTENTION_FP32_FIGURES})) is None


def test_patchify_waves():
    assert patchify_waves(13 * 128, 768, 132) == 1             # 78 tiles
    assert patchify_waves(19 * 128, 640, 132) == 2             # 95 tiles, 152 CTAs launched
    assert patchify_waves(13 * 128, 1024, 132) == 1            # 104 tiles, as many launched
    assert patchify_waves(98 * 128, 1280, 132) == 8            # 980 tiles: the real ones set the waves


def test_patchify_fit_reproduces_the_h200_spec_and_the_h100_carries_it():
    env, pts = fp.points(os.path.join(ROOT, "validation", "results", "h200", "vit_patchify.jsonl"), "vit_patchify")
    figs = fp.fit([p for p in pts if fp.in_law(p)], H200.sm_count)
    for f in PATCHIFY_FIGURES:
        assert getattr(H200, f) == pytest.approx(figs[f], abs=1e-4), f
        assert H100.provenance[f][0] == "derived" and getattr(H100, f) == pytest.approx(getattr(H200, f), abs=1e-4)
    wide = [p for p in pts if p["dtype"] != "float32" and p["cout"] >= fp.WIDE_COUT]
    errs = sorted(abs(e) for e in fp.errors(wide, figs, H200.sm_count))
    assert errs[len(errs) // 2] < 3.0                           # 1.1% median on 780 points


def patch_graph(n, cout, hw, k, dtype):
    x = torch.empty(n, 3, hw, hw, device="meta", dtype=dtype)
    w = torch.empty(cout, 3, k, k, device="meta", dtype=dtype)
    return capture(lambda x, w: F.conv2d(x, w, None, k), (x, w))


@pytest.mark.parametrize("gpu", ["h100", "h200"])
def test_a_bf16_patch_embedding_is_one_wave_at_batch_1(gpu):
    """ViT-B/16's embedding at batch 1: cuDNN's tiled kernel runs 82-83 µs on both GPUs (the dispatch sweeps); the
    stem line it replaces gave 41."""
    spec = load_spec(f"{gpu}-sxm-calibrated")
    g = patch_graph(1, 768, 224, 16, torch.bfloat16)
    k = next(k for k in lower(g, "eager", spec=spec).kernels if k.variant == "conv_stem")
    assert kernel_us(g, k, spec) == pytest.approx(82.6, rel=0.05)
    assert kernel_us(g, k, spec.replace(**{f: None for f in PATCHIFY_FIGURES})) < 60


def test_a_cnn_stem_keeps_the_stem_law():
    x = torch.empty(1, 3, 224, 224, device="meta", dtype=torch.bfloat16)
    w = torch.empty(64, 3, 7, 7, device="meta", dtype=torch.bfloat16)
    g = capture(lambda x, w: F.conv2d(x, w, None, 2, 3), (x, w))
    k = next(k for k in lower(g, "eager", spec=H200).kernels if k.variant == "conv_stem")
    assert kernel_us(g, k, H200) == kernel_us(g, k, H200.replace(**{f: None for f in PATCHIFY_FIGURES}))
