"""Answers from a sweep's table (:mod:`gpusim.sweep`): the questions people run sweeps for.

:func:`answers` returns each answer as a DataFrame (the page ``gpusim sweep report``
writes draws these and nothing else):

``throughput``    samples per second against batch, per model, GPU and mode;
``frontier``      the largest batch swept that fits in each GPU's memory;
``fastest_mode``  the fastest mode per model, sizes and GPU, and its speed-up over eager;
``cost``          dollars per million samples at each GPU's cheapest batch and mode, from
                  the hourly prices the user gives (``--price h100=2.49``);
``cheapest``      per model, the cheapest GPU (with batch and mode) whose time per call
                  and throughput meet the targets given.

Only rows without an error and that fit in memory answer speed and cost questions; time
per call is ``end_to_end_us`` (steady state, host included), throughput is
``samples_per_s`` (the batch over that time; 1 sample per call for models without a batch).
"""

from __future__ import annotations

from gpusim.util.errors import UserError

GROUP = ["model", "dtype", "other_sizes"]


def parse_prices(items) -> dict[str, float]:
    """``["h100=2.49", "a100=1.29,l4=0.8"]`` -> ``{"h100-sxm": 2.49, ...}`` keyed by spec
    name (aliases resolved as ``--gpu`` resolves them)."""
    from gpusim.hw.spec import load_spec
    prices: dict[str, float] = {}
    for item in items or []:
        for part in str(item).split(","):
            gpu, eq, value = part.partition("=")
            if not eq or not gpu.strip():
                raise UserError(f"--price takes GPU=USD_PER_HOUR, e.g. h100=2.49, got {part!r}")
            try:
                usd = float(value)
            except ValueError:
                raise UserError(f"--price {part}: {value!r} is not a number of dollars per "
                                "hour") from None
            if not usd > 0 or usd == float("inf"):
                raise UserError(f"--price {part}: a price is a positive number of dollars per hour")
            name = load_spec(gpu.strip()).name
            if name in prices:
                raise UserError(f"--price names {name} twice; give each GPU's price once")
            prices[name] = usd
    return prices


def _other_sizes(sizes: str) -> str:
    return " ".join(w for w in str(sizes).split() if not w.startswith("batch="))


def usd_per_million(price_per_hour: float, samples_per_s: float) -> float:
    """Dollars per million samples: an hour's price over the samples run in an hour."""
    return price_per_hour * 1e6 / (3600.0 * samples_per_s)


def answers(df, prices: dict | None = None, target_latency_ms: float | None = None,
            target_throughput: float | None = None) -> dict:
    """Every answer of a sweep's rows ``df`` (a DataFrame :func:`gpusim.sweep.run.sweep`
    returned or :func:`gpusim.sweep.results.read_results` read) as DataFrames, plus the inputs:
    ``{"rows", "errors", "throughput", "frontier", "fastest_mode", "cost", "cheapest",
    "prices", "targets", "missing_prices"}``."""
    for name, v in (("--target-latency-ms", target_latency_ms),
                    ("--target-throughput", target_throughput)):
        if v is not None and not (v > 0 and v != float("inf")):
            raise UserError(f"{name} must be a positive number, got {v}")
    prices = dict(prices or {})
    if not len(df):
        raise UserError("the sweep results hold no rows")
    df = df.copy()
    df["other_sizes"] = df["sizes"].map(_other_sizes)
    df["end_to_end_ms"] = df["end_to_end_us"] / 1e3 if "end_to_end_us" in df else float("nan")
    errors = df[df["error"] != ""]
    ok = df[df["error"] == ""].copy()
    if len(ok):
        ok["memory_fits"] = ok["memory_fits"].astype(bool)
        ok["samples_per_call"] = ok["samples_per_call"].astype(int)
    fit = ok[ok["memory_fits"]] if len(ok) else ok
    gpus = list(dict.fromkeys(df["gpu"]))
    out = {"rows": df, "errors": errors, "gpus": gpus, "prices": prices,
           "targets": {"latency_ms": target_latency_ms, "throughput": target_throughput},
           "missing_prices": [g for g in prices if g not in gpus]}
    cols = GROUP + ["samples_per_call", "gpu", "mode", "samples_per_s", "end_to_end_ms"]
    out["throughput"] = fit[cols]           # in sweep order: the page's panels follow it
    out["frontier"] = _frontier(ok, gpus)
    out["fastest_mode"] = _fastest_mode(fit)
    priced = fit[fit["gpu"].isin(list(prices))].copy() if len(fit) else fit
    if len(priced):
        priced["usd_per_million"] = [usd_per_million(prices[g], s) for g, s in
                                     zip(priced["gpu"], priced["samples_per_s"])]
    out["cost"] = (priced.loc[priced.groupby(GROUP + ["gpu"], sort=False)["usd_per_million"]
                              .idxmin()][GROUP + ["gpu", "sizes", "mode", "samples_per_s",
                                                  "end_to_end_ms", "usd_per_million"]]
                   .reset_index(drop=True) if len(priced) else None)
    out["cheapest"] = _cheapest(priced if prices else fit, bool(prices), target_latency_ms,
                                target_throughput)
    return out


