"""fx_to_opgraph's memos (gpusim.capture.fxnodes): a layout fact memoised per shapes and strides is
the fact computed afresh, whatever tensors share the key; plain() returns plain values as they are."""

import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from gpusim.capture.fakes import plain
from gpusim.capture.fxnodes import LayoutMemo, MetaMemo, _meta, _permuted, _plain

_DIMS = st.lists(st.integers(1, 4), min_size=0, max_size=3)


@st.composite
def _tensor(draw, shape=None):
    """A meta tensor of ``shape`` (drawn when None) with strides drawn from dense, transposed,
    broadcast (0) and strided layouts."""
    shape = draw(_DIMS) if shape is None else shape
    stride = [draw(st.sampled_from([0, 1, 2, 3, 5, 8, 16])) for _ in shape]
    if draw(st.booleans()):
        stride = list(torch.empty(shape, device="meta").stride())
        if len(shape) >= 2 and draw(st.booleans()):
            stride = list(torch.empty(shape, device="meta").transpose(-1, -2).contiguous()
                          .transpose(-1, -2).stride())
    return torch.empty_strided(shape, stride, device="meta")


@settings(max_examples=150, deadline=None)
@given(st.data())
def test_layout_memo_is_the_fact_itself(data):
    memo = LayoutMemo()
    out = data.draw(_tensor())
    same = data.draw(st.booleans())          # an operand of the output's shape, or any shape
    ts = [data.draw(_tensor(list(out.shape) if same else None)) for _ in range(4)]
    for f in (_plain, _permuted):
        for t in ts + ts:                    # the second pass reads the memo
            assert memo(f, t, out) == f(t, out)
            twin = torch.empty_strided(t.shape, t.stride(), device="meta")
            assert memo(f, twin, out) == f(twin, out)


def test_meta_memo_reads_each_tensor_once():
    t = torch.empty(3, 4, device="meta", dtype=torch.bfloat16)
    memo = MetaMemo()
    assert memo(t) == _meta(t) and memo(t) is memo(t) and len(memo) == 1


def test_plain_keeps_plain_values_and_turns_nested_ones():
    shape = (2, 3, 4)
    assert plain(shape) is shape and plain(3) == 3 and plain("x") == "x" and plain(None) is None
    d = {"shape": (1, 2), "reads": {"a": 1.5}, "inputs": ["a"], "sdpa": {"dtype": torch.bfloat16}}
    assert plain(d) == d
