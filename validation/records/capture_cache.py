"""Captured record graphs kept on disk, so scoring the committed records need not re-trace
every model (a zoo capture is ~1 s of ``make_fx`` on fake tensors; the test suite scores
several hundred records).

:func:`validation.records.record_graph` asks :func:`get` before it captures. The cache is one
file, ``validation/capture_cache/graphs.pkl.xz``: the pickled :class:`~gpusim.graph.opgraph.OpGraph`
of every record graph the tests in :data:`TESTS` ask for, under the *stamp* it was made with:

- a SHA-256 of every source file of ``gpusim/capture``, ``gpusim/graph`` and ``gpusim/models``,
  and of ``validation/records/store.py`` and ``validation/records/broad_zoo.py`` (which build the models);
- the versions of torch and networkx (every graph), of torchvision, timm and transformers
  (the graphs of the models each builds: ``tv:``, ``timm:``, ``hf:``/``hfcfg:``).

A file whose source hash, torch or networkx differs from here is never used, nor a graph
whose model's library differs: :func:`get` warns once (:class:`StaleCaptureCache`, naming
the command below) and those graphs are captured afresh, as without a cache. So a change to capture, to the graph or to a model shows in the scores
at once; only the time the tests take says the cache wants regenerating:

    python3 -m validation.records.capture_cache regenerate     # runs TESTS capturing afresh (~15 min)
    python3 -m validation.records.capture_cache check          # exit 1 when stale or missing

``GPUSIM_CAPTURE_CACHE=off`` ignores the file (every graph captured);
``GPUSIM_CAPTURE_CACHE=<path>`` reads another file.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import lzma
import os
import pickle
import sys
import threading
import warnings

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
DEFAULT_PATH = os.path.join(ROOT, "validation", "capture_cache", "graphs.pkl.xz")
#: source the graphs depend on (directories: every ``*.py`` below them)
SOURCES = ("gpusim/capture", "gpusim/graph", "gpusim/models",
           "validation/records/store.py", "validation/records/broad_zoo.py")
#: libraries whose versions the graphs depend on: every graph on torch and networkx, a
#: model's graphs on the library that builds it (name prefix; any other name: on all)
LIBRARIES = ("torch", "torchvision", "timm", "transformers", "networkx")
COMMON_LIBRARIES = ("torch", "networkx")
MODEL_LIBRARIES = {"tv:": ("torchvision",), "timm:": ("timm",), "hf:": ("transformers",),
                   "hfcfg:": ("transformers",)}
FORMAT = 1


class StaleCaptureCache(UserWarning):
    """The committed capture cache was made by other sources or library versions."""


def source_files(root: str = ROOT) -> list[str]:
    """The files :data:`SOURCES` names, relative to ``root``, sorted."""
    out = []
    for s in SOURCES:
        p = os.path.join(root, s)
        if os.path.isfile(p):
            out.append(s)
            continue
        for d, dirs, files in os.walk(p):
            dirs[:] = sorted(x for x in dirs if x != "__pycache__")
            out += [os.path.relpath(os.path.join(d, f), root).replace(os.sep, "/")
                    for f in files if f.endswith(".py")]
    return sorted(out)


def source_hash(root: str = ROOT) -> str:
    h = hashlib.sha256()
    for rel in source_files(root):
        with open(os.path.join(root, rel), "rb") as f:
            data = f.read()
        h.update(rel.encode() + b"\0" + str(len(data)).encode() + b"\0" + data)
    return h.hexdigest()


def _version(lib: str) -> str | None:
    try:
        return importlib.metadata.version(lib)
    except importlib.metadata.PackageNotFoundError:
        return None


def stamp(root: str = ROOT) -> dict:
    """What a cache file must have been made with to be used here."""
    import torch
    libs = {lib: _version(lib) for lib in LIBRARIES}
    libs["torch"] = torch.__version__
    return {"format": FORMAT, "libraries": libs, "source_sha256": source_hash(root)}


def key_of(args: tuple) -> str:
    """The cache key of :func:`validation.records._graph`'s arguments (model, sorted sizes,
    dtype, channels_last, compiling, amp, hf_config json): their ``repr``."""
    return repr(tuple(args))


class _State:
    lock = threading.Lock()
    loaded: dict | None = None     # the file's {"stamp", "graphs", "here"}; None: unusable
    path: str | None = None
    warned = False
    hits = 0
    misses = 0


def cache_path() -> str | None:
    env = os.environ.get("GPUSIM_CAPTURE_CACHE", "")
    if env.lower() in ("off", "0", "no", "false"):
        return None
    return env or DEFAULT_PATH


def read_file(path: str) -> dict:
    """``{"stamp": .., "graphs": {key: pickled OpGraph}}`` of a cache file."""
    with lzma.open(path, "rb") as f:
        return pickle.load(f)


def _warn(msg: str) -> None:
    if not _State.warned:
        _State.warned = True
        warnings.warn(StaleCaptureCache(msg + ": regenerate it with "
                                        "`python3 -m validation.records.capture_cache regenerate`"),
                      stacklevel=4)


def stale_reasons(old: dict, here: dict, model: str | None = None) -> list[str]:
    """What differs between a file's stamp ``old`` and ``here`` that matters to the file
    (``model`` None) or to one graph of ``model``: the format, the source hash, torch and
    networkx for every graph; the library the model comes from (:data:`MODEL_LIBRARIES`)
    for that model's graphs."""
    if model is None:
        why = [k for k in ("format", "source_sha256") if old.get(k) != here.get(k)]
        libs = COMMON_LIBRARIES
    else:
        why = []
        libs = next((v for k, v in MODEL_LIBRARIES.items() if model.startswith(k)), LIBRARIES)
    have = old.get("libraries") or {}
    return why + [lib for lib in libs if have.get(lib) != here["libraries"].get(lib)]


