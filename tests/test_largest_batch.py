"""The batch search (gpusim.predict.step.largest_batch) against a brute-force scan, on memory
laws memory could follow: affine (weights + activations per sample), affine plus the
allocator's rounding to 2 MiB blocks, and convex (attention's quadratic activations)."""

import math

from hypothesis import given, settings
from hypothesis import strategies as st

from gpusim.predict.step import largest_batch

MIB = 1 << 20


def brute(peak, cap, start, limit):
    best = 0
    for b in range(start, limit + 1):
        if peak(b) <= cap:
            best = b
        else:
            break
    return best


def search(peak, cap, start=1, limit=4096):
    return largest_batch(lambda b: (peak(b), peak(b) <= cap), cap, start, limit)


@settings(max_examples=200, deadline=None)
@given(fixed=st.integers(0, 40 * 1024), per=st.integers(1, 4096), square=st.integers(0, 64),
       rounding=st.booleans(), cap_mib=st.integers(1, 80 * 1024))
def test_same_answer_as_a_scan(fixed, per, square, rounding, cap_mib):
    def peak(b):
        v = fixed * MIB + per * b * 1024 * 64 + square * b * b * 1024
        return math.ceil(v / (2 * MIB)) * 2 * MIB if rounding else v
    cap = cap_mib * MIB
    r = search(peak, cap)
    assert r["batch"] == brute(peak, cap, 1, 4096)
    assert r["limit_reached"] == (r["batch"] == 4096)


def test_affine_memory_takes_few_probes():
    peak = lambda b: 3_000 * MIB + 37 * MIB * b     # noqa: E731 - weights + activations a sample
    cap = 80 * 1024 * MIB
    r = search(peak, cap)
    assert r["batch"] == (cap - 3_000 * MIB) // (37 * MIB)
    assert len(r["tried"]) <= 5          # doubling and bisection take ~2 log2(2133) = 22


def test_nothing_fits():
    assert search(lambda b: 100 * b, 50)["batch"] == 0


def test_flat_start_does_not_jump_to_the_limit():
    """Batch 1 and 2 at the same peak (weights dominate, activations rounded into one block):
    the line is flat, so the search grows by doubling and by at most GROW times, never straight
    to the limit; about as many probes as an affine law."""
    G = 1 << 30
    peak = lambda b: 6.33 * G + (0.624 * G * (b - 2) if b > 2 else 0)   # noqa: E731
    r = search(peak, 80 * G, limit=1 << 16)
    assert r["batch"] == brute(peak, 80 * G, 1, 1 << 16)
    assert max(r["tried"]) < 1 << 16 and len(r["tried"]) <= 8
