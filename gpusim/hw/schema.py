"""The schema of a GPU spec file: its sections and figures, the sources a figure may cite, and the
error a bad file raises. Read by the loader (:mod:`gpusim.hw.spec`), the architecture table
(:mod:`gpusim.hw.arch`) and the writer (:mod:`gpusim.hw.spec_io`)."""

from __future__ import annotations

import tomllib
from pathlib import Path

from gpusim.util.errors import GpusimError

ALIASES = {"a100": "a100-sxm4-80gb", "v100": "v100-sxm2-16gb", "h100": "h100-sxm",
           "h200": "h200-sxm", "a100-40gb": "a100-sxm4-40gb", "a100-80gb": "a100-sxm4-80gb",
           "v100-16gb": "v100-sxm2-16gb", "v100-32gb": "v100-sxm2-32gb", "a6000": "rtx-a6000",
           "3090": "rtx3090", "3090ti": "rtx3090ti", "4090": "rtx4090"}
UNITS = ("fp64", "fp32", "tf32_tc", "fp16_tc", "bf16_tc")
REQUIRED_UNITS = ("fp64", "fp32", "fp16_tc")

MEMORY = ("bandwidth_gbs", "capacity_gib", "l2_mib")
COMPUTE = ("sm_count", "boost_clock_mhz", "smem_per_sm_kib", "registers_per_sm")
MODEL = ("mem_efficiency", "l2_bandwidth_gbs", "l2_resident_fraction", "kernel_fixed_us",
         "kernel_min_us", "cuda_core_efficiency", "matmul_efficiency", "matmul_tile_m",
         "matmul_tile_n")
# Optional [model] fields: effects of eager PyTorch's own (ATen) kernels and floors by
# kernel class, measured by `gpusim calibrate`. A spec without them predicts as if
# those kernels were as good as a plain copy (fraction 1) with the common floor.
#: backward kernels' time over their forward law's (gpusim.cost.kernel.BACKWARD_SCALES)
BACKWARD_SCALE_FIGURES = ("conv_backward_scale", "conv_backward_scale_16bit", "conv_backward_scale_1x1",
                          "conv_backward_scale_1x1_16bit", "depthwise_dgrad_scale",
                          "depthwise_wgrad_scale", "depthwise_wgrad_scale_16bit",
                          "depthwise_aten_dgrad_scale", "depthwise_aten_wgrad_scale",
                          "gemm_backward_scale")
OPTIONAL_MODEL = ("aten_strided_efficiency", "aten_strided_efficiency_16bit",
                  "aten_reduction_efficiency", "aten_norm_efficiency",
                  "aten_norm_efficiency_16bit", "reduction_min_us", "gemm_min_us",
                  "layout_transform_efficiency", "bn_eval_efficiency",
                  "depthwise_aten_efficiency", "matmul_align1_efficiency",
                  "attention_fp32_efficiency", "bn_eval_efficiency_16bit",
                  "conv_efficiency_scale", "conv_min_us", "conv_stem_us", "conv_stem_tflops",
                  "matmul_align2_efficiency", "gemm_eager_min_us", "gemm_mem_efficiency",
                  "attention_efficiency", "attention_mask_efficiency", "attention_min_us",
                  "gemv_fp32_efficiency", "conv_simt_efficiency", "mta_efficiency",
                  "matmul_tc_efficiency",
                  "bn_train_efficiency", "bn_train_efficiency_16bit",
                  "bn_backward_efficiency", "bn_backward_efficiency_16bit",
                  "bn_native_train_efficiency", "bn_native_backward_efficiency",
                  "bn_train_channel_us", "bn_train_channel_us_16bit", "bn_backward_channel_us",
                  "bn_backward_channel_us_16bit", "bn_native_train_channel_us",
                  "bn_native_backward_channel_us", "mta_launch_us", "column_sum_efficiency",
                  "column_sum_us") + BACKWARD_SCALE_FIGURES
