"""AMP training steps: torch.autocast and GradScaler in a traced step (gpusim.capture.train_amp)."""

import subprocess
import sys

import pytest
import torch

import gpusim
from gpusim.capture.amp import GpuAutocast
from gpusim.predict.phases import kernel_phases


def _step(amp):
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(256, 512), torch.nn.ReLU(),
                                torch.nn.Linear(512, 10)).to("meta")
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    loss_fn = torch.nn.CrossEntropyLoss()
    with GpuAutocast():
        scaler = torch.amp.GradScaler("cuda") if amp == torch.float16 else None

    def step(x, y):
        opt.zero_grad(set_to_none=True)
        with torch.autocast("cuda", dtype=amp or torch.float32, enabled=amp is not None):
            loss = loss_fn(model(x), y)
        if scaler is not None:
            scaler.scale(loss).backward()
            scaler.step(opt)
            scaler.update()
        else:
            loss.backward()
            opt.step()
        return loss.detach()
    x = torch.empty(64, 256, device="meta")
    y = torch.empty(64, dtype=torch.long, device="meta")
    return step, (x, y)



@pytest.fixture(scope="module")
def preds():
    return {k: gpusim.predict(*_step(dt), gpu="h100")
            for k, dt in (("fp32", None), ("bf16", torch.bfloat16), ("fp16", torch.float16))}


def _kernels(pred, phase):
    ph = kernel_phases(pred)
    return [k for k, p in zip(pred.kernels, ph) if p == phase]


def test_forward_has_cast_kernels_and_lower_precision_matmuls(preds):
    names = lambda p, ph: " ".join(k.name for k in _kernels(p, ph))  # noqa: E731
    assert "_to_copy" not in names(preds["fp32"], "forward")
    for amp in ("bf16", "fp16"):
        fwd = names(preds[amp], "forward")
        assert "_to_copy" in fwd, fwd
        # the backward casts the fp16/bf16 weight gradients back to fp32
        assert "_to_copy" in names(preds[amp], "backward")
    # mixed precision is faster than fp32 on the matmuls
    assert preds["bf16"].train["phases"]["forward"]["device_us"] < \
        preds["fp32"].train["phases"]["forward"]["device_us"]


def test_master_weights_grads_and_optimizer_stay_fp32(preds):
    for amp in ("bf16", "fp16"):
        t = preds[amp].train
        assert t["weights_bytes"] == preds["fp32"].train["weights_bytes"]
        assert t["gradient_bytes"] == preds["fp32"].train["gradient_bytes"]
        assert t["optimizer_state_bytes"] == preds["fp32"].train["optimizer_state_bytes"]


def test_grad_scaler_kernels_only_for_fp16(preds):
    def opt_names(p):
        return " ".join(k.name for k in _kernels(p, "optimizer"))
    fp16 = opt_names(preds["fp16"])
    assert "non_finite_check_and_unscale" in fp16 and "_amp_update_scale_" in fp16, fp16
    assert "_local_scalar_dense" in fp16                  # the host reads found_inf
    assert "_amp_update_scale_" not in preds["bf16"].graph.g
    assert "non_finite" not in opt_names(preds["bf16"])
    assert preds["fp16"].train["phases"]["optimizer"]["kernels"] > \
        preds["bf16"].train["phases"]["optimizer"]["kernels"]


def test_weight_cast_cache_held_in_forward(preds):
    # autocast's weight cache: one bf16 copy per parameter, held to the end of the autocast
    # region (the forward's end), not freed after its last forward use
    p = preds["bf16"]
    g = p.graph.g
    weight_casts = {n for n in g.nodes if n.startswith("_to_copy")
                    and g.nodes[n]["phase"] == "forward"
                    and any(g.nodes[s]["kind"] == "input" and "." in s for s in g.predecessors(n))}
    assert len(weight_casts) == 4       # 2 weights, 2 biases, cast once each
    frees = p.graph.meta["py_free"]
    assert set(frees) == weight_casts
    assert {g.nodes[frees[c]]["phase"] for c in weight_casts} == {"forward"}
    copies = sum(p.graph.g.nodes[c]["bytes_written"] for c in weight_casts)
    assert p.train["phases"]["forward"]["peak_bytes"] >= p.train["weights_bytes"] + copies


