"""Training steps (gpusim.capture.train, train_fx, train_ops, step): a step function captured whole,
its model and optimizer resident state (graph inputs, never constants), backward and
optimizer kernels (multi-tensor-apply chunking), memory by phase, the largest batch that
fits, and the CLI's --train."""

import dataclasses
import json

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import gpusim
from gpusim.capture.tracing import capture, capture_full
from gpusim.cli.commands import main
from gpusim.hw.spec import load_spec
from gpusim.predict.step import max_batch
from gpusim.predict.phases import step_summary
from gpusim.capture.closures import reachable
from gpusim.graph.train_ops import MTA_CHUNK, mta_launches

FAST = settings(max_examples=2, deadline=None,
                suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])


def mlp(width=32, depth=2):
    layers = []
    for _ in range(depth):
        layers += [torch.nn.Linear(width, width), torch.nn.ReLU()]
    return torch.nn.Sequential(*layers, torch.nn.Linear(width, 10))


def step_of(model, opt):
    loss_fn = torch.nn.CrossEntropyLoss()

    def step(x, y):
        opt.zero_grad(set_to_none=True)
        loss = loss_fn(model(x), y)
        loss.backward()
        opt.step()
        return loss.detach()
    return step


def batch(n=8, width=32):
    return torch.randn(n, width), torch.randint(0, 10, (n,))


def ops_of(graph, phase=None):
    g = graph.g
    return [g.nodes[n]["op"] for n in graph.compute_nodes
            if phase is None or g.nodes[n]["phase"] == phase]


# ------------------------------------------------------------------ capture


def test_step_records_backward_and_optimizer_with_params_as_inputs():
    model = mlp()
    opt = torch.optim.AdamW(model.parameters())
    c = capture_full(step_of(model, opt), batch())
    g = c.graph
    names = c.input_names
    assert [n for n in names if n.startswith("p:")] == [f"p:{k}" for k, _ in model.named_parameters()]
    # steady state: the optimizer's states exist (created by an untraced first step) and
    # are inputs too, two per parameter for AdamW
    assert sum(n.endswith((".exp_avg", ".exp_avg_sq")) for n in names) == 2 * len(list(model.parameters()))
    assert not [n for n in g.g.nodes if str(g.g.nodes[n].get("label", "")).startswith("const:")]
    fwd, bwd, opt_ops = ops_of(g, "forward"), ops_of(g, "backward"), ops_of(g, "optimizer")
    assert "aten.addmm.default" in fwd
    assert bwd.count("aten.mm.default") == 2 * 3 - 1    # grad_input of layers 2, 3; every grad_weight
    assert "aten.threshold_backward.default" in bwd
    assert opt_ops and all(o.startswith("aten._foreach_") for o in opt_ops)   # CUDA's default
    # the user's objects are untouched: no state, real parameters, flags restored
    assert not opt.state and all(p.device.type == "cpu" and p.grad is None for p in model.parameters())
    assert opt.param_groups[0]["foreach"] is None


@pytest.mark.parametrize("kw,expect", [({"foreach": True}, "_foreach_"), ({"fused": True}, "_fused_adamw_"),
                                       ({"foreach": False}, "aten.addcdiv_")])
def test_optimizer_implementation_flags_are_respected(kw, expect):
    model = mlp(depth=1)
    opt = torch.optim.AdamW(model.parameters(), **kw)
    ops = ops_of(capture(step_of(model, opt), batch()), "optimizer")
    assert any(expect in o for o in ops)
    if "fused" in kw:       # the device step counters' increment, then one fused kernel
        assert ops == ["aten._foreach_add_.Scalar", "aten._fused_adamw_.default"]
    if kw.get("foreach") is False:      # single-tensor: one op per parameter
        assert sum("addcdiv_" in o for o in ops) == len(list(model.parameters()))


def test_sgd_momentum_buffers_are_resident_state():
    model = mlp(depth=1)
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    c = capture_full(step_of(model, opt), batch())
    assert sum(n.endswith(".momentum_buffer") for n in c.input_names) == 4
    assert ops_of(c.graph, "optimizer") == ["aten._foreach_mul_.Scalar", "aten._foreach_add_.List",
                                            "aten._foreach_add_.List"]