FRACTIONS = ("mem_efficiency", "l2_resident_fraction", "cuda_core_efficiency",
             "matmul_efficiency", "aten_strided_efficiency", "aten_strided_efficiency_16bit",
             "aten_reduction_efficiency", "aten_norm_efficiency", "aten_norm_efficiency_16bit")
#: kernel-class figures that are fractions of a datasheet peak (a kernel cannot beat it)
FRACTIONS += ("layout_transform_efficiency", "bn_eval_efficiency", "bn_eval_efficiency_16bit",
              "depthwise_aten_efficiency", "depthwise_efficiency", "depthwise_efficiency_16bit",
              "matmul_align1_efficiency", "matmul_align2_efficiency", "attention_fp32_efficiency",
              "gemm_mem_efficiency", "gemv_fp32_efficiency", "attention_efficiency",
              "attention_mask_efficiency", "conv_simt_efficiency", "mta_efficiency",
              "bn_train_efficiency", "bn_train_efficiency_16bit", "bn_backward_efficiency",
              "bn_backward_efficiency_16bit", "bn_native_train_efficiency",
              "bn_native_backward_efficiency", "column_sum_efficiency")
#: matmul_tc_efficiency is not one: GeForce datasheets state the tensor peak at the rated
#: boost clock, which those cards run above under load while power allows (an RTX 3090's
#: published torch.matmul reaches 75.6 TFLOP/s against the 71 its datasheet gives), so
#: large GEMMs may reach more than the datasheet peak; it is bounded by OVER_PEAK instead
OVER_PEAK = {"matmul_tc_efficiency": 1.25}
INTS = ("sm_count", "registers_per_sm", "matmul_tile_m", "matmul_tile_n", "attention_tile_q",
        "attention_tile_kv")
SECTIONS = {"memory": MEMORY, "compute": COMPUTE, "model": MODEL}


class SpecError(GpusimError):
    """A spec that cannot be found or is malformed; one line naming file and field."""


# CNN/ViT kernel classes (gpusim.lower.dispatch, fitted from the sweeps' cnn and norms points)
# The GPU's steady state: wall of a stream kept full over its profiled kernel sum. A GPU
# figure (gaps between kernels on the device, clocks under sustained load), not a host's:
# no CPU issues work inside a CUDA graph replay, so it stays in the GPU spec.
LEASE_MODEL = ("stream_busy_factor",)
OPTIONAL_MODEL += LEASE_MODEL
#: the device's time between consecutive kernels of a replayed CUDA graph (validation/fit/fit_graph_gap.py
#: on validation/results/<gpu>/graph_gap/): the GPU's front end, not a host (no CPU issues a graph's
#: kernels). Without it the host profile's ``cudagraph_kernel_us`` stands
GRAPH_FIGURES = ("graph_kernel_gap_us",)
OPTIONAL_MODEL += GRAPH_FIGURES
#: skinny GEMMs as a decode step streams its weights (validation/fit/fit_skinny.py on
#: validation/results/<gpu>/skinny_gemm.jsonl): a GPU with that sweep has them; without them
#: the gemm law streams at gemm_mem_efficiency (the dispatch sweep's, measured after an L2 flush)
STREAM_FIGURES = ("gemm_stream_us", "gemm_stream_efficiency", "gemm_stream_k_us", "gemm_stream_k_ns")
OPTIONAL_MODEL += STREAM_FIGURES
#: mid-size 16-bit GEMMs' K-loop latency (validation/fit/fit_gemm_kloop.py on the dispatch sweep,
#: validation/sweeps/<gpu>.json): without them the gemm law prices those products by the roofline
KLOOP_FIGURES = ("gemm_kloop_us", "gemm_kloop_ns")
OPTIONAL_MODEL += KLOOP_FIGURES
#: 1x1 convolutions run by cuBLAS over NCHW (validation/fit/fit_conv_gemm.py on the cnn sweeps'
#: cuBLAS-run 1x1 points): without them the conv law (cuDNN's implicit-GEMM scale and floor)
CONV_GEMM_FIGURES = ("conv_gemm_us", "conv_gemm_efficiency")
OPTIONAL_MODEL += CONV_GEMM_FIGURES
FRACTIONS += ("conv_gemm_efficiency",)
#: an eval batch norm inside a model, whose per-channel parameters the model leaves cold in L2
#: (validation/fit/fit_chain.py on validation/results/<gpu>/cnn_chain.jsonl): without it the
#: batch-norm law as its sweeps measured it (parameters L2-resident)
CHAIN_FIGURES = ("bn_cold_us",)
OPTIONAL_MODEL += CHAIN_FIGURES
#: a 16-bit 1x1 convolution over NCHW whose map breaks 16-byte alignment, run by cuBLAS's align2 /
#: align1 CUTLASS kernels as one GEMM per image (validation/fit/fit_conv_align.py on the GPU's
#: cnn_dispatch sweeps): fraction of the tensor peak, fixed µs, µs per input channel (the K loop of
#: a grid that does not fill the GPU); without them the misaligned GEMM law of a linear
CONV_ALIGN_FIGURES = ("conv_align2_efficiency", "conv_align2_us", "conv_align2_k_us",
                      "conv_align1_efficiency", "conv_align1_us", "conv_align1_k_us")
