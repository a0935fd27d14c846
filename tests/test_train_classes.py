"""Training kernel classes (validation/fit/fit_train.py): the multi-tensor-apply optimizer class
priced at its fitted fraction of the bandwidth, the neutral law without a figure, the fit
and its leave-one-family-out on synthetic points, and the calibrated spec's provenance."""
import dataclasses

import pytest
import torch

import gpusim
from gpusim.capture.tracing import capture
from gpusim.hw.spec import load_spec, spec_for
from gpusim.hw.schema import CLASS_FIGURES, FRACTIONS, TRAIN_FIGURES
from validation.fit.fit_train import fit_mta, leave_family_out, mta_point, mta_us


def _adamw_step(width=512, depth=3):
    model = torch.nn.Sequential(*[torch.nn.Linear(width, width) for _ in range(depth)])
    opt = torch.optim.AdamW(model.parameters())
    loss_fn = torch.nn.MSELoss()

    def step(x):
        opt.zero_grad(set_to_none=True)
        loss_fn(model(x), x).backward()
        opt.step()
    return capture(step, (torch.randn(8, width),))


@pytest.fixture(scope="module")
def graph():
    return _adamw_step()


def _opt_kernels(p):
    g = p.graph.g
    return [(k, e) for k, e in zip(p.lowering.kernels, p.kernels)
            if g.nodes[k.ops[0]].get("phase") == "optimizer"]


def test_mta_kernels_stream_at_the_fitted_fraction(graph):
    spec = spec_for("h100")
    assert spec.mta_efficiency and spec.mta_efficiency < spec.mem_efficiency
    p = gpusim.predict(graph, gpu=spec)
    firsts = [e for k, e in _opt_kernels(p) if k.variant == "mta"]
    assert firsts and all(e.variant == "mta" for e in firsts)
    for e in firsts:
        body = e.bytes / (spec.mta_efficiency * spec.bandwidth) * 1e6
        assert e.us == pytest.approx(max(spec.kernel_fixed_us + max(body, e.compute_us), spec.kernel_min_us))
    # slower than the plain stream of the same bytes, faster than none
    neutral = gpusim.predict(graph, gpu=dataclasses.replace(spec, mta_efficiency=None))
    slow = sum(e.us for _, e in _opt_kernels(p))
    plain = sum(e.us for _, e in _opt_kernels(neutral))
    assert slow > plain
    # forward and backward kernels do not change
    fb = [e.us for k, e in zip(p.lowering.kernels, p.kernels) if k.variant != "mta"]
    fb0 = [e.us for k, e in zip(neutral.lowering.kernels, neutral.kernels) if k.variant != "mta"]
    assert fb == fb0


def test_without_a_figure_the_class_is_the_plain_aten_stream(graph):
    """A GPU without the optimizer figures (none fitted on its own records) keeps the
    neutral law: the plain ATen stream, further launches at the common floor."""
    spec = dataclasses.replace(spec_for("h200"), mta_efficiency=None, mta_launch_us=None)
    p = gpusim.predict(graph, gpu=spec)
    for k, e in _opt_kernels(p):
        if k.variant == "mta_launch":
            assert e.us == pytest.approx(spec.kernel_min_us)
    for k, e in _opt_kernels(p):
        if k.variant == "mta":
            assert e.variant == ""


def test_fit_recovers_the_fraction_and_leaves_families_out():
    spec = spec_for("h100")
    fams = ["cnn", "vit", "encoder", "decoder", "encdec"]
    pts = [{"family": f, "ops": 3 + i, "extra": i, "bytes": 1e8 * (i + 1), "us": 0.0}
           for i, f in enumerate(fams * 2)]
    for p in pts:
        p["us"] = mta_us(p, (0.62, 8.0), spec)     # a point of the fit's grid
    assert fit_mta(pts, spec) == pytest.approx((0.62, 8.0), abs=1e-4)
    lofo = leave_family_out(pts, spec, fit_mta, mta_us)
    assert set(lofo) == set(fams) | {"all"}
    assert all(s["median"] < 0.1 and s["n"] == (10 if f == "all" else 2) for f, s in lofo.items())
    pts[0]["us"] *= 2                       # one step twice as slow: its family's error shows it
    lofo = leave_family_out(pts, spec, fit_mta, mta_us)
    assert lofo["cnn"]["p90"] > 40 and lofo["vit"]["median"] < 1


def test_mta_point_reads_the_profiler_list():
    rec = {"case_id": "c", "family": "cnn", "kernels": [
        {"name": "void at::native::(anonymous namespace)::multi_tensor_apply_kernel<...>", "us": 30.0,
         "phase": "optimizer"},
        {"name": "void at::native::(anonymous namespace)::multi_tensor_apply_kernel<...>", "us": 5.0,
         "phase": "optimizer"},
        {"name": "ampere_sgemm", "us": 50.0, "phase": "backward"}]}
    ks = [{"phase": "optimizer", "variant": "mta", "role": "main", "bytes": 1e6, "us": 1.0},
          {"phase": "optimizer", "variant": "", "role": "aux", "bytes": 0.0, "us": 1.0},
          {"phase": "backward", "variant": "", "role": "main", "bytes": 1e9, "us": 1.0}]
    assert mta_point(rec, ks) == {"case_id": "c", "family": "cnn", "us": 35.0, "ops": 1,
                                  "extra": 1, "bytes": 1e6}
    assert mta_point(dict(rec, kernels=rec["kernels"][2:]), ks) is None


