"""CI guard on the broad H100 sample under AMP (validation.score.broad_accuracy): the stored
predictions (``validation/results/h100/broad_predictions.json``) cover every record, are
what today's gpusim predicts (a few rows re-captured), and score no worse than
``validation/broad_thresholds.json``. Needs the zoo extra."""

import json
import os

import pytest

from gpusim.graph.ops import packet_name
from validation.score.broad_accuracy import (RESULTS, RUN_SET, broad_report, load_predictions,
                                       predict_row, spec_names)
from validation.records.store import read_records, run_set, zoo_available
from validation.records.stats import fail_if_worse, worse_than

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
THRESHOLDS = os.path.join(ROOT, "validation", "broad_thresholds.json")
#: re-captured to prove the stored predictions current: a CNN, a Hugging Face config
#: model, a ViT whose layer norms copy their strided input, batch norm on 7x7 planes
RECHECK = ("timm:test_mambaout", "hfcfg:distilbert", "timm:vit_base_patch32_siglip_gap_256",
           "timm:shvit_s1")

pytestmark = pytest.mark.skipif(not zoo_available(), reason="zoo extra not installed")


@pytest.fixture(scope="module")
def preds():
    p = load_predictions(RESULTS, "h100")
    assert p is not None, "no stored predictions: run python3 -m validation.score.broad_accuracy"
    return p


def test_every_broad_record_is_predicted(preds):
    recs = [r for r in read_records(run_set(RESULTS, "h100", RUN_SET))
            if not r.get("failed") and r.get("kernel_sum_us")]
    assert len(recs) >= 127
    assert sorted(r["case_id"] for r in recs) == sorted(r["case"] for r in preds["rows"])


def test_stored_predictions_are_current(preds):
    """A change to capture, lowering or cost that moves these rows must re-run
    ``python3 -m validation.score.broad_accuracy`` (which rewrites the stored predictions)."""
    from gpusim.hw.spec import load_spec
    recs = {r["model"]: r for r in read_records(run_set(RESULTS, "h100", RUN_SET))}
    stored = {r["model"]: r for r in preds["rows"]}
    specs = {label: load_spec(n) for label, n in spec_names("h100").items()}
    stale = []
    for m in RECHECK:
        now = predict_row(recs[m], specs)
        for label, p in stored[m]["pred"].items():
            if (abs(now["pred"][label]["device_us"] - p["device_us"]) > 1e-3 * p["device_us"]
                    or now["pred"][label]["kernels"] != p["kernels"]):
                stale.append(f"{m} {label}: {now['pred'][label]} != stored {p}")
        if now["pred_peak"] != stored[m]["pred_peak"]:
            stale.append(f"{m} peak {now['pred_peak']} != stored {stored[m]['pred_peak']}")
    assert not stale, "stored broad predictions are stale (re-run python3 -m " \
        "validation.score.broad_accuracy):\n" + "\n".join(stale)


def test_broad_accuracy_not_worse_than_thresholds(preds):
    with open(THRESHOLDS) as f:
        limits = {k: v for k, v in json.load(f).items() if not k.startswith("_")}
    rep = broad_report(preds)
    assert not rep["failed"], f"models gpusim no longer captures: {rep['failed']}"
    worse = []
    for label, halves in limits.items():
        for h, cats in halves.items():
            for cat, stats in cats.items():
                worse += worse_than(rep[label][h]["all"][cat], stats, f"h100 broad {label} {h} {cat}")
    fail_if_worse(worse, "broad-sample accuracy")


def test_layer_norm_of_strided_input_copies_and_autocast_batch_norm_has_no_prep():
    """The broad sample's rules on tiny models: under autocast a layer norm of a
    transposed input runs after a copy (meta traces are left as they were), and an eval
    batch norm over fp32 parameters is one cuDNN kernel."""
    import torch

    from gpusim.capture.tracing import capture
    from gpusim.hw.spec import load_spec
    from gpusim.predict.pipeline import lower
    spec = load_spec("h100-sxm-calibrated")

    class T(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.ln = torch.nn.LayerNorm(64)

        def forward(self, x):
            return self.ln(x.transpose(1, 2))

    x = torch.randn(8, 64, 32, device="meta")
    roles = lambda g: [(k.role, g.g.nodes[k.ops[0]]["op"]) for k in lower(g, "eager", spec=spec).kernels]  # noqa: E731
    amp = roles(capture(T().to("meta"), (x,), amp="fp16"))
    assert ("aux", "aten.layer_norm.default") in amp
    assert ("aux", "aten.layer_norm.default") not in roles(capture(T().to("meta"), (x,)))
    bn = torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3), torch.nn.BatchNorm2d(8)).eval().to("meta")
    img = torch.randn(4, 3, 16, 16, device="meta")
    ks = [k for k in lower(capture(bn, (img,), amp="fp16"), "eager", spec=spec).kernels
          if "batch_norm" in k.ops[0]]
    assert [k.role for k in ks] == ["main"]
    half = lower(capture(bn.half(), (img.half(),)), "eager", spec=spec).kernels
    assert sum("batch_norm" in k.ops[0] and k.role == "aux" for k in half) == 2


