"""The held-out kernel line-up's measured classes (validation.score.holdout_kernels)."""

from validation.score.holdout_kernels import measured_class


def test_measured_classes_follow_the_profilers_names():
    assert measured_class("void cudnn::engines_precompiled::nchwToNhwcKernel<__nv_bfloat16>") == "layout"
    assert measured_class("cudnn_generated_fort_native_sdpa_sm90_flash_fprop_wgmma_f16") == "attention"
    assert measured_class("void cutlass__5x_cudnn::Kernel<cutlass_tensorop_bf16_s16816fprop_optimized>") == "conv"
    assert measured_class("nvjet_sm90_tst_64x40_64x16_1x4_h_bz_TNT") == "gemm"
    assert measured_class("void at::native::index_elementwise_kernel<128, 4>") == "index"
    assert measured_class("void at::native::unrolled_elementwise_kernel<at::native::direct_copy_kernel_cuda>") == "copy"
    assert measured_class("scal_kernel") == "other"


def test_vit_small_ops_sweep_dry_runs_on_cpu(tmp_path):
    """The sweep a gather / layer-scale / narrow layer-norm law needs runs its code on CPU."""
    import json
    from validation.measure import vit_small_ops
    out = tmp_path / "vso.jsonl"
    assert vit_small_ops.main(["--out", str(out), "--device", "cpu", "--reps", "1"]) == 0
    lines = [json.loads(x) for x in out.read_text().splitlines()]
    assert lines[0]["kind"] == "environment" and lines[-1]["kind"] == "summary"
    assert {r["op"] for r in lines[1:-1]} == {"gather", "layer_scale", "layer_norm"}
    assert len(vit_small_ops.points()) == 70
