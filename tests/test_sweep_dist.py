"""gpusim sweep across GPU counts (gpusim.sweep.dist): counts parsed, answers ranked, CLI mistakes one line."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpusim.sweep.dist import answers, parse_counts
from gpusim.util.errors import UserError


def _row(strategy, gpus, step_ms, fits=True, batch=32, gpu="h100-sxm"):
    return {"model": "m", "sizes": f"batch={batch}", "gpu": gpu, "strategy": strategy, "nproc_per_node": gpus,
            "nnodes": 1, "gpus": gpus, "batch_per_rank": batch, "step_ms": step_ms,
            "samples_per_s": batch * gpus / (step_ms / 1e3), "peak_gib": 1.0, "fits": fits, "comm_ms": 0.0,
            "exposed_comm_ms": 0.0, "error": ""}


def test_parse_counts():
    assert parse_counts("8, 1,2,4,2") == [1, 2, 4, 8]
    for bad in ("0", "a", "1,,2", "-1"):
        with pytest.raises(UserError):
            parse_counts(bad)


def test_answer_is_the_cheapest_configuration_meeting_the_target():
    rows = [_row("ddp", 1, 100.0), _row("ddp", 4, 110.0), _row("fsdp", 4, 90.0), _row("fsdp", 8, 80.0, fits=False)]
    ans = answers(rows, target_samples_per_s=1000.0, prices={"h100-sxm": 2.0})
    first = ans[0]
    assert (first["strategy"], first["gpus"], first["meets"]) == ("fsdp", 4, True)     # 4 GPUs needed; fsdp faster
    assert all(r["fits"] for r in ans)                                                # what does not fit is no answer
    assert not ans[-1]["meets"] and ans[-1]["gpus"] == 1
    # $ per 1k samples: price x GPUs x seconds per sample
    assert first["usd_per_1k_samples"] == pytest.approx(2.0 * 4 / 3600 / first["samples_per_s"] * 1000)


@settings(max_examples=40, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(["ddp", "fsdp"]), st.sampled_from([1, 2, 4, 8]),
                          st.floats(1.0, 500.0)), min_size=1, max_size=8), st.floats(1.0, 500.0))
def test_answers_meeting_the_target_come_first(cfgs, target):
    ans = answers([_row(s, n, t) for s, n, t in cfgs], target_step_ms=target)
    flags = [r["meets"] for r in ans]
    assert flags == sorted(flags, reverse=True)
    assert all(r["meets"] == (r["step_ms"] <= target) for r in ans)


@pytest.mark.parametrize("argv, msg", [
    (["sweep", "tv:resnet18", "--gpu", "h100", "--ddp", "--out", "x.csv"], "--nproc-per-node"),
    (["sweep", "tv:resnet18", "--gpu", "h100", "--nproc-per-node", "1,2", "--out", "x.csv"], "--train"),
    (["sweep", "tv:resnet18", "--gpu", "h100", "--train", "--nproc-per-node", "0", "--out", "x.csv"], "whole"),
])
def test_cli_mistakes_are_one_line(argv, msg, capsys):
    from gpusim.cli.commands import main
    assert main(argv) != 0
    err = capsys.readouterr().err.strip()
    assert msg in err and len(err.splitlines()) == 1
