"""The static token's parts read off the recorded generate traces (validation/score/token_trace.py)."""

import os

import pytest

from validation.score import token_trace

TRACES = os.path.join(os.path.dirname(__file__), "..", "validation", "results", "generate", "traces")
GEMMA = os.path.join(TRACES, "hf_gemma-2b-b8-static.json.gz")
LLAMA = os.path.join(TRACES, "hf_llama-3.2-1b-b1-static.json.gz")


@pytest.fixture(scope="module")
def gemma():
    return token_trace.static_tokens(GEMMA)


def test_one_window_per_full_token(gemma):
    # 6 new tokens: the prefill's, four full windows between five compiled calls, the last's
    assert len(gemma) == 4
    assert all(t["graph_kernels"] == 75 for t in gemma)     # 4 layers' Inductor and library kernels + lm_head


def test_host_parts_fill_the_window(gemma):
    for t in gemma:
        parts = t["dynamo"] + t["call"] + t["tail"] + t["prep"]
        assert parts <= t["token"] + 1e-6
        assert parts >= 0.97 * t["token"]
        assert t["launch"] < t["call"]
        assert 0 <= t["python"] < t["token"]


def test_gemma_b8_token_is_the_hosts(gemma):
    # the graph (~0.77 ms) ends long before generate's stop check reads the token: no wait, the GPU idles
    m = token_trace.medians(gemma)
    assert m["bound"] == "host" and m["wait"] == 0
    assert m["graph_span"] < 0.4 * m["token"]
    assert m["gpu_idle"] > 0.5 * m["token"]
    assert m["graph_span"] >= m["graph_sum"]


def test_llama_b1_token_waits_for_its_graph():
    # Llama-3.2-1B's 314-kernel graph outlasts the tail's host work: the stop check's read waits
    m = token_trace.medians(token_trace.static_tokens(LLAMA))
    assert m["graph_kernels"] == 314
    assert m["bound"] == "gpu" and m["wait"] > 0


def test_table_lists_every_part(gemma):
    text = token_trace.table(token_trace.medians(gemma), {"token": 1.0})
    for part in ("token", "dynamo", "call", "tail", "prep", "graph_sum", "bound"):
        assert f"| {part} |" in text