def test_closure_module_forward_matches_module_path():
    model = torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3), torch.nn.BatchNorm2d(8), torch.nn.ReLU(),
                                torch.nn.Flatten(), torch.nn.Linear(8 * 6 * 6, 4)).eval()
    x = torch.randn(2, 3, 8, 8)
    a, b = gpusim.predict(model, (x,)), gpusim.predict(lambda t: model(t), (x,))
    assert a.kernel_count == b.kernel_count
    assert [k.ops for k in a.lowering.kernels] == [k.ops for k in b.lowering.kernels]
    assert a.memory.weights_bytes == b.memory.weights_bytes > 0


def test_reachable_follows_closures_globals_and_bound_methods():
    model, other = mlp(), mlp()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)

    class Trainer:
        def __init__(self):
            self.net, self.opt = other, opt

        def step(self, x):
            return self.net(x)
    mods, opts = reachable(lambda x: model(x))
    assert [m for _, m in mods] == [model] and not opts
    mods, opts = reachable(Trainer().step)
    assert [m for _, m in mods] == [other] and [o for _, o in opts] == [opt]


def test_conv_backward_is_split_per_gradient():
    model = torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3), torch.nn.ReLU(), torch.nn.Conv2d(8, 8, 3),
                                torch.nn.Flatten(), torch.nn.Linear(8 * 4 * 4, 10))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    g = capture(step_of(model, opt), (torch.randn(2, 3, 8, 8), torch.randint(0, 10, (2,))))
    convs = [n for n in g.compute_nodes if "convolution_backward" in g.node(n)["op"]]
    # first conv: weight only (its input needs no grad); second: data and weight; biases: sums
    assert len(convs) == 3
    fwd = {g.node(n)["flops"] for n in g.compute_nodes if g.node(n)["op"] == "aten.convolution.default"}
    assert {g.node(n)["flops"] for n in convs} <= fwd     # each gradient costs one forward
    assert ops_of(g, "backward").count("aten.sum.dim_IntList") >= 3



def test_channels_last_conv_backward_runs_nhwc_without_layout_transforms():
    """cuDNN's backward convolutions take the forward's layout, which the input and the weight
    suggest (``determine_backend_memory_format``), not the incoming gradient's strides (a meta
    trace leaves the gradient of batch norm and ReLU contiguous): a channels-last step's
    backward convs are NHWC, with no nchwToNhwc/nhwcToNchw kernels around them."""
    model = torch.nn.Sequential(torch.nn.Conv2d(16, 32, 3, padding=1), torch.nn.BatchNorm2d(32),
                                torch.nn.ReLU(), torch.nn.Conv2d(32, 32, 3, padding=1),
                                torch.nn.AdaptiveAvgPool2d(1), torch.nn.Flatten(),
                                torch.nn.Linear(32, 10)).to("meta", memory_format=torch.channels_last)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    lf = torch.nn.CrossEntropyLoss()

    def step(x, y):
        opt.zero_grad(set_to_none=True)
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = lf(model(x), y)
        loss.backward()
        opt.step()
    x = torch.empty(8, 16, 28, 28, device="meta").to(memory_format=torch.channels_last)
    p = gpusim.predict(step, (x, torch.zeros(8, dtype=torch.long, device="meta")), gpu="h100")
    g = p.graph.g
    convs = [n for n in g.nodes if "convolution" in g.nodes[n]["op"]]
    assert {g.nodes[n].get("layout") for n in convs} == {"nhwc"}
    assert any("backward" in g.nodes[n]["op"] for n in convs)
    assert not [k for k in p.lowering.kernels if k.role == "aux" and k.variant != "conv_bias"
                and g.nodes[k.ops[0]]["kind"] == "conv"]


# ------------------------------------------------------------------ multi-tensor apply


def test_mta_launches_follow_the_tensor_and_block_limits():
    assert mta_launches([10] * 110, depth=1, large=False) == 1
    assert mta_launches([10] * 111, depth=1, large=False) == 2
    assert mta_launches([10] * 65, depth=2, large=False) == 2          # 64 tensors at depth 2
    assert mta_launches([10] * 97, depth=1, scalarlist=True, large=False) == 2
    assert mta_launches([MTA_CHUNK * 320], depth=1, large=False) == 1
    assert mta_launches([MTA_CHUNK * 320 + 1], depth=1, large=False) == 2
    assert mta_launches([0, 0, 10], depth=1) == 1 and mta_launches([], depth=1) == 0
    assert mta_launches([10] * 771, depth=1, large=True) == 2
    assert mta_launches([10] * 770, depth=1, large=True) == 1


