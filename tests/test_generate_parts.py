"""validation/measure/generate_parts.py on the CPU: a real generate() of a one-layer Llama with every
piece of the token stamped; the records carry what the scorer reads, and the hooks leave nothing behind."""

import json

import pytest

pytest.importorskip("transformers")


def test_dry_run_records_every_piece_and_restores(tmp_path):
    from transformers.generation.logits_process import LogitsProcessorList
    from transformers.generation.stopping_criteria import StoppingCriteriaList
    from transformers.generation.utils import StopCheck

    from validation.measure import generate_parts
    before = (LogitsProcessorList.__call__, StoppingCriteriaList.__call__, StopCheck.__call__)
    out = tmp_path / "parts.jsonl"
    assert generate_parts.main(["--tiny", "--out", str(out), "--reps", "1", "--stamped", "1"]) == 0
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert rows[0]["kind"] == "environment"
    gen = [r for r in rows if r["kind"] == "generate"]
    assert {r["cache"] for r in gen} == {"static", "dynamic"}
    for r in gen:
        assert set(generate_parts.TOP) <= set(r["parts"]) and "loop" in r["parts"]
        # the token is its pieces plus the loop, by construction
        assert r["parts"]["token"] > 0 and r["statistic"] == "fastest rep"
        assert len(r["token_ms_reps"][0]) == r["new"] - 1 and len(r["forward_host_ms"]) == r["new"] - 1
    assert (LogitsProcessorList.__call__, StoppingCriteriaList.__call__, StopCheck.__call__) == before


def test_per_token_splits_at_the_processors():
    from validation.measure.generate_parts import per_token
    ev = [("procs", 0.0, 1e-6), ("stop", 2e-6, 5e-6), ("prep", 6e-6, 8e-6), ("call", 8e-6, 18e-6),
          ("tree", 9e-6, 17e-6), ("procs", 20e-6, 21e-6)]
    (t,) = per_token(ev)
    assert t["token"] == pytest.approx(20.0) and t["call"] == pytest.approx(10.0) and t["tree"] == pytest.approx(8.0)
    assert t["loop"] == pytest.approx(20.0 - 1 - 3 - 2 - 10)


def test_token_parts_groups_the_pieces():
    from validation.score.token_parts import measured_parts
    r = {"parts": {"token": 1500, "prep": 400, "call": 340, "fx": 200, "replay": 30, "update": 50, "procs": 200,
                   "crit": 60, "loop": 150, "stop": 300}, "graph_device_us": 700}
    m = measured_parts(r)
    assert m["dynamo"] == 140 and m["tree"] == 170 and m["replay"] == 30 and m["graph"] == 700
    assert m["tail"] == 50 + 200 + 60 + 150
    assert m["prep"] + m["call"] + m["tail"] + m["stop"] == r["parts"]["token"]   # the loop closes the token
    assert "dynamo" not in measured_parts({"parts": {"call": 5}})                   # eager: no split