OPTIONAL_MODEL += CONV_ALIGN_FIGURES
FRACTIONS += ("conv_align2_efficiency", "conv_align1_efficiency")
#: a stem convolution of a small filter (fewer than 8 input channels, 3x3 or 4x4) on a channels-last input,
#: as torch.compile and channels_last models run it: cuDNN's NHWC kernels, which differ by dtype, fixed µs +
#: FLOPs (output channels rounded up to 32) at TFLOPS (validation/fit/fit_stems.py on the GPU's cnn_stems
#: sweep); ``direct``: cuDNN's grouped direct kernel, which bf16 4x4/4 stems of up to 160 px run
#: (:data:`gpusim.cost.classes.STEM_DIRECT_MAX_PX`); without them the conv law
STEM_NHWC_FIGURES = tuple(f"conv_stem_nhwc_{dt}_{f}" for dt in ("fp32", "fp16", "bf16", "direct")
                          for f in ("us", "tflops"))
OPTIONAL_MODEL += STEM_NHWC_FIGURES
#: ATen's reduction kernel by its launch configuration (validation/fit/fit_aten_reduce.py on the GPU's aten_reduce
#: sweep; gpusim.cost.aten_reduce): fixed µs, DRAM stream of bandwidth, a serial load's latency from DRAM and from L2
#: (ns), µs a wave of blocks, µs of the global pass; without them the roofline's reduction stream
ATEN_REDUCE_FIGURES = ("aten_reduce_us", "aten_reduce_efficiency", "aten_reduce_load_ns", "aten_reduce_l2_load_ns",
                       "aten_reduce_wave_us", "aten_reduce_global_us")
OPTIONAL_MODEL += ATEN_REDUCE_FIGURES
FRACTIONS += ("aten_reduce_efficiency",)
#: cuDNN's layout transforms priced by their transpose tiles (validation/fit/fit_layout.py on the
#: GPU's conv sweeps; gpusim.cost.layout): without them the byte stream at layout_transform_efficiency
LAYOUT_FIGURES = ("layout_transform_us", "layout_transform_gelems", "layout_transform_dram_efficiency",
                  "layout_transform_dram_efficiency_16bit")
OPTIONAL_MODEL += LAYOUT_FIGURES
FRACTIONS += ("layout_transform_dram_efficiency", "layout_transform_dram_efficiency_16bit")
#: masked 16-bit attention's mask-read rates per layout (validation/fit/fit_sdpa_mask.py on
#: validation/results/<gpu>/sdpa_mask.jsonl): a GPU with that sweep has them; without them the
#: attention law prices every mask at attention_mask_efficiency
MASK_FIGURES = ("attention_mask_dense_tbps", "attention_mask_bcast_tbps", "attention_mask_heads_tbps",
                "attention_mask_unaligned_tile", "attention_mask_unaligned_cta_gbps")
