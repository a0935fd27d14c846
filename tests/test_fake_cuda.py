"""Autocast capture on a CPU-only build of torch (the README's ``torch==2.13.0`` install).

A CPU-only build has no CUDA device guard, so the Python bindings that take one before they
dispatch (indexing, ``contiguous`` on a strided tensor, ``.to("cuda")``, ``new_tensor``) raise
"PyTorch is not linked with support for cuda devices" on fake CUDA tensors, also where torch's
own fake and meta kernels call them (the 1-d convolution's fake kernel, ``im2col``'s
decomposition). The suite runs on a CUDA build, so :func:`cpu_only_build` makes those bindings
raise exactly that error for CUDA tensors, as the CPU build does, and the tests check that
capture under ``--amp`` still works and traces the graph the CUDA build traces.
"""

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st

from gpusim.capture import fake_cuda as FC
from gpusim.capture.fakes import CaptureError
from gpusim.capture.tracing import capture


def _raises_for_cuda(name, orig):
    def call(self, *a, **k):
        guard = isinstance(self, torch.Tensor) and self.device.type == "cuda"
        if name == "contiguous":        # the binding skips the guard for a contiguous tensor
            guard = guard and not self.is_contiguous(memory_format=k.get(
                "memory_format", a[0] if a else torch.contiguous_format))
        if name == "to":                # "cuda" without an index asks the guard for the device
            dev = k.get("device", a[0] if a else None)
            guard = isinstance(dev, (str, torch.device)) and torch.device(dev).type == "cuda" \
                and torch.device(dev).index is None
        if guard:
            raise RuntimeError(FC.NOT_LINKED)
        return orig(self, *a, **k)
    return call


def _simulate_cpu_only_build(monkeypatch):
    """The guard-taking bindings raise as on a CPU-only build; ``cuda_guard_missing`` says so."""
    for name in FC._METHODS:
        monkeypatch.setattr(torch.Tensor, name, _raises_for_cuda(name, getattr(torch.Tensor, name)))
    monkeypatch.setattr(FC, "cuda_guard_missing", lambda: True)
    return monkeypatch


@pytest.fixture
def cpu_only_build(monkeypatch):
    return _simulate_cpu_only_build(monkeypatch)


class RelPos(nn.Module):
    """What the failing timm models do under --amp: index a relative-position bias table with a
    buffer (CoAtNet, MaxViT, Swin), slice and assign, unfold (VOLO), a 1-d convolution over a
    transposed input (EfficientViM), ``.contiguous()`` of a permuted tensor."""

    def __init__(self):
        super().__init__()
        self.table = nn.Parameter(torch.randn(49, 4))
        self.register_buffer("index", torch.randint(0, 49, (16, 16)), persistent=False)
        self.qkv = nn.Linear(8, 24)
        self.conv1d = nn.Conv1d(8, 8, 3, padding=1)

    def forward(self, x):                   # x: (2, 16, 8)
        bias = self.table[self.index].permute(2, 0, 1).contiguous()     # 4 x 16 x 16
        q, k, v = self.qkv(x).reshape(2, 16, 3, 4, 2).permute(2, 0, 3, 1, 4)
        attn = (q @ k.transpose(-2, -1) + bias.unsqueeze(0)).softmax(-1)
        y = (attn @ v).transpose(1, 2).reshape(2, 16, 8)
        y = y + self.conv1d(y.transpose(1, 2)).transpose(1, 2)
        cols = F.unfold(y.reshape(2, 8, 4, 4), 3, padding=1)            # 2 x 72 x 16
        y = y.clone()
        y[:, 0] = 0.0
        y[:, 1:3] = y[:, :2] * 2
        return y.sum() + cols[:, :, 0].mean() + y[..., None][:, -1].to("cuda").sum()


def _ops(g):
    return [(g.node(n)["op"], tuple(g.node(n).get("shape") or ())) for n in g.order]


def test_cpu_only_build_captures_under_amp_as_the_cuda_build(monkeypatch):
    m, x = RelPos(), torch.randn(2, 16, 8)
    if FC.cuda_guard_missing():
        pytest.skip("the reference needs a CUDA build of torch")
    ref = capture(m, (x,), amp="fp16")      # this CUDA build's own trace
    _simulate_cpu_only_build(monkeypatch)
    g = capture(m, (x,), amp="fp16")
    assert _ops(g) == _ops(ref)
    assert any(op.endswith("index.Tensor") for op, _ in _ops(g))


