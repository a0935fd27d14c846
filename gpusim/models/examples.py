"""Built-in examples: the classic fusion cases and real models in plain ``torch.nn``.

Each example builds ``(callable_or_module, args)`` on any device; on ``meta`` nothing
is allocated, so the 7B decoder builds instantly. Inputs are random (never zeros).
``presets`` are the sizes the validation harness measures: ``small`` (launch-bound),
``medium`` (fits a 50 MB L2), ``large`` (several times L2).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Callable, Mapping

import torch
import torch.nn as nn
import torch.nn.functional as F

from gpusim.util.errors import GpusimError


class ModelError(GpusimError):
    """A model spec that cannot be loaded; the message says what to do."""


@dataclass(frozen=True)
class Example:
    name: str
    description: str
    category: str
    defaults: Mapping[str, int | float]
    build: Callable
    presets: Mapping[str, Mapping[str, int]] = field(default_factory=dict)
    dtypes: tuple = ("float32", "float16", "bfloat16")


def _randn(*shape, device, dtype):
    return torch.randn(*shape, device=device, dtype=dtype)


def _module(cls, device, dtype, *a, **k):
    with torch.device(device):
        m = cls(*a, **k)
    return m.to(dtype).eval()


# ---------------------------------------------------------------- classics
def add_relu_mul(x, bias, scale: float = 1.5):
    return torch.relu(x + bias) * scale


def mul2_relu(x):
    return torch.relu(x * 2)


def matmul_sigmoid(a, b):
    return torch.sigmoid(a @ b)


def gelu_tanh(x):
    return 0.5 * x * (1 + torch.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x ** 3)))


def softmax_manual(x):
    e = torch.exp(x - x.amax(-1, keepdim=True))
    return e / e.sum(-1, keepdim=True)


def lstm_cell(x, h, c, w_ih, w_hh, b):
    gates = x @ w_ih.t() + h @ w_hh.t() + b
    i, f, g, o = gates.chunk(4, 1)
    c2 = torch.sigmoid(f) * c + torch.sigmoid(i) * torch.tanh(g)
    h2 = torch.sigmoid(o) * torch.tanh(c2)
    return h2, c2


class ConvBNReLU(nn.Module):
    def __init__(self, cin, cout):
        super().__init__()
        self.conv = nn.Conv2d(cin, cout, 3, padding=1, bias=False)
        self.bn = nn.BatchNorm2d(cout)

    def forward(self, x):
        return torch.relu(self.bn(self.conv(x)))


class LayerNormAdd(nn.Module):
    def __init__(self, d):
        super().__init__()
        self.ln = nn.LayerNorm(d)

    def forward(self, x, z):
        return self.ln(x + z)


class QKV(nn.Module):
    """Separate Q, K and V projections of one input (horizontal-fusion candidate)."""

    def __init__(self, d):
        super().__init__()
        self.q, self.k, self.v = nn.Linear(d, d), nn.Linear(d, d), nn.Linear(d, d)

    def forward(self, x):
        return self.q(x), self.k(x), self.v(x)


class LinearReluLN(nn.Module):
    def __init__(self, d):
        super().__init__()
        self.fc, self.ln = nn.Linear(d, d), nn.LayerNorm(d)

    def forward(self, x):
        return self.ln(torch.relu(self.fc(x)))


class Block(nn.Module):
    """Pre-LN transformer block: LN -> QKV -> SDPA -> proj -> +res -> LN -> MLP -> +res."""

    def __init__(self, d, heads, causal=False, act="gelu"):
        super().__init__()
        self.heads, self.causal = heads, causal
        self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.qkv, self.proj = nn.Linear(d, 3 * d), nn.Linear(d, d)
        self.fc1, self.fc2 = nn.Linear(d, 4 * d), nn.Linear(4 * d, d)
        self.act = act

    def forward(self, x):
        b, s, d = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(d, dim=-1)
        q, k, v = (t.view(b, s, self.heads, d // self.heads).transpose(1, 2) for t in (q, k, v))
        a = F.scaled_dot_product_attention(q, k, v, is_causal=self.causal)
        x = x + self.proj(a.transpose(1, 2).reshape(b, s, d))
        h = F.gelu(self.fc1(self.ln2(x)), approximate="tanh" if self.act == "gelu_tanh" else "none")
        return x + self.fc2(h)


# ---------------------------------------------------------------- models
class Bottleneck(nn.Module):
    expansion = 4

    def __init__(self, cin, width, stride):
        super().__init__()
        cout = width * 4
        self.conv1, self.bn1 = nn.Conv2d(cin, width, 1, bias=False), nn.BatchNorm2d(width)
        self.conv2 = nn.Conv2d(width, width, 3, stride=stride, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(width)
        self.conv3, self.bn3 = nn.Conv2d(width, cout, 1, bias=False), nn.BatchNorm2d(cout)
        self.down = None
        if stride != 1 or cin != cout:
            self.down = nn.Sequential(nn.Conv2d(cin, cout, 1, stride=stride, bias=False),
                                      nn.BatchNorm2d(cout))

    def forward(self, x):
        y = torch.relu(self.bn1(self.conv1(x)))
        y = torch.relu(self.bn2(self.conv2(y)))
        y = self.bn3(self.conv3(y))
        return torch.relu(y + (x if self.down is None else self.down(x)))


class ResNet50(nn.Module):
    """ResNet-50 (He et al. 2015): bottleneck stages [3, 4, 6, 3], 25.6M parameters."""

    def __init__(self, classes=1000):
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, 64, 7, 2, 3, bias=False), nn.BatchNorm2d(64),
                                  nn.ReLU(), nn.MaxPool2d(3, 2, 1))
        layers, cin = [], 64
        for width, n, stride in ((64, 3, 1), (128, 4, 2), (256, 6, 2), (512, 3, 2)):
            for i in range(n):
                layers.append(Bottleneck(cin, width, stride if i == 0 else 1))
                cin = width * 4
        self.layers = nn.Sequential(*layers)
        self.fc = nn.Linear(2048, classes)

    def forward(self, x):
        x = self.layers(self.stem(x))
        return self.fc(torch.flatten(F.adaptive_avg_pool2d(x, 1), 1))


class GPT2(nn.Module):
    """GPT-2 small: 12 pre-LN blocks, d 768, 12 heads, tied LM head (124M parameters)."""

    def __init__(self, layers=12, d=768, heads=12, vocab=50257, ctx=1024):
        super().__init__()
        self.wte, self.wpe = nn.Embedding(vocab, d), nn.Embedding(ctx, d)
        self.blocks = nn.ModuleList(Block(d, heads, causal=True, act="gelu_tanh") for _ in range(layers))
        self.ln_f = nn.LayerNorm(d)
        self.head = nn.Linear(d, vocab, bias=False)
        self.head.weight = self.wte.weight

    def forward(self, idx):
        pos = torch.arange(idx.shape[1], device=idx.device)
        x = self.wte(idx) + self.wpe(pos)
        for blk in self.blocks:
            x = blk(x)
        return self.head(self.ln_f(x))


class RMSNorm(nn.Module):
    def __init__(self, d, eps=1e-6):
        super().__init__()
        self.weight, self.eps = nn.Parameter(torch.ones(d)), eps

    def forward(self, x):
        if hasattr(F, "rms_norm"):
            return F.rms_norm(x, (x.shape[-1],), self.weight, self.eps)
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight


def _rotate_half(x):
    a, b = x.chunk(2, dim=-1)
    return torch.cat((-b, a), dim=-1)


class LlamaLayer(nn.Module):
    def __init__(self, d, heads, ffn):
        super().__init__()
        self.heads = heads
        self.attn_norm, self.mlp_norm = RMSNorm(d), RMSNorm(d)
        self.wq, self.wk = nn.Linear(d, d, bias=False), nn.Linear(d, d, bias=False)
        self.wv, self.wo = nn.Linear(d, d, bias=False), nn.Linear(d, d, bias=False)
        self.w1, self.w3 = nn.Linear(d, ffn, bias=False), nn.Linear(d, ffn, bias=False)
        self.w2 = nn.Linear(ffn, d, bias=False)

    def forward(self, x, cos, sin):
        b, s, d = x.shape
        h = self.attn_norm(x)
        q, k, v = (w(h).view(b, s, self.heads, d // self.heads).transpose(1, 2)
                   for w in (self.wq, self.wk, self.wv))
        q = q * cos + _rotate_half(q) * sin
        k = k * cos + _rotate_half(k) * sin
        a = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.wo(a.transpose(1, 2).reshape(b, s, d))
        h = self.mlp_norm(x)
        return x + self.w2(F.silu(self.w1(h)) * self.w3(h))


class Llama(nn.Module):
    """LLaMA-style decoder: RMSNorm, rotary embeddings, causal SDPA, SwiGLU, no biases."""

    def __init__(self, n_layers=32, d_model=4096, n_heads=32, ffn=11008, vocab=32000, seq=2048):
        super().__init__()
        self.embed = nn.Embedding(vocab, d_model)
        self.layers = nn.ModuleList(LlamaLayer(d_model, n_heads, ffn) for _ in range(n_layers))
        self.norm = RMSNorm(d_model)
        self.head = nn.Linear(d_model, vocab, bias=False)
        hd = d_model // n_heads
        inv = 1.0 / (10000 ** (torch.arange(0, hd, 2, dtype=torch.float32) / hd))
        ang = torch.outer(torch.arange(seq, dtype=torch.float32), inv)
        ang = torch.cat((ang, ang), dim=-1)
        self.register_buffer("cos", ang.cos(), persistent=False)
        self.register_buffer("sin", ang.sin(), persistent=False)

    def forward(self, idx):
        s = idx.shape[1]
        x = self.embed(idx)
        cos, sin = self.cos[:s].to(x.dtype), self.sin[:s].to(x.dtype)
        for layer in self.layers:
            x = layer(x, cos, sin)
        return self.head(self.norm(x))


# ---------------------------------------------------------------- builders
def _b_add_relu_mul(device, dtype, n):
    return add_relu_mul, (_randn(n, device=device, dtype=dtype), _randn(n, device=device, dtype=dtype))


def _b_mul2_relu(device, dtype, n):
    return mul2_relu, (_randn(n, device=device, dtype=dtype),)


def _b_matmul_sigmoid(device, dtype, m, n, k):
    return matmul_sigmoid, (_randn(m, k, device=device, dtype=dtype), _randn(k, n, device=device, dtype=dtype))


def _b_conv_bn_relu(device, dtype, batch, cin, cout, hw):
    m = _module(ConvBNReLU, device, dtype, cin, cout)
    return m, (_randn(batch, cin, hw, hw, device=device, dtype=dtype),)


def _b_layernorm_add(device, dtype, batch, seq, d):
    m = _module(LayerNormAdd, device, dtype, d)
    return m, (_randn(batch, seq, d, device=device, dtype=dtype), _randn(batch, seq, d, device=device, dtype=dtype))


def _b_gelu(device, dtype, n):
    return gelu_tanh, (_randn(n, device=device, dtype=dtype),)


def _b_softmax(device, dtype, rows, cols):
    return softmax_manual, (_randn(rows, cols, device=device, dtype=dtype),)


def _b_lstm(device, dtype, batch, inp, hidden):
    r = lambda *s: _randn(*s, device=device, dtype=dtype)  # noqa: E731
    return lstm_cell, (r(batch, inp), r(batch, hidden), r(batch, hidden), r(4 * hidden, inp) * 0.05,
                       r(4 * hidden, hidden) * 0.05, r(4 * hidden))


def _b_qkv(device, dtype, batch, seq, d):
    return _module(QKV, device, dtype, d), (_randn(batch, seq, d, device=device, dtype=dtype),)


def _b_lin_relu_ln(device, dtype, tokens, d):
    return _module(LinearReluLN, device, dtype, d), (_randn(tokens, d, device=device, dtype=dtype),)


def _b_block(device, dtype, batch, seq, d, heads):
    return _module(Block, device, dtype, d, heads), (_randn(batch, seq, d, device=device, dtype=dtype),)


def _b_resnet(device, dtype, batch, hw):
    return _module(ResNet50, device, dtype), (_randn(batch, 3, hw, hw, device=device, dtype=dtype),)


def _b_gpt2(device, dtype, batch, seq, layers):
    m = _module(GPT2, device, dtype, layers=layers)
    return m, (torch.randint(0, 50257, (batch, seq), device=device),)


def _b_llama(device, dtype, n_layers, d_model, n_heads, ffn, vocab, seq, batch):
    m = _module(Llama, device, dtype, n_layers, d_model, n_heads, ffn, vocab, seq)
    return m, (torch.randint(0, vocab, (batch, seq), device=device),)


def _pw(small, medium, large):
    return {"small": {"n": small}, "medium": {"n": medium}, "large": {"n": large}}


EXAMPLES: dict[str, Example] = {e.name: e for e in [
    Example("add_relu_mul", "x + bias -> relu -> * scale (the classic 3-kernel chain)", "classic",
            {"n": 1 << 24}, _b_add_relu_mul, _pw(4096, 1 << 20, 1 << 26)),
    Example("mul2_relu", "x * 2 -> relu", "classic", {"n": 1 << 24}, _b_mul2_relu,
            _pw(4096, 1 << 20, 1 << 26)),
    Example("matmul_sigmoid", "sigmoid(a @ b)", "classic", {"m": 2048, "n": 2048, "k": 2048},
            _b_matmul_sigmoid, {"small": {"m": 64, "n": 64, "k": 64},
                                "medium": {"m": 1024, "n": 1024, "k": 1024},
                                "large": {"m": 4096, "n": 4096, "k": 4096}}),
    Example("conv_bn_relu", "conv3x3 -> batch norm (eval) -> relu", "classic",
            {"batch": 32, "cin": 64, "cout": 64, "hw": 56}, _b_conv_bn_relu,
            {"small": {"batch": 1, "cin": 16, "cout": 16, "hw": 14},
             "medium": {"batch": 8, "cin": 64, "cout": 64, "hw": 56},
             "large": {"batch": 32, "cin": 64, "cout": 64, "hw": 112}}),
    Example("layernorm_add", "layer_norm(x + z)", "classic", {"batch": 8, "seq": 1024, "d": 1024},
            _b_layernorm_add, {"small": {"batch": 1, "seq": 4, "d": 256},
                               "medium": {"batch": 2, "seq": 512, "d": 1024},
                               "large": {"batch": 16, "seq": 2048, "d": 1024}}),
    Example("gelu_tanh", "tanh-GELU written out op by op (9 kernels eager)", "classic",
            {"n": 1 << 24}, _b_gelu, _pw(4096, 1 << 20, 1 << 26)),
    Example("softmax_manual", "exp(x - max) / sum, written out", "classic",
            {"rows": 8192, "cols": 1024}, _b_softmax,
            {"small": {"rows": 8, "cols": 128}, "medium": {"rows": 1024, "cols": 1024},
             "large": {"rows": 16384, "cols": 4096}}),
    Example("lstm_cell", "a manual LSTM cell (two matmuls, gates, state update)", "classic",
            {"batch": 64, "inp": 512, "hidden": 1024}, _b_lstm,
            {"small": {"batch": 8, "inp": 64, "hidden": 64},
             "medium": {"batch": 64, "inp": 512, "hidden": 1024},
             "large": {"batch": 1024, "inp": 1024, "hidden": 2048}}),
    Example("qkv", "separate Q, K, V projections of one input", "classic",
            {"batch": 4, "seq": 1024, "d": 1024}, _b_qkv,
            {"small": {"batch": 1, "seq": 8, "d": 128}, "medium": {"batch": 2, "seq": 512, "d": 1024},
             "large": {"batch": 8, "seq": 2048, "d": 1024}}),
    Example("linear_relu_layernorm", "linear -> relu -> layer_norm", "classic",
            {"tokens": 8192, "d": 1024}, _b_lin_relu_ln,
            {"small": {"tokens": 8, "d": 128}, "medium": {"tokens": 1024, "d": 1024},
             "large": {"tokens": 16384, "d": 2048}}),
    Example("transformer_block", "pre-LN transformer encoder block (SDPA, GELU MLP)", "classic",
            {"batch": 8, "seq": 512, "d": 768, "heads": 12}, _b_block,
            {"small": {"batch": 1, "seq": 16, "d": 128, "heads": 2},
             "medium": {"batch": 2, "seq": 256, "d": 768, "heads": 12},
             "large": {"batch": 8, "seq": 1024, "d": 1024, "heads": 16}}),
    Example("resnet50", "ResNet-50 in plain torch.nn (25.6M parameters)", "model",
            {"batch": 32, "hw": 224}, _b_resnet,
            {"small": {"batch": 1, "hw": 224}, "large": {"batch": 32, "hw": 224}},
            ("float32", "float16")),
    Example("gpt2", "GPT-2 small (124M parameters)", "model", {"batch": 1, "seq": 1024, "layers": 12},
            _b_gpt2, {"small": {"batch": 1, "seq": 128, "layers": 12},
                      "large": {"batch": 8, "seq": 512, "layers": 12}}, ("float32", "bfloat16")),
    Example("llama7b", "LLaMA-style 7B decoder (32 layers, d=4096)", "model",
            {"n_layers": 32, "d_model": 4096, "n_heads": 32, "ffn": 11008, "vocab": 32000,
             "seq": 2048, "batch": 1}, _b_llama,
            {"small": {"n_layers": 2, "seq": 128}, "large": {"n_layers": 2, "seq": 2048}},
            ("bfloat16",)),
]}


def get_example(name: str) -> Example:
    if name not in EXAMPLES:
        raise ModelError(f"unknown example {name!r}; built-ins: {', '.join(EXAMPLES)} "
                         "(or give path/to/file.py:NAME)")
    return EXAMPLES[name]


def build_example(name: str, device="meta", dtype=torch.float32, **overrides):
    ex = get_example(name)
    bad = [k for k in overrides if k not in ex.defaults]
    if bad:
        raise ModelError(f"example {name} has no size {bad[0]!r}; valid: {', '.join(ex.defaults)}")
    sizes = {**ex.defaults, **overrides}
    return ex.build(device, dtype, **sizes)
