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