OPTIONAL_MODEL += MASK_FIGURES
#: 16-bit single-query (decode) attention (validation/fit/fit_sdpa_decode.py on
#: validation/results/<gpu>/sdpa_decode.jsonl): a GPU with that sweep has them; without them the
#: attention law prices a decode call by its FLOPs and every such call adds cuDNN's reduction kernel
DECODE_ATTENTION_FIGURES = ("attention_decode_us", "attention_decode_dim_ns", "attention_decode_tbps", "attention_decode_key_ns_d64",
                            "attention_decode_key_ns_d128", "attention_decode_key_ns_d256",
                            "attention_decode_norm", "attention_decode_mask_factor",
                            "attention_decode_split_ctas", "attention_decode_reduce_us",
                            "attention_decode_reduce_ns")
OPTIONAL_MODEL += DECODE_ATTENTION_FIGURES
#: ViT's small ATen kernels (validation/fit/fit_vit_small_ops.py on validation/results/<gpu>/
#: vit_small_ops.jsonl; gpusim.cost.small_ops): without them the common stream and floors
SMALL_OP_FIGURES = ("gather_vec_us", "gather_vec_index_ns", "gather_elem_us", "gather_elem_ps",
                    "bcast_mul_us", "bcast_mul_ps", "bcast_mul_us_16bit", "bcast_mul_ps_16bit",
                    "layer_norm_floor_us", "layer_norm_floor_us_16bit", "layer_norm_floor_ch_ns")
OPTIONAL_MODEL += SMALL_OP_FIGURES
#: fp32 attention's memory-efficient kernel by waves of key blocks (validation/fit/fit_attention_fp32.py on the
#: dispatch sweep's fp32 sdpa points; gpusim.cost.vit_kernels): without them, the FLOPs at attention_fp32_efficiency
ATTENTION_FP32_FIGURES = ("attention_fp32_block_us", "attention_fp32_block_us_wide", "attention_fp32_ctas_per_sm",
                          "attention_fp32_mask_factor")
OPTIONAL_MODEL += ATTENTION_FP32_FIGURES
#: ViT patch embeddings (validation/fit/fit_patchify.py on validation/results/<gpu>/vit_patchify.jsonl;
#: gpusim.cost.vit_kernels.patchify_us): without them, the stem law (conv_stem_us, conv_stem_tflops)
PATCHIFY_FIGURES = ("patchify_wave_us_16bit", "patchify_wave_tap_ns_16bit", "patchify_next_wave_16bit",
                    "patchify_narrow_tap_ns_16bit",
                    "patchify_narrow_ps_16bit", "patchify_tap_ns", "patchify_tflops")
OPTIONAL_MODEL += PATCHIFY_FIGURES
FRACTIONS += ("gemm_stream_efficiency",)
OPTIONAL_MODEL += ("depthwise_us", "depthwise_tap_us", "depthwise_efficiency",
                   "depthwise_us_16bit", "depthwise_tap_us_16bit", "depthwise_efficiency_16bit",
                   "weight_transform_us", "layer_norm_row_ns", "layer_norm_row_ns_16bit")
#: the query and key/value tile of the GPU's 16-bit fused attention kernel (cuDNN's
#: ``..._64x128x64_...``): a sequence is computed in whole tiles
OPTIONAL_MODEL += ("attention_tile_q", "attention_tile_kv")
#: the eager kernel-class figures validation/fit/fit_dispatch.py fits on one GPU's sweep: a
#: GPU's own, or None (gpusim.cost.kernel's neutral law for the class); never another GPU's
CLASS_FIGURES = ("layout_transform_efficiency", "bn_eval_efficiency", "bn_eval_efficiency_16bit",
                 "depthwise_aten_efficiency", "depthwise_us", "depthwise_tap_us",
                 "depthwise_efficiency", "depthwise_us_16bit", "depthwise_tap_us_16bit",
                 "depthwise_efficiency_16bit", "weight_transform_us", "layer_norm_row_ns",
                 "layer_norm_row_ns_16bit", "matmul_align1_efficiency", "matmul_align2_efficiency",
                 "attention_fp32_efficiency", "conv_efficiency_scale", "conv_min_us", "conv_stem_us",
                 "conv_stem_tflops", "gemm_eager_min_us", "gemm_mem_efficiency",
                 "gemv_fp32_efficiency", "attention_efficiency", "attention_mask_efficiency",
                 "attention_min_us", "conv_simt_efficiency")