def test_without_the_fix_the_cpu_only_build_fails(cpu_only_build):
    """The simulation is the bug: with the fix off, capture fails as the issue's user saw."""
    cpu_only_build.setattr(FC, "cuda_guard_missing", lambda: False)
    with pytest.raises(CaptureError, match="not linked with support for cuda"):
        capture(RelPos(), (torch.randn(2, 16, 8),), amp="fp16")


def test_timm_relative_position_model_under_amp(monkeypatch):
    """The issue's model (``gpusim predict timm:coatnet_pico_rw_224 --amp fp16`` failed on
    the CPU-only install) traces as on the CUDA build, op for op."""
    timm = pytest.importorskip("timm")
    if FC.cuda_guard_missing():
        pytest.skip("the reference needs a CUDA build of torch")
    m = timm.create_model("coatnet_pico_rw_224").eval()
    x = torch.empty(1, 3, 224, 224, device="meta")
    ref = capture(m, (x,), amp="fp16")
    _simulate_cpu_only_build(monkeypatch)
    g = capture(m, (x,), amp="fp16")
    assert len(g) > 100 and _ops(g) == _ops(ref)


_DIMS = (3, 4, 5)


@st.composite
def _index(draw):
    """A random Python index into a (3, 4, 5) tensor: ints, slices, None, Ellipsis, long and
    bool tensors, lists."""
    items, dim, ell = [], 0, False
    for _ in range(draw(st.integers(0, 4))):
        kind = draw(st.sampled_from(["int", "slice", "none", "ell", "long", "list", "bool"]))
        if kind == "none":
            items.append(None)
            continue
        if kind == "ell":
            if not ell:
                items.append(Ellipsis)
                ell = True
            continue
        if dim >= len(_DIMS) or ell:
            continue
        n = _DIMS[dim]
        if kind == "int":
            items.append(draw(st.integers(-n, n - 1)))
        elif kind == "slice":
            items.append(slice(draw(st.none() | st.integers(-n, n)),
                               draw(st.none() | st.integers(-n, n)),
                               draw(st.none() | st.integers(1, 3))))
        elif kind == "long":
            items.append(torch.tensor(draw(st.lists(st.integers(-n, n - 1), min_size=1,
                                                    max_size=3))))
        elif kind == "list":
            items.append(draw(st.lists(st.integers(0, n - 1), min_size=1, max_size=3)))
        else:
            items.append(torch.tensor(draw(st.lists(st.booleans(), min_size=n, max_size=n))))
        dim += 1
    return tuple(items) if draw(st.booleans()) or len(items) != 1 else items[0]


@settings(max_examples=200, deadline=None)
@given(_index())
def test_getitem_and_setitem_by_aten_ops_equal_pythons(index):
    x = torch.arange(60.0).reshape(_DIMS)
    try:
        want = x[index]
    except (IndexError, RuntimeError):
        return
    got = FC.fake_getitem(x, index)
    assert got.shape == want.shape and torch.equal(got, want)
    a, b = x.clone(), x.clone()
    a[index] = -1.0
    FC.fake_setitem(b, index, -1.0)
    assert torch.equal(a, b)
    if want.numel():
        v = torch.randn(want.shape[-1:] if want.dim() else ())
        a[index] = v
        FC.fake_setitem(b, index, v)
        assert torch.equal(a, b)


def test_cuda_without_index_is_cuda0(cpu_only_build):
    from torch._subclasses.fake_tensor import FakeTensorMode
    with FakeTensorMode(allow_non_fake_inputs=True) as mode, FC.FakeCudaEntryPoints():
        t = torch.empty(3, 4, device="cuda:0")
        assert t.to("cuda").device == torch.device("cuda", 0)
        assert t.new_tensor([1.0, 2.0]).device == torch.device("cuda", 0)
        assert t.t().contiguous().is_contiguous()
        assert t[1:, None].shape == (2, 1, 4)
    del mode
