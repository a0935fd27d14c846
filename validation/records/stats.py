"""How every accuracy module summarises errors: absolute percentage error, its count,
median and p90, grouped by run and model family, and the table cell that prints them.

Its own module so that the accuracy modules (zoo, held-out, memory, host) share one
definition without importing each other.
"""

from __future__ import annotations

import numpy as np

FAMILIES = ("cnn", "vit", "encoder", "decoder", "encdec")
#: a record's ``run`` is the gpusim mode it is predicted in
RUNS = ("eager", "compiled", "cudagraph")


def ape(pred: float, meas: float) -> float:
    return abs(pred - meas) / meas * 100.0


def _stats(errs: list[float]) -> dict | None:
    """Count, median and p90 of absolute percentage errors (None when there are none)."""
    if not errs:
        return None
    return {"n": len(errs), "median": float(np.median(errs)), "p90": float(np.percentile(errs, 90))}


def _cell(s: dict | None) -> str:
    return "-" if not s else f"{s['median']:.1f}% / {s['p90']:.1f}%"


def by_run_family(rows: list[dict], summary) -> dict:
    """``{run: {family|"all": summary(rows of that run and family)}}``, for the runs and
    families the rows have, in :data:`RUNS` and :data:`FAMILIES` order."""
    out = {}
    for run in RUNS:
        rr = [r for r in rows if r["run"] == run]
        if rr:
            fams = [f for f in FAMILIES if any(r["family"] == f for r in rr)] + ["all"]
            out[run] = {f: summary([r for r in rr if f in ("all", r["family"])]) for f in fams}
    return out


def worse_than(got: dict, limits: dict, where: str) -> list[str]:
    """One line per statistic of ``got`` (``{"median": .., "p90": ..}``, percent) above its
    threshold in ``limits``, naming the figure: ``h200 e2e eager p90 30.29% > threshold
    30.2%``. The accuracy guards print these lines and nothing else, so a failure reads
    as which figure moved by how much."""
    return [f"{where} {stat} {got[stat]:.2f}% > threshold {lim}%"
            for stat, lim in limits.items() if got[stat] > lim + 1e-9]


def fail_if_worse(worse: list[str], what: str) -> None:
    """Fail the calling test with ``worse``'s lines only (no traceback, no locals)."""
    if worse:
        import pytest
        pytest.fail(f"{what} regressed:\n" + "\n".join(worse), pytrace=False)