#: the training kernel classes validation/fit/fit_train.py fits on one GPU's training-step
#: records (validation/results/<gpu>/train.jsonl.gz), not on a microbenchmark sweep: kept
#: out of CLASS_FIGURES' every-calibrated-spec check because only the H100 has training
#: records; a GPU without one (the H200) prices the class by its neutral law
TRAIN_FIGURES = ("mta_efficiency", "bn_train_efficiency", "bn_train_efficiency_16bit", "bn_backward_efficiency",
                 "bn_backward_efficiency_16bit", "bn_native_train_efficiency",
                 "bn_native_backward_efficiency", "bn_train_channel_us", "bn_train_channel_us_16bit",
                 "bn_backward_channel_us", "bn_backward_channel_us_16bit",
                 "bn_native_train_channel_us", "bn_native_backward_channel_us", "mta_launch_us",
                 "column_sum_efficiency", "column_sum_us") + BACKWARD_SCALE_FIGURES
#: ATen's elementwise paths and pooling kernels as the broad sample ran them, fitted by
#: validation/fit/fit_broad.py on one GPU's broad AMP records
#: (validation/results/<gpu>/broad.jsonl.gz), so, like TRAIN_FIGURES, outside CLASS_FIGURES:
#: a GPU without them prices the class by its old law (gpusim.cost.roofline.aten_fraction, the
#: reduction stream). Fractions of a copy's bandwidth; pool rates in G outputs/s.
#: channels-last training batch norm, fitted by validation/fit/fit_bn_nhwc.py on one GPU's
#: bn_train sweep (validation/results/<gpu>/bn_train.json); a GPU without them prices the classes
#: by the roofline
BN_NHWC_FIGURES = tuple(f"bn_nhwc_{c}_{f}" for c in ("fw", "bw", "stats", "transform", "reduce", "elemt")
                        for f in ("us", "efficiency", "iter_us") if f != "iter_us" or c not in ("fw", "bw"))
OPTIONAL_MODEL += BN_NHWC_FIGURES
FRACTIONS += tuple(f for f in BN_NHWC_FIGURES if f.endswith("_efficiency"))
BROAD_FIGURES = ("aten_cast_efficiency", "aten_strided_cast_efficiency",
                 "aten_permuted_efficiency", "aten_permuted_efficiency_16bit",
                 "pool_output_rate", "pool_output_rate_nhwc",
                 "depthwise_aten_output_rate_fp16", "depthwise_aten_tap_rate_fp16",
                 "depthwise_nchw_plane_tap_ps_fp16", "depthwise_nchw_output_ps_fp16",
                 "depthwise_nchw_output_tap_ps_fp16")
OPTIONAL_MODEL += BROAD_FIGURES
FRACTIONS += BROAD_FIGURES[:4]
#: eval batch norm's parallelism (gpusim.cost.classes.bn_eval_law), fitted by validation/fit/fit_bn.py
#: on one GPU's ``bn`` sweep (validation/sweeps/<gpu>-bn.json): SM-cycles per NCHW plane
#: (over all SMs) and per element of one plane (one block), cycles per element of one
#: image of cuDNN's channels-last fp32 kernel, and the channels-last kernels' floors (us)
BN_EVAL_FIGURES = ("bn_plane_cycles", "bn_plane_element_cycles", "bn_nhwc_image_cycles",
                   "bn_nhwc_min_us", "bn_cl_min_us")