def _frontier(ok, gpus):
    """Per model, dtype, other sizes and GPU: the largest batch swept that fits (in some
    mode), the largest tried, and the memory it needs there."""
    import pandas as pd
    rows = []
    if not len(ok):
        return pd.DataFrame(rows)
    for key, g in ok.groupby(GROUP, sort=False):
        row = dict(zip(GROUP, key))
        tried = sorted(set(g["samples_per_call"]))
        row["batches"] = ", ".join(map(str, tried))
        for gpu in gpus:
            h = g[g["gpu"] == gpu]
            fits = h[h["memory_fits"]]
            row[gpu] = int(fits["samples_per_call"].max()) if len(fits) else (0 if len(h) else None)
        rows.append(row)
    return pd.DataFrame(rows)


def _fastest_mode(fit):
    """Per model, sizes and GPU: the mode with the least time per call, and its speed-up
    over eager (when eager was swept)."""
    import pandas as pd
    if not len(fit):
        return pd.DataFrame()
    keys = GROUP + ["sizes", "gpu"]
    best = fit.loc[fit.groupby(keys, sort=False)["end_to_end_us"].idxmin()]
    eager = fit[fit["mode"] == "eager"].set_index(keys)["end_to_end_us"]
    res = best[keys + ["samples_per_call", "mode", "end_to_end_ms"]].reset_index(drop=True)
    res["speedup_over_eager"] = [eager.get(tuple(r[k] for k in keys), float("nan")) / (1e3 * ms)
                                 for r, ms in zip(res.to_dict("records"), res["end_to_end_ms"])]
    return res


def _cheapest(rows, priced: bool, latency_ms, throughput):
    """Per model and dtype: the cheapest (priced) or, without prices, the fastest row that
    meets the targets; None when no target was given."""
    import pandas as pd
    if latency_ms is None and throughput is None:
        return None
    if not len(rows):
        return pd.DataFrame()
    meet = rows
    if latency_ms is not None:
        meet = meet[meet["end_to_end_ms"] <= latency_ms]
    if throughput is not None:
        meet = meet[meet["samples_per_s"] >= throughput]
    out = []
    for key, g in rows.groupby(["model", "dtype"], sort=False):
        m = meet[(meet["model"] == key[0]) & (meet["dtype"] == key[1])]
        row = {"model": key[0], "dtype": key[1]}
        if len(m):
            best = m.loc[m["usd_per_million"].idxmin()] if priced else m.loc[
                m["samples_per_s"].idxmax()]
            row.update({k: best[k] for k in ("gpu", "sizes", "mode", "end_to_end_ms",
                                             "samples_per_s")})
            row["usd_per_million"] = best["usd_per_million"] if priced else None
        else:
            row.update(gpu=None, sizes="", mode="", end_to_end_ms=None, samples_per_s=None,
                       usd_per_million=None)
        out.append(row)
    return pd.DataFrame(out)
