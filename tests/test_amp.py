"""Autocast (AMP): the graph an autocast region traces to is what eager dispatches on a GPU.

The reference is PyTorch itself: the same model run eagerly on fake CUDA tensors under
``torch.autocast("cuda")`` (``GpuAutocast`` lets it enable itself without a GPU), with a
dispatch mode below the autocast key counting the ``_to_copy`` casts that autocast's C++
kernels launch, weight cache included. Capture must give the same casts as graph nodes.
"""

import collections
import copy
import json

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils._python_dispatch import TorchDispatchMode

import gpusim
from gpusim.capture import amp as A
from gpusim.capture.tracing import capture, capture_full
from gpusim.cli.commands import main

aten = torch.ops.aten


def meta(*shape):
    return torch.empty(*shape, device="meta")


class _CountCasts(TorchDispatchMode):
    def __init__(self):
        super().__init__()
        self.casts = collections.Counter()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        to = kwargs.get("dtype")
        if func is aten._to_copy.default and to is not None and to != args[0].dtype:
            self.casts[(tuple(args[0].shape), _name(args[0].dtype), _name(to))] += 1
        return func(*args, **kwargs)


def _name(dt):
    return str(dt).removeprefix("torch.")


def eager_casts(module, args, dtype):
    """The casts eager launches for ``module(*args)`` under CUDA autocast at ``dtype``:
    the module's parameters swapped for fake CUDA ones (tied ones stay one tensor), run
    through PyTorch's real AutocastCUDA kernels and their weight cache."""
    module = copy.deepcopy(module)
    tensors = [p for _, p in module.named_parameters()] + list(args)
    fakes = A.to_fake_cuda(tensors)
    swap = {id(t): f for t, f in zip(tensors, fakes)}
    for sub in module.modules():
        for name, p in list(sub._parameters.items()):
            if p is not None:
                sub._parameters[name] = swap[id(p)]
    a = fakes[len(fakes) - len(args):]
    count = _CountCasts()
    with torch.no_grad(), A.GpuAutocast(), fakes[0].fake_mode, count:
        with torch.autocast("cuda", dtype=dtype):
            module(*a)
    return count.casts


def graph_casts(g):
    out = collections.Counter()
    for n in g.compute_nodes:
        a = g.node(n)
        if a["op"] in ("aten._to_copy.default", "aten.to.dtype"):
            src = g.node(a["inputs"][0])
            if src["dtype"] != a["dtype"]:
                out[(tuple(a["shape"]), src["dtype"], a["dtype"])] += 1
    return out


class Mixed(nn.Module):
    """Ops from each of autocast's lists: lower precision (conv, linear, matmul), fp32
    (layer_norm, log_softmax, mse_loss), fp32-unless-dtype (softmax, sum), promote (cat,
    through torch.stack) and none (gelu, add); the output projection tied to the input
    one (one parameter, two uses)."""

    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 8, 3, padding=1)
        self.inp = nn.Linear(32, 64)
        self.ln = nn.LayerNorm(64)
        self.mid = nn.Linear(64, 64)
        self.out = nn.Linear(64, 32)
        self.again = nn.Linear(64, 32, bias=False)
        self.again.weight = self.out.weight          # tied: one parameter, two names

    def forward(self, img, x, target):
        c = F.gelu(self.conv(img)).flatten(1)[:, :32]
        h = self.ln(self.inp(x + c))
        att = torch.softmax(h @ h.transpose(0, 1), -1)
        h = F.gelu(self.mid(att @ h)) + h
        y = self.out(h)
        z = self.again(h) * y                         # the tied weight, used again
        loss = F.mse_loss(z, target) + F.log_softmax(y, -1).sum()
        return torch.cat([z, y]), loss


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_casts_match_eager_autocast_on_a_gpu(dtype):
    with torch.device("meta"):      # built on meta: .to() would untie the tied weight
        m = Mixed()
    args = (meta(4, 3, 8, 8), meta(4, 32), meta(4, 32))
    g = capture(m, args, amp="fp16" if dtype == torch.float16 else "bf16")
    want = eager_casts(m, args, dtype)
    assert sum(want.values()) >= 10          # the reference sees autocast at work
    assert want[((32, 64), "float32", _name(dtype))] == 1     # the tied weight: cast once
    assert graph_casts(g) == want
    assert g.meta["amp"] == A.amp_name(dtype) and g.meta["autocast_casts"] == sum(want.values())


