"""Host reads of a uniform draw: ``if torch.rand([]) < self.layerdrop: continue`` (LayerDrop in
OPT, Whisper, BART, ... in training mode) is answered by its likelier outcome, so a training
step keeps every layer (layerdrop 0.0 by default: the branch is never taken). Answered as an
ordinary check (True), a 125M OPT step kept 56 of its ~1,080 kernels."""

import collections

import pytest
import torch

from gpusim.capture.pycalls import uniform_draw_answer


def _compare(op, c, draw=torch.ops.aten.rand.default):
    g = torch.fx.Graph()
    r = g.call_function(draw, ([],))
    return g.call_function(op, (r, c))


@pytest.mark.parametrize("op,c,want", [
    (torch.ops.aten.lt.Scalar, 0.0, False), (torch.ops.aten.lt.Scalar, 0.9, True),
    (torch.ops.aten.le.Scalar, 0.2, False), (torch.ops.aten.gt.Scalar, 0.1, True),
    (torch.ops.aten.ge.Scalar, 0.7, False), (torch.ops.aten.gt.Scalar, 1.0, False)])
def test_a_uniform_draw_compared_with_a_number_takes_its_likelier_answer(op, c, want):
    assert uniform_draw_answer(_compare(op, c)) is want


def test_other_reads_are_not_answered_here():
    assert uniform_draw_answer(_compare(torch.ops.aten.lt.Scalar, 0.5,
                                        torch.ops.aten.randn.default)) is None
    assert uniform_draw_answer(_compare(torch.ops.aten.eq.Scalar, 0.0)) is None
    assert uniform_draw_answer(None) is None


def test_opt_training_step_keeps_every_decoder_layer():
    transformers = pytest.importorskip("transformers")
    from gpusim.capture.train import capture_step
    from gpusim.predict.step import make_optimizer
    cfg = transformers.OPTConfig(vocab_size=64, hidden_size=16, num_hidden_layers=3,
                                 ffn_dim=32, num_attention_heads=2, max_position_embeddings=32,
                                 word_embed_proj_dim=16, use_cache=False)
    assert cfg.layerdrop == 0.0
    with torch.device("meta"):
        model = transformers.OPTForCausalLM(cfg).train()
    opt = make_optimizer("adamw", model.parameters())

    def step(ids):
        opt.zero_grad(set_to_none=True)
        model(input_ids=ids, labels=ids).loss.backward()
        opt.step()

    g = capture_step(step, (torch.zeros(2, 8, dtype=torch.long, device="meta"),)).graph
    gemms = collections.Counter(g.node(n).get("phase") for n in g.compute_nodes
                                if g.node(n)["op"] in ("aten.mm.default", "aten.addmm.default"))
    # 3 layers x 6 linears (q, k, v, out, fc1, fc2) and the LM head; backward: two GEMMs each
    assert gemms["forward"] == 3 * 6 + 1
    assert gemms["backward"] == 2 * gemms["forward"]
