"""The lab's records format (validation/records/store.py), the accuracy guards' failure lines and
the lab's import graph."""
import glob
import gzip
import json
import os

import pytest

from validation.records.store import append_record, load_zoo_records, main, read_records, write_records
from validation.records.stats import fail_if_worse, worse_than

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def test_rows_round_trip_and_append(tmp_path):
    rows = [{"case_id": "a", "kernels": [{"name": "k", "us": 1.25}], "env": {"utc": "x"}},
            {"case_id": "b", "failed": "OOM"}]
    p = str(tmp_path / "set.jsonl.gz")
    write_records(p, rows)
    assert read_records(p) == rows
    append_record(p, {"case_id": "c"})
    assert [r["case_id"] for r in read_records(p)] == ["a", "b", "c"]
    with gzip.open(p, "rt") as f:                      # plain gzip JSONL, readable by anything
        assert [json.loads(ln)["case_id"] for ln in f] == ["a", "b", "c"]
    assert read_records(str(tmp_path / "missing.jsonl.gz")) == []
    a, b = str(tmp_path / "a.jsonl.gz"), str(tmp_path / "b.jsonl.gz")
    write_records(a, rows)
    write_records(b, rows)
    assert open(a, "rb").read() == open(b, "rb").read()   # re-packing changes nothing in git


def test_pack_keeps_every_field(tmp_path):
    docs = [{"case_id": f"m{i}", "x": {"y": [i, 0.1 * i]}, "kernel_sum_us": 1.0} for i in range(3)]
    for d in docs:
        (tmp_path / f"{d['case_id']}.json").write_text(json.dumps(d, indent=1))
    (tmp_path / "h100").mkdir()
    out = str(tmp_path / "h100" / "zoo.jsonl.gz")
    assert main(["pack", out, *map(str, sorted(tmp_path.glob("*.json")))]) == 0
    assert read_records(out) == docs
    assert load_zoo_records(str(tmp_path), "h100") == docs


def test_committed_run_sets_are_compact_records():
    """No per-case JSON is left under results/: every run set is one records file."""
    res = os.path.join(ROOT, "validation", "results")
    assert not glob.glob(os.path.join(res, "*", "zoo", "*.json"))
    assert not glob.glob(os.path.join(res, "*", "*__*.json"))
    assert len(load_zoo_records(os.path.join(ROOT, "validation", "results"), "h100")) >= 100


def test_a_failing_threshold_is_one_line_naming_the_figure():
    got = {"median": 16.0, "p90": 30.2912}
    assert worse_than(got, {"median": 16.0, "p90": 30.2}, "h200 e2e eager") == [
        "h200 e2e eager p90 30.29% > threshold 30.2%"]
    assert worse_than(got, {"median": 16.0, "p90": 30.3}, "h200 e2e eager") == []
    with pytest.raises(pytest.fail.Exception) as e:
        fail_if_worse(["h200 e2e eager p90 30.29% > threshold 30.2%"], "zoo accuracy")
    assert str(e.value) == "zoo accuracy regressed:\nh200 e2e eager p90 30.29% > threshold 30.2%"


def _chatty_loggers() -> dict:
    import logging
    return {n: lg.level for n, lg in logging.Logger.manager.loggerDict.items()
            if isinstance(lg, logging.Logger) and lg.propagate and lg.level
            and lg.level < logging.WARNING}


def test_scoring_a_record_leaves_logging_as_it_found_it():
    """Re-capturing a zoo record as the accuracy guards do (torch.compile's path, and eager
    with the model's Python clocked) leaves no logger below WARNING that reaches the root
    (pytest would show its chatter under a failing assertion)."""
    import logging
    from validation.records.store import record_graph, zoo_available
    if not zoo_available():
        pytest.skip("zoo extra not installed")
    before, root = _chatty_loggers(), logging.getLogger().level
    rec = {"model": "tv:resnet18", "sizes": {"batch": 1, "hw": 64}, "dtype": "bfloat16",
           "run": "compiled"}
    record_graph(rec)
    record_graph(dict(rec, run="eager"))
    assert _chatty_loggers() == before and logging.getLogger().level == root