def test_attention_is_priced_in_whole_tiles():
    from gpusim.cost.roofline import attention_flops
    from gpusim.hw.spec import load_spec
    spec = load_spec("h100-sxm-calibrated")
    a = {"shape": (2, 4, 197, 64), "flops": 0.0,
         "sdpa": {"q_len": 197, "kv_len": 197, "head_dim": 64, "head_dim_v": 64}}
    tq, tkv = spec.attention_tile_q, spec.attention_tile_kv
    q, kv = -(-197 // tq) * tq, -(-197 // tkv) * tkv
    assert attention_flops(a, spec) == attention_flops(a) * q * kv / 197 ** 2 > attention_flops(a)


def test_elementwise_paths_pooling_and_misaligned_pointwise_convs():
    """The broad sample's classes on tiny graphs: an fp16 branch added to an fp32 tensor
    casts (unrolled, or legacy when strided), a transposed operand is read across the
    output's layout, a window pool is priced by its outputs, a 16-bit 1x1 conv on 14x14
    maps runs cuBLAS's align2 GEMM, and a spec without the figures keeps the old law."""
    import dataclasses

    import torch

    from gpusim.capture.tracing import capture
    from gpusim.cost.kernel import estimate_kernel
    from gpusim.cost.roofline import elementwise_fraction
    from gpusim.hw.spec import load_spec
    from gpusim.hw.schema import BROAD_FIGURES
    from gpusim.predict.pipeline import lower
    spec = load_spec("h100-sxm-calibrated")
    old = dataclasses.replace(spec, **{k: None for k in BROAD_FIGURES})

    class M(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = torch.nn.Linear(64, 64)
            self.conv = torch.nn.Conv2d(64, 64, 1)
            self.pool = torch.nn.AvgPool2d(3, 1, 1, count_include_pad=False)

        def forward(self, x, img):
            y = x + self.fc(x)                      # fp32 + fp16 under autocast: a cast
            z = x.transpose(1, 2).contiguous()      # a transposed read
            return y, z, self.pool(self.conv(img))

    g = capture(M().to("meta"), (torch.randn(8, 32, 64, device="meta"),
                                 torch.randn(4, 64, 14, 14, device="meta")), amp="fp16")
    nodes = {packet_name(g.g.nodes[n]["op"]): g.g.nodes[n] for n in g.compute_nodes}
    assert nodes["add"]["casts"] and not nodes["add"]["permuted"]
    assert nodes["contiguous"]["permuted"]
    assert elementwise_fraction(nodes["add"], spec) == spec.aten_cast_efficiency < 1
    assert elementwise_fraction(nodes["contiguous"], spec) == spec.aten_permuted_efficiency
    assert elementwise_fraction(nodes["add"], old) == 1.0
    assert elementwise_fraction(nodes["contiguous"], old) == spec.aten_strided_efficiency
    ks = lower(g, "eager", spec=spec).kernels
    assert [k.variant for k in ks if g.g.nodes[k.ops[0]]["kind"] == "conv" and k.role == "main"] == ["align2"]
    pool = next(k for k in ks if k.variant == "pool")
    a = g.g.nodes[pool.ops[0]]
    assert estimate_kernel(g, pool, spec).us >= 4 * 64 * 14 * 14 / (spec.pool_output_rate * 1e3)
    assert estimate_kernel(g, pool, old).us == estimate_kernel(g, dataclasses.replace(pool, variant=""), old).us
    assert a.get("layout") == "nchw"


def test_strided_linear_copies_its_input_and_adds_the_bias_apart():
    """CaiT's talking heads: a Linear over the last dim of a permuted 4-D tensor (16-bit,
    CUDA trace) is a copy, the GEMM and a bias add."""
    import torch

    from gpusim.capture.tracing import capture
    from gpusim.hw.spec import load_spec
    from gpusim.predict.pipeline import lower
    spec = load_spec("h100-sxm-calibrated")

    class T(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.proj = torch.nn.Linear(8, 8)

        def forward(self, s):
            return self.proj(s.permute(0, 2, 3, 1)).permute(0, 3, 1, 2)

    g = capture(T().to("meta"), (torch.randn(2, 8, 64, 64, device="meta"),), amp="fp16")
    ks = [k for k in lower(g, "eager", spec=spec).kernels
          if packet_name(g.g.nodes[k.ops[0]]["op"]) == "linear"]
    assert [(k.role, k.variant) for k in ks] == [("aux", "strided_copy"), ("main", "gemm"),
                                                 ("aux", "conv_bias")]
