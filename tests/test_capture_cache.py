"""The committed capture cache (validation.records.capture_cache): used only when made by this very
source and these library versions, and then equal to a fresh capture."""

import os
import pickle

import pytest

from validation.records import capture_cache as cc
from validation.records.store import _capture, load_zoo_records, record_graph, zoo_available

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
RESULTS = os.path.join(ROOT, "validation", "results")


@pytest.fixture
def fresh_state(monkeypatch):
    """Forget which file was read (each test points the cache at its own file)."""
    monkeypatch.setattr(cc._State, "path", None)
    monkeypatch.setattr(cc._State, "loaded", None)
    monkeypatch.setattr(cc._State, "warned", False)
    yield
    cc._State.path = cc._State.loaded = None


def _tiny():
    from gpusim.graph.opgraph import GraphBuilder
    b = GraphBuilder("tiny")
    b.output(b.op("relu", "pointwise", [b.input("x", (4, 8))]))
    return b.build()


def test_stamp_covers_the_capture_graph_and_model_source():
    files = cc.source_files()
    for pkg in ("gpusim/capture/", "gpusim/graph/", "gpusim/models/"):
        have = {f for f in files if f.startswith(pkg)}
        want = {os.path.relpath(os.path.join(d, f), ROOT).replace(os.sep, "/")
                for d, _, fs in os.walk(os.path.join(ROOT, pkg)) for f in fs if f.endswith(".py")}
        assert have == want and have
    s = cc.stamp()
    assert s["libraries"]["torch"] and len(s["source_sha256"]) == 64


def test_source_hash_changes_with_any_source_byte(tmp_path):
    for rel in ("gpusim/capture/a.py", "gpusim/graph/b.py", "gpusim/models/c.py",
                "validation/records/store.py", "validation/records/broad_zoo.py"):
        os.makedirs(tmp_path / os.path.dirname(rel), exist_ok=True)
        (tmp_path / rel).write_text("x = 1\n")
    h = cc.source_hash(str(tmp_path))
    (tmp_path / "gpusim/graph/b.py").write_text("x = 2\n")
    assert cc.source_hash(str(tmp_path)) != h


def test_a_current_file_is_used(tmp_path, monkeypatch, fresh_state):
    g = _tiny()
    key = ("m", (("batch", 1),), "float32", False, False, None, None)
    path = str(tmp_path / "graphs.pkl.xz")
    cc.write_file(path, {cc.key_of(key): pickle.dumps(g)})
    monkeypatch.setenv("GPUSIM_CAPTURE_CACHE", path)
    assert cc.check(path) is None
    got = cc.get(key)
    assert got is not None and pickle.dumps(got) == pickle.dumps(g)
    assert cc.get(key[:-1] + ("other",)) is None


def test_a_stale_file_is_never_used(tmp_path, monkeypatch, fresh_state):
    key = ("m", (), "float32", False, False, None, None)
    path = str(tmp_path / "graphs.pkl.xz")
    cc.write_file(path, {cc.key_of(key): pickle.dumps(_tiny())})
    doc = cc.read_file(path)
    doc["stamp"] = dict(doc["stamp"], source_sha256="0" * 64)
    import lzma
    with lzma.open(path, "wb") as f:
        pickle.dump(doc, f)
    monkeypatch.setenv("GPUSIM_CAPTURE_CACHE", path)
    assert "stale (source_sha256 changed)" in cc.check(path)
    with pytest.warns(cc.StaleCaptureCache, match="regenerate"):
        assert cc.get(key) is None
    monkeypatch.setenv("GPUSIM_CAPTURE_CACHE", "off")
    assert cc.get(key) is None


def test_a_graph_made_with_another_version_of_its_models_library_is_not_used(
        tmp_path, monkeypatch, fresh_state):
    keys = {m: (m, (), "float32", False, False, None, None) for m in ("timm:x", "tv:y", "hf:z")}
    path = str(tmp_path / "graphs.pkl.xz")
    cc.write_file(path, {cc.key_of(k): pickle.dumps(_tiny()) for k in keys.values()})
    doc = cc.read_file(path)
    doc["stamp"]["libraries"]["timm"] = "0.0.1"
    import lzma
    with lzma.open(path, "wb") as f:
        pickle.dump(doc, f)
    monkeypatch.setenv("GPUSIM_CAPTURE_CACHE", path)
    assert "timm" in cc.check(path)
    with pytest.warns(cc.StaleCaptureCache, match="timm changed"):
        assert cc.get(keys["timm:x"]) is None
    assert cc.get(keys["tv:y"]) is not None and cc.get(keys["hf:z"]) is not None


@pytest.mark.skipif(not zoo_available(), reason="zoo extra not installed")
def test_committed_graphs_equal_fresh_captures(fresh_state):
    """Where the committed file is current, what it returns is what capture returns now
    (a compiled and an eager record; the pickles byte for byte)."""
    why = cc.check(cc.DEFAULT_PATH)
    if why:
        pytest.skip(why + ": regenerate with python3 -m validation.records.capture_cache regenerate")
    recs = load_zoo_records(RESULTS, "h100")
    picked = [next(r for r in recs if r["run"] == "compiled"),
              next(r for r in recs if r["run"] == "eager" and r["family"] == "cnn")]
    for r in picked:
        args = (r["model"], tuple(sorted(r["sizes"].items())), r["dtype"],
                bool(r.get("channels_last")), r["run"] != "eager", r.get("amp"), None)
        cached = cc.get(args)
        assert cached is not None, f"{r['case_id']} not in the committed capture cache"
        assert pickle.dumps(cached) == pickle.dumps(_capture(*args)), r["case_id"]
        assert record_graph(r).name == cached.name