@pytest.mark.parametrize("gpu,who", [("h100", "NVIDIA H100"), ("h200", "NVIDIA H200")])
def test_training_figures_are_fractions_with_their_records(gpu, who):
    """Fitted on a GPU's own training records only: not a sweep CLASS_FIGURE, a fraction,
    its ref names the GPU, the script and the records; never on another GPU's spec."""
    spec = load_spec(f"{gpu}-sxm-calibrated")
    for key in TRAIN_FIGURES:
        # fractions of a datasheet peak, but times (``*_us``) and backward scales (a
        # backward kernel's time over its forward law's, above 1 or below)
        assert (key in FRACTIONS) == ("_us" not in key and "_scale" not in key)
        assert key not in CLASS_FIGURES
        if getattr(spec, key) is None:
            # a per-channel cost fitted at 0 (a spec figure must be positive): none
            assert "_channel_us" in key
            continue
        source, ref = spec.provenance[key]
        assert source == "measured" and ref.startswith(who)
        assert "validation/fit/fit_train.py" in ref and f"validation/results/{gpu}/train.jsonl.gz" in ref
        for name in ("h100-sxm", "h200-sxm", "a100"):
            assert getattr(load_spec(name), key) is None, name


def test_training_batch_norm_classes():
    """Training batch norm: cuDNN's one kernel (fp32, fp16 with fp32 parameters), ATen's
    native three in bf16; priced by the channel-wave law with the H100's figures, the
    neutral law (no figures) unchanged from the plain norm kernel."""
    from gpusim.cost.classes import bn_train_us
    spec = spec_for("h100")
    # 16 channels of a big plane: one wave, slower than 2,048 channels of a small one with
    # more bytes in all
    assert bn_train_us(19.27e6, 16, 0.39, 0.1, spec) > bn_train_us(38.5e6, 2048, 0.39, 0.1, spec)
    m = torch.nn.Sequential(torch.nn.Conv2d(8, 8, 3, padding=1), torch.nn.BatchNorm2d(8))
    opt = torch.optim.SGD(m.parameters(), lr=0.1)

    def step(x):
        opt.zero_grad(set_to_none=True)
        with torch.autocast("cuda", dtype=torch.bfloat16):
            y = m(x)
        y.float().mean().backward()
        opt.step()
    p = gpusim.predict(step, (torch.randn(2, 8, 8, 8),), gpu=spec)
    bn = [k for k in p.lowering.kernels if k.variant in ("bn_train", "bn_backward")]
    assert [k.variant for k in bn] == ["bn_train"] * 3 + ["bn_backward"]
    assert all(k.impl == "aten" for k in bn)


def test_backward_classes_column_sums_and_scales(graph):
    """Backward kernels of their own classes (gpusim.cost.kernel.BACKWARD_SCALES, the column sums
    of gpusim.lower.dispatch_train.column_sum), each by its fitted figures; without them the forward
    law; the forward and optimizer kernels never change."""
    from gpusim.cost.roofline import kernel_floor
    from gpusim.hw.schema import BACKWARD_SCALE_FIGURES
    spec = spec_for("h100")
    neutral = dataclasses.replace(spec, column_sum_efficiency=None, column_sum_us=None,
                                  **{k: None for k in BACKWARD_SCALE_FIGURES})
    p, p0 = gpusim.predict(graph, gpu=spec), gpusim.predict(graph, gpu=neutral)
    g = p.graph.g
    rows = list(zip(p.lowering.kernels, p.kernels, p0.kernels))
    sums = [(k, e, e0) for k, e, e0 in rows if k.variant == "column_sum"]
    assert len(sums) == 3                   # the three Linear layers' bias gradients
    for k, e, e0 in sums:
        body = spec.column_sum_us + e.bytes / (spec.column_sum_efficiency * spec.bandwidth) * 1e6
        assert e.us == pytest.approx(max(body, kernel_floor([g.nodes[k.ops[0]]], spec)))
        assert e.us > e0.us                 # the outer reduction is slower than the stream
    mms = [(e, e0) for k, e, e0 in rows if g.nodes[k.ops[0]].get("phase") == "backward"
           and k.variant == "gemm"]
    assert mms and all(e.us == pytest.approx(e0.us * spec.gemm_backward_scale) for e, e0 in mms)
    for k, e, e0 in rows:
        if g.nodes[k.ops[0]].get("phase") != "backward":
            assert e.us == e0.us