OPTIONAL_MODEL += BN_EVAL_FIGURES
#: Inductor's Triton kernels (gpusim.cost.triton), fitted by validation/fit/fit_triton.py on one GPU's
#: triton_bench sweep (validation/results/<gpu>/triton_bench.jsonl): the stream's fraction of the
#: bandwidth (pointwise and persistent kernels; looped reductions apart), the fixed cost and floor,
#: the rate at which a kernel reads an intermediate the kernels before it wrote (GB/s: the L2 credit
#: as the sweep's producer -> consumer chains see it) and SM cycles per element of one heavy op by
#: class (erf, tanh, exp, sqrt, div: gpusim.cost.triton.HEAVY_OPS); a GPU without them prices Triton kernels by the roofline
TRITON_FIGURES = ("triton_mem_efficiency", "triton_red_efficiency", "triton_fixed_us", "triton_min_us",
                  "triton_l2_bandwidth_gbs", "triton_erf_cycles", "triton_tanh_cycles", "triton_exp_cycles",
                  "triton_sqrt_cycles", "triton_div_cycles")
OPTIONAL_MODEL += TRITON_FIGURES
FRACTIONS += ("triton_mem_efficiency", "triton_red_efficiency")
#: a prefill's ATen classes on warm operands (validation/fit/fit_prefill_classes.py on one GPU's
#: prefill_classes sweep, validation/results/<gpu>/prefill_classes.jsonl): the floor of ATen's
#: non-vectorised elementwise kernel (µs), a row reduction's walk per column of one row (ns), and
#: CatArrayBatchedCopy over strided inputs (fraction of a copy's bandwidth); a GPU without them
#: prices the classes as before (kernel_min_us, the reduction stream, aten_strided_efficiency); and
#: the key tile over which 16-bit causal attention skips masked tiles (gpusim.cost.laws.causal_share)
PREFILL_FIGURES = ("aten_strided_min_us", "reduction_col_ns", "aten_cat_strided_efficiency",
                   "attention_causal_tile")
OPTIONAL_MODEL += PREFILL_FIGURES
FRACTIONS += ("aten_cat_strided_efficiency",)
#: a decode step's eager classes at 1-128 rows (validation/fit/fit_decode_classes.py on one GPU's decode_classes
#: sweep, validation/results/<gpu>/decode_classes.jsonl; gpusim.cost.few_rows): an appending cat's fixed cost (µs)
#: and rate (fraction of a copy's bandwidth), the non-vectorised 16-bit elementwise kernel's time by elements a thread
#: computes (µs) under its floor, the floor of the unrolled kernel with casts (µs); a GPU without them keeps the
#: laws before (a contiguous copy, aten_strided_min_us, kernel_min_us)
DECODE_CLASS_FIGURES = ("aten_cat_append_us", "aten_cat_append_efficiency", "aten_strided_lane_us",
                        "aten_strided_elem_us", "aten_strided_grid_us", "aten_cast_min_us", "aten_cat_strided_min_us",
                        "layer_norm_wide_us", "layer_norm_wide_ns")
OPTIONAL_MODEL += DECODE_CLASS_FIGURES
FRACTIONS += ("aten_cat_append_efficiency",)
#: where a figure comes from. measured: ref names the GPU, date and command or record;
#: derived: the rule and its inputs; assumed: the assumption and its uncertainty
SOURCES = ("datasheet", "measured", "derived", "assumed")
#: a plain number in a user's own spec file (builtin specs must say where each came from)
USER_SOURCE = "user"



def builtin_dir() -> Path:
    here = Path(__file__).resolve().parents[2] / "hwspecs"
    if here.is_dir() and any(here.glob("*.toml")):
        return here
    from importlib.resources import files
    return Path(str(files("gpusim.hwspecs")))



def read_toml(path: Path, error=None) -> dict:
    """A data file's TOML document; unreadable or invalid files are one-line ``error``s
    (a GPU spec's :class:`SpecError`, a host profile's ``HostError``)."""
    error = error or SpecError
    try:
        with open(path, "rb") as f:
            return tomllib.load(f)
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as e:
        raise error(f"{path}: not valid TOML ({e})") from None
    except OSError as e:
        raise error(f"{path}: cannot read ({e.strerror})") from None

