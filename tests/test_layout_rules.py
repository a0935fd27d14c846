"""Layouts the eager lowering reads off a meta-traced graph (gpusim.lower.layout.strided,
gpusim.lower.conv.conv_layout): which row-wise kernels copy a transposed input first, and
which convolutions run channels-last behind elementwise ops."""

import torch
import torch.nn as nn
import torch.nn.functional as F

from gpusim.capture.tracing import capture
from gpusim.hw.spec import load_spec
from gpusim.predict.pipeline import lower

H100 = load_spec("h100-sxm-calibrated")
BF16 = torch.bfloat16


class MixerBlock(nn.Module):
    """MLP-Mixer's stem and one block: the residual stream is the patch embedding's
    transpose, so both norms copy it and the token MLP runs over a transposed input."""

    def __init__(self):
        super().__init__()
        self.stem = nn.Conv2d(3, 64, 16, 16)
        self.norm1, self.norm2 = nn.LayerNorm(64), nn.LayerNorm(64)
        self.tok, self.ch = nn.Linear(16, 16), nn.Linear(64, 64)

    def forward(self, x):
        x = self.stem(x).flatten(2).transpose(1, 2)
        x = x + self.tok(self.norm1(x).transpose(1, 2)).transpose(1, 2)
        return x + self.ch(self.norm2(x))


def _kernels(fn, *args):
    g = capture(fn, args)
    return g, [(g.g.nodes[k.ops[0]]["op"].split(".")[1], k.role, k.variant)
               for k in lower(g, "eager", spec=H100).kernels]


def test_transposed_stream_copies_before_norms_and_the_token_linear():
    for batch, token_copy in ((1, False), (2, True)):
        m = MixerBlock().to(device="meta", dtype=BF16)
        _, ks = _kernels(m, torch.empty(batch, 3, 64, 64, device="meta", dtype=BF16))
        norms = [i for i, k in enumerate(ks) if k[0] == "layer_norm" and k[1] == "main"]
        assert all(ks[i - 1] == ("layer_norm", "aux", "strided_copy") for i in norms), ks
        lin = [k for k in ks if k[0] == "linear"]
        assert (lin[0] == ("linear", "aux", "strided_copy")) == token_copy, lin
        # the token GEMM adds its bias apart; the channel MLP's input is a layer norm's
        # output, contiguous: one GEMM with its bias
        assert lin[-2:] == [("linear", "aux", "conv_bias"), ("linear", "main", "gemm")] or \
            lin.count(("linear", "aux", "conv_bias")) == 1
        assert len(lin) == 3 + token_copy, lin


def test_permute_of_a_channels_last_tensor_is_contiguous():
    """ConvNeXt's LayerNorm2d: a permute to NHWC of an NCHW conv output copies; of a
    tensor laid out channels-last (the permute back of a norm's NHWC output), it does not."""
    conv = nn.Conv2d(32, 32, 3, padding=1).to(device="meta", dtype=BF16)
    norm = nn.LayerNorm(32).to(device="meta", dtype=BF16)

    def f(x):
        y = norm(conv(x).permute(0, 2, 3, 1)).permute(0, 3, 1, 2)
        return norm((y + 1.0).permute(0, 2, 3, 1))
    _, ks = _kernels(f, torch.empty(2, 32, 16, 16, device="meta", dtype=BF16))
    copies = [k for k in ks if k == ("layer_norm", "aux", "strided_copy")]
    assert len(copies) == 1, ks


def test_channels_last_through_elementwise_ops():
    """A 1x1 conv over a channels-last input writes channels-last; a StarReLU after it keeps
    that layout (TensorIterator), so the 7x7 depthwise conv runs cuDNN's NHWC kernel, not
    ATen's NCHW one (caformer's SepConv: ``conv2d_c1_k1_nhwc``)."""
    pw = nn.Conv2d(64, 128, 1, bias=False).to(device="meta", dtype=BF16)
    dw = nn.Conv2d(128, 128, 7, padding=3, groups=128, bias=False).to(device="meta", dtype=BF16)

    def f(x):
        y = pw(x.permute(0, 3, 1, 2))
        return dw(0.8 * F.relu(y) ** 2 + 0.1)
    _, ks = _kernels(f, torch.empty(1, 64, 64, 64, device="meta", dtype=BF16))
    convs = [k for k in ks if k[0] == "conv2d" and k[1] == "main"]
    assert [k[2] for k in convs] == ["conv", "depthwise"], ks
