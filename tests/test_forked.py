"""Two pieces of work at once (:mod:`gpusim.util.forked`), and ``gpusim generate``'s two paths
predicted on two cores: the same figures as one after the other, whatever the child does."""

import os
import time

import pytest
import torch

from gpusim.util import forked

needs_fork = pytest.mark.skipif(not forked.can_fork(), reason="no fork or one core here")


@needs_fork
def test_the_second_piece_runs_in_another_process():
    parent = os.getpid()
    mine, theirs = forked.both(lambda: ("here", os.getpid()), lambda: ("there", os.getpid()))
    assert mine == ("here", parent)
    assert theirs[0] == "there" and theirs[1] != parent


def _only_here(parent, value):
    """``value`` in this process; in a forked child, ``boom``."""
    def there():
        if os.getpid() != parent:
            raise RuntimeError("boom")
        return value
    return there


@needs_fork
def test_a_child_that_fails_leaves_the_piece_to_this_process():
    mine, theirs = forked.both(lambda: 1, _only_here(os.getpid(), 2))
    assert (mine, theirs) == (1, 2)


@needs_fork
def test_a_child_that_dies_leaves_the_piece_to_this_process():
    parent = os.getpid()

    def there():
        if os.getpid() != parent:
            os._exit(3)
        return "done here"
    assert forked.both(lambda: 0, there) == (0, "done here")


@needs_fork
def test_a_child_that_hangs_is_stopped_and_its_piece_done_here(monkeypatch):
    monkeypatch.setattr(forked, "MIN_WAIT_S", 0.5)
    parent = os.getpid()

    def there():
        if os.getpid() != parent:
            time.sleep(30)
        return "done here"
    t0 = time.perf_counter()
    assert forked.both(lambda: 0, there) == (0, "done here")
    assert time.perf_counter() - t0 < 10


def test_an_error_of_the_work_is_raised_here():
    def fail():
        raise ValueError("bad request")
    with pytest.raises(ValueError, match="bad request"):
        forked.both(lambda: 0, fail)


def test_without_fork_the_pieces_run_here_in_order(monkeypatch):
    monkeypatch.setattr(forked, "can_fork", lambda: False)
    order = []
    assert forked.both(lambda: order.append("a") or 1, lambda: order.append("b") or 2) == (1, 2)
    assert order == ["a", "b"]


hf = pytest.importorskip("transformers")


def tiny_llama():
    cfg = hf.LlamaConfig(num_hidden_layers=2, hidden_size=256, intermediate_size=512,
                         num_attention_heads=4, num_key_value_heads=2, vocab_size=1000,
                         max_position_embeddings=4096, eos_token_id=2)
    with torch.device("meta"):
        return hf.LlamaForCausalLM(cfg).eval()


@pytest.mark.parametrize("runs, batches", [
    ([("dynamic", "eager"), ("static", "compiled")], [2]),     # split by cache
    ([("dynamic", "eager")], [1, 4]),                           # split by batch
])
def test_generate_on_two_cores_answers_as_on_one(runs, batches):
    from gpusim.predict.generate import generate_grid
    model = tiny_llama()
    one = generate_grid(model, runs, batches, [128], 16, ["h100", "h200"], jobs=1)
    two = generate_grid(model, runs, batches, [128], 16, ["h100", "h200"], jobs=2)
    assert list(one) == list(two)
    assert [r.to_dict() for r in one.values()] == [r.to_dict() for r in two.values()]
    assert all(r.parts == {} for r in two.values()) and all(r.parts for r in one.values())