def test_which_ops_cast_and_which_run_fp32():
    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.a = nn.Linear(64, 64)
            self.ln = nn.LayerNorm(64)

        def forward(self, x):
            y = self.a(x)                   # fp16 GEMM
            z = self.ln(y)                  # fp32 list: y is cast back up
            s = torch.softmax(y, -1)        # fp32 output from fp16 input, no cast (fp16)
            return self.a(z) + s            # a.weight, a.bias: cached, not cast again

    g = capture(Net().to("meta"), (meta(8, 64),), amp="fp16")
    node = {g.node(n)["op"]: g.node(n) for n in g.compute_nodes}
    casts = [g.node(n) for n in g.compute_nodes if g.node(n)["op"] == "aten._to_copy.default"]
    srcs = collections.Counter(c["inputs"][0] for c in casts)
    assert srcs["a.weight"] == 1 and srcs["a.bias"] == 1      # once per region
    assert node["aten.linear.default"]["dtype"] == "float16"
    assert node["aten.layer_norm.default"]["dtype"] == "float32"
    assert node["aten.softmax.int"]["dtype"] == "float32"
    # x, a.weight, a.bias to fp16; y to fp32 for layer_norm; z to fp16 for the 2nd linear
    assert sorted((c["dtype"], tuple(c["shape"])) for c in casts) == sorted(
        [("float16", (8, 64)), ("float16", (64, 64)), ("float16", (64,)),
         ("float32", (8, 64)), ("float16", (8, 64))])


def test_user_autocast_nested_disabled_and_cache_per_region():
    def f(x, w, b):
        with torch.autocast("cuda", dtype=torch.float16):
            y = F.linear(x, w, b)
            y = F.linear(y, w, b)           # w, b used twice: cast once
            with torch.autocast("cuda", enabled=False):
                z = x @ w                   # autocast off: fp32 GEMM, no cast
        with torch.autocast("cuda", dtype=torch.float16):
            u = x @ w                       # a new region: w cast again
        return y.float() + z + u.float()

    w = torch.nn.Parameter(meta(64, 64))    # a leaf that requires grad: cached
    b = torch.nn.Parameter(meta(64))
    g = capture(f, (meta(64, 64), w, b))
    mm = [g.node(n) for n in g.compute_nodes if "mm" in g.node(n)["op"]
          or "matmul" in g.node(n)["op"]]
    assert [a["dtype"] for a in mm] == ["float32", "float16"]
    casts = collections.Counter(g.node(n)["inputs"][0] for n in g.compute_nodes
                                if g.node(n)["op"] == "aten._to_copy.default")
    assert casts == {"in0": 2, "in1": 2, "in2": 1}     # x per op; w once per region; b once
    # a tensor that is no leaf requiring grad is cast at every use
    g2 = capture(f, (meta(64, 64), meta(64, 64), meta(64)))
    casts2 = collections.Counter(g2.node(n)["inputs"][0] for n in g2.compute_nodes
                                 if g2.node(n)["op"] == "aten._to_copy.default")
    assert casts2 == {"in0": 2, "in1": 3, "in2": 2}


def test_fp32_trace_unchanged_without_autocast():
    m = nn.Sequential(nn.Linear(64, 64), nn.LayerNorm(64))
    g = capture(m.to("meta"), (meta(8, 64),))
    assert graph_casts(g) == {} and g.meta["amp"] is None
    assert all(g.node(n)["dtype"] == "float32" for n in g.compute_nodes)


def test_cast_copies_are_priced_and_cached_casts_held_to_the_end():
    m = nn.Sequential(*[nn.Linear(2048, 2048) for _ in range(4)]).to("meta")
    x = meta(4, 2048)
    fp32 = gpusim.predict(m, (x,), gpu="h100")
    bf16 = gpusim.predict(m, (x,), gpu="h100", amp="bf16")
    casts = [k for k in bf16.kernels if any("_to_copy" in bf16.graph.node(o)["op"] for o in k.ops)]
    assert len(casts) == 9                   # 4 weights, 4 biases, the input
    w = [k for k in casts if k.bytes_read == 2048 * 2048 * 4]
    assert len(w) == 4 and all(k.bytes_written == 2048 * 2048 * 2 and k.us > 0 for k in w)
    # autocast keeps every weight's bf16 copy until the region exits: all four live at once
    weights16 = 4 * (2048 * 2048 + 2048) * 2
    assert bf16.memory.peak_bytes >= weights16 > fp32.memory.peak_bytes
    assert bf16.memory.peak_bytes < weights16 + 4 * 2 ** 20


def test_search_takes_amp():
    with torch.device("meta"):
        block = nn.Sequential(nn.Linear(256, 1024), nn.GELU(), nn.Linear(1024, 256))
    r = gpusim.search(block, (meta(8, 128, 256),), gpu="h100", amp="bf16", algo="greedy")
    assert r.graph.meta["amp"] == "bf16" and r.speedup_device >= 1.0