def test_cli_train_amp_one_liners():
    for amp in ("bf16", "fp16"):
        r = subprocess.run([sys.executable, "-m", "gpusim", "predict", "linear_relu_layernorm",
                            "--train", "--amp", amp, "--gpu", "h100"],
                           capture_output=True, text=True, timeout=120)
        assert r.returncode == 0, r.stderr
        assert "training step" in r.stdout and "optimizer" in r.stdout


def test_softmax_in_autocast_reads_16_bit_writes_fp32():
    # autocast's fp32_set_opt_dtype: softmax of a bf16 value returns fp32, with no cast
    # kernel on CUDA (_softmax(x, dim, half_to_float=True))
    lin = torch.nn.Linear(64, 64).to("meta")
    opt = torch.optim.SGD(lin.parameters(), lr=0.1)

    def step(x):
        opt.zero_grad(set_to_none=True)
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = torch.softmax(lin(x), dim=-1).sum()
        loss.backward()
        opt.step()
    p = gpusim.predict(step, (torch.empty(32, 64, device="meta"),), gpu="h100")
    g = p.graph.g
    sm = [n for n in g.nodes if n.startswith("_softmax") and "backward" not in n]
    assert len(sm) == 1 and g.nodes[sm[0]]["dtype"] == "float32"
    src = list(g.predecessors(sm[0]))
    assert [g.nodes[s]["dtype"] for s in src] == ["bfloat16"], src


def test_autocast_probe_leaves_the_math_attentions_own_upcast_alone():
    # Llama's RoPE leaves query and key fp32 beside a bf16 value. SDPA is on autocast's
    # lower-precision list: AutocastCUDA casts query and key to bf16 and passes the value
    # as it is; the math fallback below it then upcasts all three to fp32. That upcast of
    # the untouched value is the op's own, not autocast's (it was taken for a cast of the
    # value to fp32, and the traced SDPA failed on mixed dtypes)
    from gpusim.capture.amp import autocast_casts
    q = torch.empty(2, 4, 16, 16, device="meta")
    k = torch.empty(2, 2, 16, 16, device="meta")
    v = torch.empty(2, 2, 16, 16, device="meta", dtype=torch.bfloat16)
    sdpa = torch.nn.functional.scaled_dot_product_attention
    kw = {"is_causal": True, "enable_gqa": True}
    casts = autocast_casts(sdpa, (q, k, v), kw, torch.bfloat16)
    assert sorted(casts) == [(0, torch.bfloat16), (1, torch.bfloat16)]
    # all fp32: all three cast; all bf16 already: none
    assert sorted(autocast_casts(sdpa, (q, k, v.float()), kw, torch.bfloat16)) == \
        [(i, torch.bfloat16) for i in range(3)]
    assert autocast_casts(sdpa, (q.bfloat16(), k.bfloat16(), v), kw, torch.bfloat16) == []
    # an op's own cast with autocast off is still no autocast cast
    assert autocast_casts(torch.Tensor.to, (q, torch.bfloat16), {}, torch.bfloat16) == []


def _llama_step(amp):
    hf = pytest.importorskip("transformers")
    cfg = hf.LlamaConfig(vocab_size=256, hidden_size=64, intermediate_size=128,
                         num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                         max_position_embeddings=256, use_cache=False)
    cfg._attn_implementation = "sdpa"
    torch.manual_seed(0)
    with torch.device("meta"):
        model = hf.LlamaForCausalLM(cfg)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)

    def step(ids):
        opt.zero_grad(set_to_none=True)
        with torch.autocast("cuda", dtype=amp or torch.float32, enabled=amp is not None):
            loss = model(input_ids=ids, labels=ids).loss
        loss.backward()
        opt.step()
        return loss.detach()
    return step, (torch.zeros(2, 16, dtype=torch.long, device="meta"),)