@given(st.lists(st.integers(0, 3 * MTA_CHUNK), max_size=300), st.integers(1, 5))
@settings(max_examples=60, deadline=None)
def test_mta_launches_bounds(numels, depth):
    """At least the blocks over the per-launch limit, at most one launch per chunk."""
    chunks = sum(-(-n // MTA_CHUNK) for n in numels)
    k = mta_launches(numels, depth, large=False)
    assert -(-chunks // 320) <= k <= chunks


def test_optimizer_kernels_follow_the_chunk_rule():
    """150 parameters, SGD's ``_foreach_add_(params, grads)`` (depth 2): 64 + 64 + 22
    tensors, three launches by the 4 KB argument tables the H100 records show."""
    model = torch.nn.Sequential(*[torch.nn.Linear(4, 4, bias=False) for _ in range(150)])
    opt = torch.optim.SGD(model.parameters(), lr=0.1)       # no momentum: one _foreach_add_
    step = step_of(torch.nn.Sequential(model, torch.nn.Linear(4, 10)), opt)
    g = capture(step, (torch.randn(2, 4), torch.randint(0, 10, (2,))))
    p = gpusim.predict(g, gpu="h100")
    assert step_summary(p)["phases"]["optimizer"]["kernels"] == 3


# ------------------------------------------------------------------ memory and phases


def test_memory_phases_and_gradients_freed_by_set_to_none():
    model = mlp(width=256, depth=3)
    opt = torch.optim.Adam(model.parameters())
    p = gpusim.predict(step_of(model, opt), batch(64, 256))
    s = p.train
    params = sum(t.numel() * 4 for t in model.parameters())
    assert s["weights_bytes"] == params and s["optimizer_state_bytes"] == 2 * params
    assert s["gradient_bytes"] == params
    # grads are not resident at the step's start (zero_grad(set_to_none=True)): the
    # baseline holds weights, states and inputs only; the optimizer phase holds them all
    assert p.memory.weights_bytes == 3 * params
    assert s["phases"]["forward"]["kernels"] and s["phases"]["backward"]["kernels"]
    assert s["phases"]["optimizer"]["peak_bytes"] >= p.memory.baseline_bytes + params
    first = p.memory.timeline[0]
    assert first < params
    assert s["peak_phase"] in ("backward", "optimizer")
    d = p.to_dict()["train"]
    assert set(d["phases"]) == {"forward", "backward", "optimizer"}
    assert abs(sum(v["device_us"] for v in d["phases"].values()) - p.device_us) < 1e-6


def test_forward_prediction_has_no_train_block():
    p = gpusim.predict(mlp(), (torch.randn(4, 32),))
    assert p.train is None and p.to_dict()["train"] is None


@given(st.integers(6, 20))
@FAST
def test_max_batch_fits_and_is_maximal(mib):
    """Memory grows with the batch; every batch the search tried fits exactly when it is at
    most the answer, and the answer's successor was tried (so it is maximal); twice the
    memory never gives a smaller batch."""
    spec = dataclasses.replace(load_spec("h100"), capacity_gib=mib / 1024)
    cap = mib * 2 ** 20

    def make(b):
        model = torch.nn.Sequential(torch.nn.Linear(512, 2048), torch.nn.ReLU(), torch.nn.Linear(2048, 10))
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        return step_of(model, opt), (torch.empty(b, 512, device="meta"),
                                     torch.empty(b, dtype=torch.long, device="meta"))
    r = max_batch(make, spec, limit=1 << 9)
    b, tried = r["batch"], r["tried"]
    totals = [tried[k] for k in sorted(tried)]
    assert totals == sorted(totals)
    assert all((total <= cap) == (t <= b) for t, total in tried.items())
    assert r["limit_reached"] or b + 1 in tried
    bigger = max_batch(make, dataclasses.replace(spec, capacity_gib=2 * mib / 1024), limit=1 << 9)
    assert bigger["batch"] >= b


# ------------------------------------------------------------------ CLI


def test_cli_train_json(capsys):
    assert main(["predict", "conv_bn_relu", "--train", "--optimizer", "sgd", "--size", "batch=2",
                 "--json"]) == 0
    d = json.loads(capsys.readouterr().out)
    ph = d["train"]["phases"]
    assert ph["backward"]["kernels"] > 0 and ph["optimizer"]["kernels"] > 0
    assert d["train"]["optimizers"] == ["SGD"]


def test_cli_train_text(capsys):
    assert main(["predict", "linear_relu_layernorm", "--train", "--size", "tokens=64"]) == 0
    out = capsys.readouterr().out
    assert "training step    AdamW" in out and "peak memory" in out and "backward" in out


@pytest.mark.parametrize("argv,msg", [
    (["--optimizer", "sgd"], "add --train"),
    (["--train", "--optimizer", "lion"], "unknown --optimizer"),
    (["--train", "--max-batch", "--size", "batch=4"], "drop --size batch"),
])
def test_cli_train_errors(capsys, argv, msg):
    assert main(["predict", "conv_bn_relu"] + argv) == 2
    err = capsys.readouterr().err
    assert msg in err and err.count("\n") == 1 and "Traceback" not in err


def test_cli_train_needs_a_module(capsys):
    assert main(["predict", "add_relu_mul", "--train"]) == 2
    assert "not a module" in capsys.readouterr().err


def test_train_accuracy_scores_a_record_against_its_own_prediction():
    """The scorer rebuilds a record's step and compares phase by phase: a record holding
    gpusim's own figures scores 0% everywhere; compiled and failed rows are skipped."""
    from validation.score import train_accuracy as ta
    rec = {"kind": "train_step", "run": "eager", "model": "conv_bn_relu", "sizes": {"batch": 2},
           "optimizer": "sgd", "amp": None, "case_id": "conv_bn_relu__batch2__fp32__sgd__eager"}
    pred = ta.predict_row(rec, "h100")
    rec.update(phases={ph: dict(v) for ph, v in pred["phases"].items()},
               kernel_sum_us=pred["kernel_sum_us"], wall_us=pred["wall_us"],
               memory={"peak_step_case_bytes": pred["peak_bytes"], "peak_phase": pred["peak_phase"]})
    got = ta.compare(rec, pred)
    assert got["peak_phase"][2] is True
    assert all(v[2] == 0 for k, v in got.items() if k != "peak_phase")
    assert "backward.kernel_count" in got and "optimizer.kernel_sum_us" in got
    assert ta.usable(dict(rec, run="compiled"), True) and ta.usable(dict(rec, failed="x"), True)
    rec["kernels"] = [{"name": "void cudnn::nchwToNhwcKernel<float>", "phase": "backward"},
                      {"name": "sm90_xmma_wgrad", "phase": "backward"}]
    lt = ta.compare(rec, pred)["backward.layout_transforms"]
    assert lt[1] == 1 and lt[0] == pred["phases"]["backward"]["layout_transforms"] > 0
    assert ta.usable(dict(rec, amp="bfloat16"), False) and ta.usable(rec, False) is None


def test_gradient_accumulation_and_checkpointing():
    """Two micro-batches: twice the forward and backward kernels, one optimizer step, and
    the second backward accumulates into the gradients; a checkpointed block is recomputed
    in the backward phase and saves fewer activations."""
    from torch.utils.checkpoint import checkpoint
    model = torch.nn.Sequential(torch.nn.Linear(64, 512), torch.nn.GELU(), torch.nn.Linear(512, 512),
                                torch.nn.GELU(), torch.nn.Linear(512, 10))
    opt = torch.optim.AdamW(model.parameters())
    loss_fn = torch.nn.CrossEntropyLoss()
    x, y = torch.randn(256, 64), torch.randint(0, 10, (256,))

    def plain(x, y):
        opt.zero_grad(set_to_none=True)
        loss_fn(model(x), y).backward()
        opt.step()

    def accum(xs, ys):
        opt.zero_grad(set_to_none=True)
        for a, b in zip(xs, ys):
            (loss_fn(model(a), b) / len(xs)).backward()
        opt.step()

    def ckpt(x, y):
        opt.zero_grad(set_to_none=True)
        h = checkpoint(model[:4], x, use_reentrant=False)
        loss_fn(model[4](h), y).backward()
        opt.step()
    p, a, c = (gpusim.predict(plain, (x, y)), gpusim.predict(accum, ([x, x], [y, y])),
               gpusim.predict(ckpt, (x, y)))
    kp, ka, kc = (q.train["phases"] for q in (p, a, c))
    assert ka["forward"]["kernels"] > 2 * kp["forward"]["kernels"] - 2
    assert ka["backward"]["kernels"] > 2 * kp["backward"]["kernels"]     # + the accumulating adds
    assert ka["optimizer"]["kernels"] == kp["optimizer"]["kernels"]
    assert kc["backward"]["kernels"] > kp["backward"]["kernels"]        # the recomputed forward
    assert c.memory.timeline[kp["forward"]["kernels"] - 1] < p.memory.timeline[kp["forward"]["kernels"] - 1]


def test_trace_shows_the_phases(tmp_path):
    out = tmp_path / "step.json"
    assert main(["predict", "conv_bn_relu", "--train", "--size", "batch=2", "--trace", str(out)]) == 0
    ev = json.loads(out.read_text())
    ev = ev["traceEvents"] if isinstance(ev, dict) else ev
    assert [e["name"] for e in ev if e.get("cat") == "phase"] == ["forward", "backward", "optimizer"]
    assert all("phase" in e["args"] for e in ev if e.get("cat") == "kernel")


def test_gradient_clipping_is_foreach_and_part_of_the_update():
    """clip_grad_norm_ takes CUDA's foreach path (_foreach_norm, _foreach_mul_), and work
    between backward and the optimizer step is the optimizer phase's."""
    model = mlp(depth=1)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    loss_fn = torch.nn.CrossEntropyLoss()

    def step(x, y):
        opt.zero_grad(set_to_none=True)
        loss_fn(model(x), y).backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
    ops = ops_of(capture(step, batch()), "optimizer")
    assert ops[0] == "aten._foreach_norm.Scalar" and "aten._foreach_mul_.Tensor" in ops


@pytest.mark.parametrize("conv", [torch.nn.Conv2d(8, 16, 3, padding=1), torch.nn.ConvTranspose2d(8, 4, 2, stride=2)])
def test_conv_backward_flops_agree_with_flop_counter(conv):
    """Forward, backward-data and backward-filter FLOPs as torch.utils.flop_counter counts them."""
    from torch.utils.flop_counter import FlopCounterMode
    opt = torch.optim.SGD(conv.parameters(), lr=0.1)
    x = torch.randn(2, 8, 8, 8, requires_grad=True)

    def step(x):
        opt.zero_grad(set_to_none=True)
        conv(x).pow(2).mean().backward()
        opt.step()
    g = capture(step, (x,))
    ours = sum(g.node(n)["flops"] for n in g.compute_nodes if "convolution" in g.node(n)["op"])
    with FlopCounterMode(display=False) as fc:
        conv(x).pow(2).mean().backward()
    ref = sum(v for k, v in fc.get_flop_counts()["Global"].items() if "convolution" in str(k))
    assert ours == ref


def test_cli_file_step_is_a_training_step(tmp_path, capsys):
    """A model file whose NAME() returns (step_fn, args) is predicted as a training step,
    without --train, and no torch.compile comparison is offered for it."""
    f = tmp_path / "mystep.py"
    f.write_text("""import torch

def make():
    model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 4))
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)

    def step(x, y):
        opt.zero_grad(set_to_none=True)
        torch.nn.functional.cross_entropy(model(x), y).backward()
        opt.step()
    return step, (torch.randn(8, 16), torch.randint(0, 4, (8,)))
""")
    assert main(["predict", f"{f}:make"]) == 0
    out = capsys.readouterr().out
    assert "training step    SGD" in out and "fastest" not in out


def test_a_step_takes_no_fusion_partition():
    model = mlp(depth=1)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    g = capture(step_of(model, opt), batch())
    with pytest.raises(gpusim.GpusimError, match="training step"):
        gpusim.predict(g, partition=[[g.compute_nodes[0]]])


def test_training_batch_norm_is_cudnns_training_kernel():
    """Batch norm in training mode computes batch statistics (cudnn_batch_norm), not the
    eval kernel class; its backward is a norm kernel of the backward phase."""
    m = torch.nn.Sequential(torch.nn.Conv2d(8, 8, 3, padding=1), torch.nn.BatchNorm2d(8))
    opt = torch.optim.SGD(m.parameters(), lr=0.1)

    def step(x):
        opt.zero_grad(set_to_none=True)
        m(x).mean().backward()
        opt.step()
    p = gpusim.predict(step, (torch.randn(2, 8, 8, 8),))
    bn = [k for k in p.lowering.kernels if "batch_norm" in p.graph.node(k.ops[0])["op"]]
    assert [p.graph.node(k.ops[0])["op"] for k in bn] == ["aten.cudnn_batch_norm.default",
                                                          "aten.native_batch_norm_backward.default"]
    assert all(k.variant != "bn_eval" for k in bn)


# ------------------------------------------------------------------ step memory mechanisms


def _storages(p):
    from gpusim.sim.buffers import _buffers
    return _buffers(p.lowering)[0]


def test_each_result_of_a_multi_output_op_is_its_own_storage():
    """native_layer_norm_backward returns the input's gradient (an activation: dies at the
    next op) and the weight's and bias's gradients (held to the step's end): one storage
    each, not one storage held as long as its longest-lived result."""
    model = torch.nn.Sequential(torch.nn.Linear(256, 256), torch.nn.LayerNorm(256),
                                torch.nn.Linear(256, 10))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    p = gpusim.predict(step_of(model, opt), batch(512, 256))
    g, bufs = p.graph.g, _storages(p)
    ln = next(n for n in g.nodes if "native_layer_norm_backward" in str(g.nodes[n]["op"]))
    results = [s for s in g.successors(ln) if g.nodes[s]["op"] == "getitem"]
    big = [s for s in results if g.nodes[s]["shape"] == (512, 256)]
    small = [s for s in results if g.nodes[s]["shape"] == (256,)]
    assert big and small and all(s in bufs for s in results)
    assert not bufs[big[0]].keep and bufs[big[0]].size == 512 * 256 * 4
    assert all(bufs[s].keep and bufs[s].size == 256 * 4 for s in small)


def test_autograd_sums_gradients_in_place_into_a_dying_operand():
    """A tensor used twice gets two gradients; autograd's input buffer adds them in place
    (InputBuffer::accumulate): the backward add allocates nothing new."""
    class Twice(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.a, self.b = torch.nn.Linear(256, 256), torch.nn.Linear(256, 256)

        def forward(self, x):
            h = torch.relu(x)
            return (self.a(h) + self.b(h)).sum(-1, keepdim=True).expand(-1, 10)
    model = Twice()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    x = torch.randn(512, 256, requires_grad=True)
    p = gpusim.predict(step_of(model, opt), (x, torch.randint(0, 10, (512,))))
    g, bufs = p.graph.g, _storages(p)
    adds = [n for n in g.nodes if g.nodes[n].get("phase") == "backward"
            and str(g.nodes[n]["op"]) == "aten.add.Tensor" and g.nodes[n]["shape"] == (512, 256)]
    assert adds and all(bufs[n].alias_of is not None for n in adds)


def test_a_tied_weights_gradient_arriving_as_a_view_is_summed_out_of_place():
    """A tied embedding / LM head: the head's weight gradient reaches the parameter as a
    transposed view of its GEMM's result (mm_mat2_backward), which autograd cannot
    overwrite (the view holds its base), so the embedding's gradient is added into a new
    buffer (an H100 T5-small step's allocator trace shows the three buffers)."""
    class Tied(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.emb = torch.nn.Embedding(1000, 64)

        def forward(self, ids):
            return torch.nn.functional.linear(torch.tanh(self.emb(ids)), self.emb.weight)[:, :10]
    model = Tied()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    p = gpusim.predict(step_of(model, opt), (torch.randint(0, 1000, (32,)), torch.randint(0, 10, (32,))))
    g, bufs = p.graph.g, _storages(p)
    adds = [n for n in g.nodes if g.nodes[n].get("phase") == "backward"
            and str(g.nodes[n]["op"]) == "aten.add.Tensor" and g.nodes[n]["shape"] == (1000, 64)]
    assert adds and all(bufs[n].alias_of is None for n in adds)
    assert g.nodes[g.nodes[adds[0]]["inputs"][0]]["kind"] == "view"


def test_a_step_holds_one_cublas_workspace_per_thread_that_runs_gemms():
    """Forward (caller's thread, a bias GEMM: cuBLAS + cuBLASLt) and backward (autograd's
    thread: cuBLAS) each keep a workspace; a clean H100 process measures 65.0 MiB beyond
    weights, states and inputs (2026-11-25, device run of the zoo's bf16 DeiT-S, GPT-2,
    MobileNet-V3 steps); inference keeps one."""
    model = mlp(256, 2)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    p = gpusim.predict(step_of(model, opt), batch(64, 256), gpu="h100")
    assert p.memory.workspace_bytes == (32 + 32 + 1) << 20
    m = p.memory
    assert m.total_bytes == m.baseline_bytes + m.workspace_bytes + m.resident_overhead_bytes + m.peak_bytes
    assert 0 <= m.resident_overhead_bytes < 1 << 20    # 512 B rounding of each tensor here
    assert p.train["phases"]["forward"]["peak_bytes"] >= p.memory.baseline_bytes + (65 << 20)
    inf = gpusim.predict(model, (torch.randn(64, 256),), gpu="h100")
    assert inf.memory.workspace_bytes == (32 + 1) << 20


def test_grad_scaler_ops_write_in_place():
    from gpusim.sim.buffers import is_inplace
    for op in ("aten._amp_foreach_non_finite_check_and_unscale_.default",
               "aten._amp_update_scale_.default"):
        assert is_inplace({"op": op, "kind": "pointwise"})


def test_math_attention_dropout_is_cudas_fused_dropout():
    """SDPA's math fallback with dropout calls at::dropout, which CUDA runs as the fused
    native_dropout (a bool mask), not the bernoulli_ decomposition a meta trace takes."""
    class Attn(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.qkv = torch.nn.Linear(12, 36)

        def forward(self, x):
            q, k, v = self.qkv(x).view(2, 16, 3, 2, 6).permute(2, 0, 3, 1, 4)
            o = torch.nn.functional.scaled_dot_product_attention(q, k, v, dropout_p=0.1)
            return o.transpose(1, 2).reshape(2, 16, 12)[:, 0, :10]
    model = Attn()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    p = gpusim.predict(step_of(model, opt), (torch.randn(2, 16, 12), torch.randint(0, 10, (2,))))
    ops = [str(o) for o in ops_of(p.graph, "forward")]
    assert any("native_dropout" in o for o in ops) and not any("bernoulli" in o for o in ops)


def test_optimizer_states_are_created_by_the_first_steps_update():
    """Adam's moments are read by the optimizer alone: the simulation allocates them when
    the first step's update begins (from the cache the forward and backward left), not
    before the first step as the weights."""
    from gpusim.sim.memory import optimizer_states
    model = mlp(64, 2)
    opt = torch.optim.Adam(model.parameters())
    p = gpusim.predict(step_of(model, opt), batch(16, 64))
    g = p.graph.g
    states = optimizer_states(p.graph)
    n_params = sum(1 for _ in model.parameters())
    assert len(states) == 2 * n_params
    assert all(g.nodes[v]["kind"] == "input" for v in states)
    assert not any(str(g.nodes[v].get("label", "")).endswith(("weight", "bias")) for v in states)


def test_competitors_table_joins_rows_records_and_predictions(tmp_path):
    """``train_accuracy --competitors``: a competitor row is scored against its step's record
    beside gpusim's prediction; a failed estimator is None, not an error of 0."""
    import gzip

    from validation.score import train_accuracy as ta
    rec = {"kind": "train_step", "run": "eager", "model": "conv_bn_relu", "sizes": {"batch": 2},
           "optimizer": "sgd", "amp": None, "case_id": "c1"}
    pred = ta.predict_row(rec, "h100")
    rec.update(kernel_sum_us=2 * pred["kernel_sum_us"], memory={"peak_step_case_bytes": pred["peak_bytes"]})
    comp = {"case_id": "c1", "memtracker": {"peak": 1.1 * pred["peak_bytes"]},
            "runtime_estimator_roofline": {"total_ms": pred["kernel_sum_us"] * 4e-3},
            "runtime_estimator_benchmark": None}
    (tmp_path / "h100").mkdir()
    for name, rows in (("train.jsonl.gz", [rec]), ("train_competitors.jsonl.gz", [comp])):
        with gzip.open(tmp_path / "h100" / name, "wt") as f:
            f.write("\n".join(json.dumps(r) for r in rows) + "\n")
    row, = ta.competitors(str(tmp_path), "h100")["rows"]
    assert row["gpusim_peak"] == 0 and abs(row["memtracker"] - 10) < 1e-6
    assert abs(row["gpusim_time"] - 50) < 1e-6 and abs(row["re_roofline"] - 100) < 1e-6
    assert row["re_benchmark"] is None