def test_amp_argument_errors():
    with pytest.raises(gpusim.GpusimError, match="unknown --amp 'fp8'; use one of: bf16, fp16"):
        gpusim.predict(nn.Linear(4, 4), (meta(2, 4),), amp="fp8")
    g = capture(lambda x: x * 2, (meta(4),))
    with pytest.raises(gpusim.GpusimError, match="amp= applies when gpusim captures"):
        gpusim.predict(g, amp="bf16")


def test_cli_amp_and_its_errors(capfd):
    assert main(["predict", "linear_relu_layernorm", "--amp", "bf16", "--json"]) == 0
    d = json.loads(capfd.readouterr().out)
    assert d["amp"] == "bf16" and d["graph"].endswith("amp bf16")
    assert main(["predict", "linear_relu_layernorm", "--json"]) == 0
    d32 = json.loads(capfd.readouterr().out)
    assert d32["amp"] is None and d["device_us"] < d32["device_us"]
    for argv, msg in ((["--amp", "fp8"], "unknown --amp 'fp8'; use one of: bf16, fp16"),
                      (["--amp", "bf16", "--dtype", "float16"], "--amp bf16 runs an fp32 model")):
        rc = main(["predict", "add_relu_mul", *argv])
        out, err = capfd.readouterr()
        assert rc == 2 and out == "" and err.startswith(f"gpusim: error: {msg}")
        assert len(err.strip().splitlines()) == 1 and "Traceback" not in err


def test_zoo_model_under_amp_is_faster_on_h100(capfd):
    pytest.importorskip("transformers")
    runs = {}
    for amp in ([], ["--amp", "bf16"]):
        assert main(["predict", "hf:bert-base", "--gpu", "h100", "--json", *amp]) == 0
        runs[bool(amp)] = json.loads(capfd.readouterr().out)
    # GEMMs on bf16 tensor cores instead of fp32: far less device time, more kernels (casts)
    assert runs[True]["device_us"] < 0.5 * runs[False]["device_us"]
    assert runs[True]["n_kernels"] > runs[False]["n_kernels"]
    assert runs[True]["unmodelled"] == {}


def test_harness_plans_amp_cases_and_records_rebuild_their_graph():
    pytest.importorskip("torchvision")
    from gpusim.models import zoo
    from validation.records.store import record_graph
    from validation.measure.zoo_plan import plan_amp_cases
    cases = plan_amp_cases({k: zoo.ZOO[k] for k in ("tv:resnet18", "hf:gpt2")}, "main",
                           compiled=("hf:gpt2",), runs=("eager", "compiled"))
    assert [(c.case_id, c.dtype, c.amp) for c in cases] == [
        ("tv:resnet18__large__amp-fp16__nchw__eager", "float32", "fp16"),
        ("hf:gpt2__large__amp-bf16__nchw__eager", "float32", "bf16"),
        ("tv:resnet18__default__amp-fp16__nchw__eager", "float32", "fp16"),
        ("hf:gpt2__default__amp-bf16__nchw__eager", "float32", "bf16"),
        ("hf:gpt2__large__amp-bf16__nchw__compiled", "float32", "bf16")]
    rec = {"model": "tv:resnet18", "sizes": {"batch": 1, "hw": 64}, "dtype": "float32",
           "channels_last": False, "run": "eager"}
    g32, g16 = record_graph(rec), record_graph(dict(rec, amp="fp16"))
    assert g32.meta["amp"] is None and g16.meta["amp"] == "fp16"
    convs = [g16.node(n) for n in g16.compute_nodes if g16.node(n)["kind"] == "conv"]
    assert convs and all(a["dtype"] == "float16" for a in convs)
    assert g16.meta["autocast_casts"] == 20 + 2 + 1   # 20 conv weights, fc weight+bias, input


def test_channels_last_elementwise_stays_vectorised_on_cuda_traces():
    # traced on CUDA tensors (as AMP is), cuDNN's convolutions return channels-last
    # outputs; ATen streams elementwise ops over them with vector loads (same strides)
    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.f = nn.Sequential(nn.Conv2d(16, 16, 3, padding=1), nn.BatchNorm2d(16), nn.ReLU())

        def forward(self, x):
            return self.f(x) + x

    m = Block().eval().to("meta", memory_format=torch.channels_last)
    x = meta(8, 16, 32, 32).contiguous(memory_format=torch.channels_last)
    g = capture(m, (x,), amp="fp16")
    pw = [g.node(n) for n in g.compute_nodes if g.node(n)["kind"] == "pointwise"]
    assert [a["op"] for a in pw] == ["aten.relu.default", "aten.add.Tensor"]
    assert all(a["contiguous"] for a in pw)
    assert pw[0]["dtype"] == "float16" and pw[1]["dtype"] == "float32"   # fp16 + fp32 input
