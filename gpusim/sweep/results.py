"""A sweep's results files: parquet or CSV, the partial file a resumed sweep appends to, and reading them back as one tidy table (:func:`read_results`)."""

from __future__ import annotations
import json
import math
import os
from gpusim.util.errors import UserError
from gpusim.sweep.columns import FIGURES, FORMATS, INSTALL, KEY, MEMORY, _one_line, _pandas


# ---------------------------------------------------------------- results files
def out_format(path: str) -> str:
    ext = os.path.splitext(path)[1].lower()
    if ext not in FORMATS:
        raise UserError(f"cannot write sweep results to {path}: give a .parquet or .csv file name")
    if ext == ".parquet":
        try:
            import pyarrow  # noqa: F401
        except ImportError:
            raise UserError(f"a .parquet file needs pyarrow (the sweep extra): {INSTALL}; "
                            "or give a .csv file name") from None
    return ext


def partial_path(out: str) -> str:
    return out + ".partial.jsonl"


def _key(row) -> tuple:
    def norm(v):
        if v is None or (isinstance(v, float) and math.isnan(v)):
            return ""
        if isinstance(v, str) and v in ("True", "False"):
            return v == "True"
        return v.item() if hasattr(v, "item") else v
    return tuple(norm(row[k]) if k in row else "" for k in KEY)


def read_results(path: str):
    """A results file (.parquet or .csv) as a DataFrame; a one-line error if it cannot be
    read or is not a sweep's."""
    pd = _pandas()
    ext = out_format(path)
    if not os.path.isfile(path):
        raise UserError(f"sweep results {path} do not exist")
    try:
        df = pd.read_parquet(path) if ext == ".parquet" else pd.read_csv(
            path, dtype={"sizes": str, "amp": str, "error": str, "unmodelled_ops": str,
                         "memory_peak_ops": str}, keep_default_na=False, na_values=[""])
    except Exception as e:  # noqa: BLE001 - a damaged file: say which, no traceback
        raise UserError(f"cannot read sweep results {path}: {_one_line(e)}") from None
    missing = [k for k in KEY if k not in df.columns]
    if missing:
        raise UserError(f"{path} is not a gpusim sweep's results (no column {missing[0]!r})")
    return _tidy(df)


def _as_bool(v):
    if isinstance(v, str):
        return {"true": True, "false": False}.get(v.strip().lower())
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return None
    return bool(v)


def read_partial(path: str) -> list[dict]:
    """The rows of a sidecar; a last line cut short by a kill is dropped."""
    rows = []
    if not os.path.exists(path):
        return rows
    with open(path, encoding="utf-8") as f:
        for line in f:
            try:
                rows.append(json.loads(line))
            except json.JSONDecodeError:
                break
    return rows


def append_rows(path: str, rows: list[dict]) -> None:
    """Append one task's rows to the sidecar in one write, flushed to disk."""
    data = "".join(json.dumps(r, allow_nan=True) + "\n" for r in rows)
    with open(path, "a", encoding="utf-8") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())


def write_results(path: str, frame) -> None:
    """Write ``frame`` to ``path`` (.parquet or .csv) atomically."""
    from gpusim.util.atomic import atomic_path
    ext = out_format(path)
    try:
        with atomic_path(path, ext) as tmp:
            if ext == ".parquet":
                frame.to_parquet(tmp, index=False)
            else:
                frame.to_csv(tmp, index=False)
    except OSError as e:
        raise UserError(f"cannot write {path}: {e.strerror or e}") from None


def _frame(rows: list[dict], order: dict | None = None):
    """Rows as a DataFrame in sweep order (``order``: key -> position; other rows after,
    sorted by key), one row per key (the last wins)."""
    pd = _pandas()
    by_key = {}
    for r in rows:
        by_key[_key(r)] = r
    order = order or {}
    keys = sorted(by_key, key=lambda k: (order.get(k, len(order)), tuple(map(str, k))))
    df = pd.DataFrame([by_key[k] for k in keys])
    return _tidy(df) if len(df) else df


def _tidy(df):
    """Columns in order, the key, then the sizes (every size the model took, defaults
    included), then the figures; whole numbers stay whole where a row lacks them (the
    batch of a model without one) instead of turning float."""
    pd = _pandas()
    tail = {"samples_per_call", "samples_per_s", "error", "gpusim_version", "gpu_name",
            "spec_source", "graph", "unmodelled_ops"} | set(FIGURES)
    rest = [c for c in df.columns if c not in KEY]
    sizes = [c for c in rest if c not in tail and not c.startswith("memory_")]
    ints = sizes + ["samples_per_call", "n_kernels"] + [
        "memory_" + k for k in MEMORY if k not in ("peak_ops", "fits", "capacity_bytes")]
    for c in ints:
        if c in df.columns and pd.api.types.is_numeric_dtype(df[c]):
            df[c] = df[c].astype("Int64")
    for c in ("sizes", "error", "amp", "unmodelled_ops", "memory_peak_ops"):
        if c in df.columns:
            df[c] = df[c].fillna("").astype(str)
    for c in ("train", "memory_fits"):          # a CSV's "False" is no False
        if c in df.columns:
            df[c] = df[c].map(_as_bool).astype(object)
    return df[[c for c in KEY if c in df.columns] + sizes + [c for c in rest if c not in sizes]]