def _doc() -> dict | None:
    """The cache file read once, with its ``here`` stamp; None when off, missing or stale
    as a whole."""
    path = cache_path()
    if path is None:
        return None
    with _State.lock:
        if _State.path == path:
            return _State.loaded
        _State.path, _State.loaded = path, None
        if not os.path.exists(path):
            return None
        doc = read_file(path)
        here = stamp()
        why = stale_reasons(doc.get("stamp") or {}, here)
        if why:
            _warn(f"{os.path.relpath(path, ROOT)} is stale ({', '.join(why)} changed): it is "
                  "not used, every record graph is captured afresh (slow)")
            return None
        _State.loaded = dict(doc, here=here)
        return _State.loaded


def get(args: tuple):
    """The cached graph of :func:`validation.records._graph`'s ``args``, or None (not
    cached, or made with another version of the model's library)."""
    doc = _doc()
    blob = doc["graphs"].get(key_of(args)) if doc else None
    if blob is not None:
        why = stale_reasons(doc["stamp"], doc["here"], args[0])
        if why:
            _warn(f"{os.path.relpath(_State.path, ROOT)}: {', '.join(why)} changed: its "
                  "models' graphs are captured afresh (slow)")
            blob = None
    if blob is None:
        _State.misses += 1
        return None
    _State.hits += 1
    return pickle.loads(blob)


#: the tests whose record scoring asks for the graphs (the cache holds what they ask for)
TESTS = ("tests/test_holdout_accuracy.py", "tests/test_memory.py", "tests/test_memtracker.py",
         "tests/test_zoo_accuracy.py", "tests/test_broad_accuracy.py", "tests/test_amp.py",
         "tests/test_e2e.py")
#: ``GPUSIM_CAPTURE_CACHE_RECORD=<dir>``: every fresh capture is also written there
RECORD_ENV = "GPUSIM_CAPTURE_CACHE_RECORD"


def put(args: tuple, graph) -> None:
    """With :data:`RECORD_ENV` set (:func:`regenerate`), keep a fresh capture as one file
    of that directory; nothing otherwise."""
    d = os.environ.get(RECORD_ENV)
    if not d:
        return
    os.makedirs(d, exist_ok=True)
    key = key_of(args)
    name = hashlib.sha256(key.encode()).hexdigest()[:32] + ".pkl"
    with open(os.path.join(d, name + ".tmp"), "wb") as f:
        pickle.dump((key, pickle.dumps(graph, protocol=pickle.HIGHEST_PROTOCOL)), f)
    os.replace(os.path.join(d, name + ".tmp"), os.path.join(d, name))


def write_file(path: str, graphs: dict) -> str:
    """``graphs`` (``{key: pickled graph}``) stamped with :func:`stamp`, as ``path``."""
    os.makedirs(os.path.dirname(path), exist_ok=True)
    doc = {"stamp": stamp(), "graphs": dict(sorted(graphs.items()))}
    tmp = path + ".tmp"
    with lzma.open(tmp, "wb", preset=9 | lzma.PRESET_EXTREME) as f:
        pickle.dump(doc, f, protocol=pickle.HIGHEST_PROTOCOL)
    os.replace(tmp, path)
    return path


def bundle(record_dir: str, path: str = DEFAULT_PATH) -> dict:
    """The captures recorded in ``record_dir`` written, stamped, to ``path``."""
    graphs = {}
    for name in sorted(os.listdir(record_dir)):
        if name.endswith(".pkl"):
            with open(os.path.join(record_dir, name), "rb") as f:
                key, blob = pickle.load(f)
            graphs[key] = blob
    write_file(path, graphs)
    return {"path": path, "graphs": len(graphs), "bytes": os.path.getsize(path)}


def regenerate(path: str = DEFAULT_PATH, tests=TESTS) -> dict:
    """Run ``tests`` with no cache read, recording every graph they capture, and write the
    captures, stamped, to ``path`` (their pass or fail is theirs to report)."""
    import subprocess
    import tempfile
    with tempfile.TemporaryDirectory(prefix="gpusim-captures-") as d:
        env = dict(os.environ, GPUSIM_CAPTURE_CACHE="off", **{RECORD_ENV: d})
        subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *tests],
                       cwd=ROOT, env=env, check=False)
        return bundle(d, path)


def check(path: str = DEFAULT_PATH) -> str | None:
    """None when ``path`` exists and matches :func:`stamp` in full; else why not."""
    if not os.path.exists(path):
        return f"{path}: missing"
    old, here = read_file(path).get("stamp") or {}, stamp()
    why = stale_reasons(old, here) + [lib for lib in LIBRARIES if lib not in COMMON_LIBRARIES
                                      and (old.get("libraries") or {}).get(lib) != here["libraries"][lib]]
    return f"{path}: stale ({', '.join(why)} changed)" if why else None


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    cmd = argv[0] if argv else ""
    path = argv[1] if len(argv) > 1 else DEFAULT_PATH
    if cmd == "regenerate":
        r = regenerate(path)
        print(f"{os.path.relpath(r['path'])}: {r['graphs']} graphs, {r['bytes'] / 2**20:.1f} MiB")
        return 0
    if cmd == "check":
        why = check(path)
        print(why or f"{os.path.relpath(path)}: current")
        return 1 if why else 0
    print("usage: python3 -m validation.records.capture_cache regenerate|check [PATH]", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main())
