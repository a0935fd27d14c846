"""The one format of measured records: gzip JSON Lines, one row per case.

A run set (the zoo on one GPU, the held-out models, the classic cases, the fresh-process
memory runs, ...) is one ``<name>.jsonl.gz`` file; every row is self-contained: it carries
its own ``env`` (GPU, driver, torch, the UTC time it was measured), because rows of one file
come from several leases and scoring matches a row to its lease by that time
(:func:`validation.score.zoo_accuracy.lease_host`). One file instead of one JSON per case keeps
the working tree that travels to the GPU machine small (gzip takes the repetitive kernel
lists ~10x down) and appending a row is how the harness records a finished case.

Appending writes one more gzip member (``gzip`` reads concatenated members as one stream),
so a run killed mid-case loses at most that case: :func:`read_records` drops a truncated
last member instead of failing on it.

``python -m validation.records.store pack OUT.jsonl.gz A.json B.json ...`` packs per-case JSON
files (the old format, or a device run's) into one records file.
"""

from __future__ import annotations

import functools
import gzip
import json
import os
import sys
import zlib


def _open(path: str, mode: str):
    return gzip.open(path, mode + "t") if path.endswith(".gz") else open(path, mode)


def read_records(path: str) -> list[dict]:
    """Every row of ``path`` (``.jsonl.gz`` or plain ``.jsonl``), in file order; ``[]`` when
    the file does not exist (a GPU that has no such run set)."""
    if not os.path.exists(path):
        return []
    rows = []
    try:
        with _open(path, "r") as f:
            for ln in f:
                if ln.strip():
                    rows.append(json.loads(ln))
    except (EOFError, zlib.error, json.JSONDecodeError):
        pass                     # a run killed while appending: its last row is lost, not the file
    return rows


def write_records(path: str, rows) -> str:
    """Write ``rows`` as ``path`` (replacing it atomically); returns the path."""
    from gpusim.util.atomic import atomic_path
    suffix = ".jsonl.gz" if path.endswith(".gz") else ".jsonl"
    with atomic_path(path, suffix=suffix) as tmp:
        # mtime=0: the same rows give the same bytes, so re-packing changes nothing in git
        raw = open(tmp, "wb")
        f = (gzip.GzipFile(filename="", fileobj=raw, mode="wb", mtime=0) if path.endswith(".gz")
             else raw)
        try:
            for r in rows:
                f.write((json.dumps(r, default=str) + "\n").encode())
        finally:
            f.close()
            raw.close()
    return path


def append_record(path: str, row: dict) -> str:
    """Add one row at the end of ``path`` (created if missing); returns the path."""
    d = os.path.dirname(path)
    if d:
        os.makedirs(d, exist_ok=True)
    with _open(path, "a") as f:
        f.write(json.dumps(row, default=str) + "\n")
    return path


def failure_lines(rows, top: int = 8) -> list:
    """The commonest failure reasons of records ``rows``, most frequent first, each with
    its count and one case it hit: ``["3x RuntimeError: ... (e.g. case)"]``."""
    from collections import Counter
    reasons = Counter(r["failed"] for r in rows if r.get("failed"))
    first = {}
    for r in rows:
        if r.get("failed"):
            first.setdefault(r["failed"], r.get("case_id"))
    return [f"{n}x {why[:150]} (e.g. {first[why]})" for why, n in reasons.most_common(top)]


def run_set(results_dir: str, gpu: str, name: str) -> str:
    """Where a GPU's run set lives: ``<results_dir>/<gpu>/<name>.jsonl.gz`` (``name``: zoo,
    holdout, classic, ...)."""
    return os.path.join(results_dir, gpu, f"{name}.jsonl.gz")


def load_zoo_records(results_dir: str, gpu: str, sub: str = "zoo") -> list[dict]:
    """The measured (not failed) rows of the GPU's zoo run set, or of the held-out models'
    (``sub="holdout"``), in file order (sorted by case at packing)."""
    return [r for r in read_records(run_set(results_dir, gpu, sub))
            if not r.get("failed") and r.get("kernel_sum_us")]


def zoo_available() -> bool:
    """Whether the zoo extra (torchvision, timm, transformers) imports here."""
    try:
        from gpusim.models import zoo  # noqa: F401
        import timm, torchvision, transformers  # noqa: F401,E401
    except ImportError:
        return False
    return True


@functools.lru_cache(maxsize=1024)    # ~0.7 MB a zoo graph; the tests ask for ~270
def _graph(model: str, sizes: tuple, dtype: str, channels_last: bool, compiling: bool = False,
           amp: str | None = None, hf_config: str | None = None):
    from validation.records import capture_cache
    args = (model, sizes, dtype, channels_last, compiling, amp, hf_config)
    g = capture_cache.get(args)       # the committed captures, when made by this very source
    if g is None:
        g = _capture(*args)
        capture_cache.put(args, g)
    return g


def _capture(model: str, sizes: tuple, dtype: str, channels_last: bool, compiling: bool,
             amp: str | None, hf_config: str | None):
    from gpusim.capture.tracing import capture
    from gpusim.models.resolve import parse_dtype
    if model.startswith("hfcfg:"):    # a broad row's Hugging Face model, from its own config
        from validation.records.broad_zoo import BroadZoo
        zoo = BroadZoo.from_row({"hf_config": json.loads(hf_config), "family": None})
    else:
        from gpusim.models import zoo            # optional extra
    fn, args = zoo.build(model, device="meta", dtype=parse_dtype(dtype),
                         channels_last=channels_last, **dict(sizes))
    return capture(fn, args, name=model, compiling=compiling, amp=amp)


def record_graph(rec: dict):
    """The record's model captured on meta tensors, along the code path its run took
    (``torch.compile``'s for compiled and CUDA-graph runs), under autocast for an AMP
    row (``amp``: ``"bf16"``/``"fp16"``, an fp32 model); a broad row's ``hfcfg:`` model
    from the row's own ``hf_config`` (:meth:`validation.records.broad_zoo.BroadZoo.from_row`). Zoo rows
    hold no graph (it is the zoo entry's), so scoring re-captures it: a change to capture
    or lowering shows in the figures."""
    hf = rec.get("hf_config")
    return _graph(rec["model"], tuple(sorted(rec["sizes"].items())), rec["dtype"],
                  bool(rec.get("channels_last")), rec["run"] != "eager", rec.get("amp"),
                  json.dumps(hf, sort_keys=True) if hf else None)


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) < 3 or argv[0] != "pack":
        print("usage: python -m validation.records.store pack OUT.jsonl.gz FILE.json ...", file=sys.stderr)
        return 2
    rows = []
    for p in sorted(argv[2:], key=os.path.basename):
        with open(p) as f:
            rows.append(json.load(f))
    write_records(argv[1], rows)
    print(f"{argv[1]}: {len(rows)} rows")
    return 0


if __name__ == "__main__":
    sys.exit(main())