def test_llama_gqa_amp_step_captures_with_fused_attention():
    """Issue 23: a grouped-query Llama step under bf16 autocast captures and predicts; its
    attention is one fused kernel per layer and direction (bf16 GQA without a mask: flash,
    cuDNN on Hopper; an H200 run of such a step, torch 2.11, launches cuDNN's fprop and
    bprop), not the math fallback, and its GEMMs run in bf16."""
    amp, fp32 = (gpusim.predict(*_llama_step(dt), gpu="h100") for dt in (torch.bfloat16, None))
    g = amp.graph.g
    phase = {n: g.nodes[n]["phase"] for n in g.nodes}
    attn = sorted(n for n in g.nodes if g.nodes[n]["kind"] == "attention")
    assert [phase[n] for n in attn if "backward" not in n] == ["forward"] * 2, attn
    assert [phase[n] for n in attn if "backward" in n] == ["backward"] * 2, attn
    for n in attn:
        assert g.nodes[n]["dtype"] == "bfloat16", n
    assert not any("_safe_softmax" in n or n.startswith("bmm") and phase[n] != "forward"
                   for n in g.nodes)
    mms = [n for n in g.nodes if n.startswith("mm") and phase[n] == "forward"]
    assert len(mms) == 2 * 7 + 1 and {g.nodes[n]["dtype"] for n in mms} == {"bfloat16"}
    t, t32 = amp.train, fp32.train
    for ph in ("forward", "backward", "optimizer"):
        assert t["phases"][ph]["kernels"] > 0 and t["phases"][ph]["device_us"] > 0
    assert "_to_copy" in " ".join(k.name for k in _kernels(amp, "forward"))
    # the optimizer's foreach kernels and the fp32 masters do not depend on autocast
    assert t["phases"]["optimizer"]["kernels"] == t32["phases"]["optimizer"]["kernels"]
    for key in ("weights_bytes", "gradient_bytes", "optimizer_state_bytes"):
        assert t[key] == t32[key], key


def test_cross_entropy_in_autocast_is_a_16_bit_log_softmax_and_a_fp32_nll_loss():
    """ATen's cross_entropy_loss calls log_softmax with the input's dtype (autocast leaves
    it in bf16) and nll_loss, which autocast runs in fp32: a cast of the log-probabilities
    between them (the H100 ResNet-50 and T5 bf16 records launch the 16-bit log-softmax,
    a copy, then the fp32 nll_loss)."""
    lin = torch.nn.Linear(64, 100).to("meta")
    opt = torch.optim.SGD(lin.parameters(), lr=0.1)

    def step(x, y):
        opt.zero_grad(set_to_none=True)
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = torch.nn.functional.cross_entropy(lin(x), y)
        loss.backward()
        opt.step()
    p = gpusim.predict(step, (torch.empty(32, 64, device="meta"),
                              torch.zeros(32, dtype=torch.long, device="meta")), gpu="h100")
    g = p.graph.g
    fwd = [n for n in p.graph.order if g.nodes[n].get("phase") == "forward"
           and g.nodes[n]["kind"] not in ("view", "input")]
    ops = [str(g.nodes[n]["op"]).split(".")[1] for n in fwd]
    i = ops.index("_log_softmax")
    assert g.nodes[fwd[i]]["dtype"] == "bfloat16"
    assert ops[i + 1:] == ["_to_copy", "nll_loss_forward"]
    assert g.nodes[fwd[i + 1]]["dtype"] == "float32"


def test_multihead_attention_in_autocast_runs_each_inner_op_in_16_bits():
    """``nn.MultiheadAttention`` (torchvision's ViT) is one Python function to autocast's
    torch-function layer, but eager autocast casts each of its ATen ops: the in-projection,
    the attention (a fused bf16 kernel, not fp32 math attention) and the out-projection all
    run in bf16. Cast at the function's inputs only, ViT-B/16's bf16 step kept fp32 attention
    and out-projections (b8: 11.9 ms predicted, 6.9 ms with each op cast)."""
    mha = torch.nn.MultiheadAttention(64, 4, batch_first=True).to("meta")
    opt = torch.optim.SGD(mha.parameters(), lr=0.1)

    def step(x):
        opt.zero_grad(set_to_none=True)
        with torch.autocast("cuda", dtype=torch.bfloat16):
            y, _ = mha(x, x, x, need_weights=False)
            loss = y.float().pow(2).mean()
        loss.backward()
        opt.step()
    p = gpusim.predict(step, (torch.empty(8, 32, 64, device="meta"),), gpu="h100")
    g = p.graph.g
    gemms = [n for n in g.nodes if g.nodes[n]["kind"] in ("matmul", "attention")]
    assert {g.nodes[n]["dtype"] for n in gemms} == {"bfloat16"}, \
        sorted((n, g.nodes[n]["dtype"]) for n in gemms)
    assert sum(g.nodes[n]["kind"] == "attention" for n in gemms) == 2     # forward, backward
    assert not any(str(g.nodes[n]["op"]).startswith("aten.bmm") for n in g.nodes)
