"""The page ``gpusim sweep report`` writes: a sweep's answers (:mod:`gpusim.sweep.answers`)
as tables and matplotlib plots, inline SVG in one self-contained page (no network)."""

from __future__ import annotations

import io
import math

from gpusim.util.errors import UserError
from gpusim.util.fmt import fmt_num, fmt_us
from gpusim.report.viz.common import esc
from gpusim.report.viz.html import _page, _strip_xml_prolog

MODE_STYLES = {"eager": "-", "compiled": "--", "cudagraph": ":"}
PALETTE = ("#2f6fd0", "#e8743b", "#1a7f37", "#8e6cc9", "#c93c37", "#3f9c8a", "#b08800",
           "#656d76", "#d6336c", "#0b7285")
MAX_PANELS = 12


def _mpl():
    try:
        import matplotlib
        from matplotlib.backends.backend_agg import FigureCanvasAgg
        from matplotlib.figure import Figure
    except ImportError:
        raise UserError("gpusim sweep report draws with matplotlib: pip install "
                        "'gpusim[sweep]'") from None
    return matplotlib, Figure, FigureCanvasAgg


def _svg(fig) -> str:
    """A figure as inline SVG, byte-for-byte the same on every run (fixed ids, no date)."""
    matplotlib, _, FigureCanvasAgg = _mpl()
    FigureCanvasAgg(fig)
    buf = io.StringIO()
    with matplotlib.rc_context({"svg.hashsalt": "gpusim", "svg.fonttype": "none"}):
        fig.savefig(buf, format="svg", bbox_inches="tight", metadata={"Date": None})
    return _strip_xml_prolog(buf.getvalue())


def _colours(gpus) -> dict:
    return {g: PALETTE[i % len(PALETTE)] for i, g in enumerate(gpus)}


def _money(x) -> str:
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "-"
    return f"${x:,.2f}" if x >= 1 else f"${x:.3g}"


def _num(x, unit="") -> str:
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "-"
    return fmt_num(float(x), unit)


def _ms(x) -> str:
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "-"
    return fmt_us(float(x) * 1e3)


MAX_ROWS = 500


def _table(head, rows, tid: str) -> str:
    """``head``: [(title, "l" or "")]; ``rows``: lists of (text, sort value or None). A
    page shows the first :data:`MAX_ROWS` (a 300,000-row sweep would make a page no
    browser opens); the API's DataFrames hold them all."""
    th = "".join(f'<th class="{c}">{esc(h)}</th>' for h, c in head)
    body = []
    more = (f'<p class="note">The first {MAX_ROWS} of {len(rows)} rows; '
            'gpusim.sweep.answers.answers() returns them all.</p>' if len(rows) > MAX_ROWS else "")
    for r in rows[:MAX_ROWS]:
        tds = []
        for (text, v), (_, cls) in zip(r, head):
            dv = f' data-v="{v:.6g}"' if isinstance(v, (int, float)) and math.isfinite(v) else ""
            tds.append(f'<td class="{cls}"{dv}>{esc(text)}</td>')
        body.append("<tr>" + "".join(tds) + "</tr>")
    return (f'<div class="fig"><table class="sortable" id="{tid}"><thead><tr>{th}</tr></thead>'
            f'<tbody>{"".join(body)}</tbody></table></div>{more}')


def _label(r) -> str:
    parts = [str(r["model"])] + ([str(r["other_sizes"])] if r["other_sizes"] else [])
    return " ".join(parts) + ("" if r["dtype"] == "float32" else f" {r['dtype']}")


def throughput_svg(res) -> str:
    """Samples per second against batch: one panel per model (and other sizes, dtype), a
    colour per GPU, a line style per mode; log-log."""
    matplotlib, Figure, _ = _mpl()
    import matplotlib.ticker  # noqa: F401
    t = res["throughput"]
    groups = list(t.groupby(["model", "dtype", "other_sizes"], sort=False))[:MAX_PANELS]
    cols = min(3, len(groups))
    nrows = math.ceil(len(groups) / cols)
    fig = Figure(figsize=(4.2 * cols, 3.0 * nrows))
    colour = _colours(res["gpus"])
    for i, (key, g) in enumerate(groups):
        ax = fig.add_subplot(nrows, cols, i + 1)
        for (gpu, mode), h in g.groupby(["gpu", "mode"], sort=False):
            h = h.sort_values("samples_per_call")
            ax.plot(h["samples_per_call"], h["samples_per_s"], MODE_STYLES.get(mode, "-"),
                    marker="o", ms=3, lw=1.4, color=colour[gpu], label=f"{gpu} {mode}")
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        batches = sorted(set(int(b) for b in g["samples_per_call"]))
        ax.set_xticks(batches, [str(b) for b in batches])
        ax.xaxis.set_minor_locator(matplotlib.ticker.NullLocator())
        ax.set_title(_label(dict(zip(["model", "dtype", "other_sizes"], key))), fontsize=9)
        ax.set_xlabel("batch", fontsize=8)
        ax.set_ylabel("samples / s", fontsize=8)
        ax.tick_params(labelsize=7)
        ax.grid(True, which="major", color="#e4e7eb", lw=0.6)
    seen = {}
    for ax in fig.axes:
        for h, lab in zip(*ax.get_legend_handles_labels()):
            seen.setdefault(lab, h)
    fig.legend(list(seen.values()), list(seen), loc="lower center", ncol=min(4, len(seen)),
               fontsize=8, frameon=False, bbox_to_anchor=(0.5, -0.02 - 0.03 * math.ceil(len(seen) / 4)))
    fig.tight_layout()
    return _svg(fig)


def cost_svg(res) -> str:
    """Dollars per million samples at each priced GPU's cheapest batch and mode, per model."""
    _, Figure, _ = _mpl()
    c = res["cost"]
    labels = list(dict.fromkeys(_label(r) for r in c.to_dict("records")))
    gpus = list(dict.fromkeys(c["gpu"]))
    colour = _colours(res["gpus"])
    fig = Figure(figsize=(max(5.0, 0.9 * len(labels) * max(1, len(gpus)) * 0.5 + 2), 3.2))
    ax = fig.add_subplot(1, 1, 1)
    width = 0.8 / max(1, len(gpus))
    for j, gpu in enumerate(gpus):
        xs, ys = [], []
        for r in c[c["gpu"] == gpu].to_dict("records"):
            xs.append(labels.index(_label(r)) + (j - (len(gpus) - 1) / 2) * width)
            ys.append(r["usd_per_million"])
        ax.bar(xs, ys, width=width * 0.95, color=colour[gpu], label=gpu)
    ax.set_xticks(range(len(labels)))
    ax.set_xticklabels(labels, rotation=30 if len(labels) > 4 else 0, ha="right" if len(labels) > 4 else "center",
                       fontsize=8)
    ax.set_yscale("log")
    ax.set_ylabel("$ per million samples", fontsize=8)
    ax.tick_params(labelsize=7)
    ax.grid(True, axis="y", color="#e4e7eb", lw=0.6)
    ax.legend(fontsize=8, frameon=False)
    fig.tight_layout()
    return _svg(fig)


def _cheapest_section(res) -> str:
    ch = res["cheapest"]
    if ch is None:
        return ""
    tg = res["targets"]
    want = " and ".join(x for x in (
        f"time per call ≤ {tg['latency_ms']:g} ms" if tg["latency_ms"] is not None else "",
        f"≥ {tg['throughput']:g} samples/s" if tg["throughput"] is not None else "") if x)
    how = ("cheapest per million samples among the priced GPUs" if res["prices"] else
           "no --price given: the fastest that meets it")
    rows = []
    for r in ch.to_dict("records"):
        rows.append([(_label(dict(r, other_sizes="")), None),
                     (r["gpu"] or "none meets it", None), (r["sizes"] or "-", None),
                     (r["mode"] or "-", None), (_ms(r["end_to_end_ms"]), r["end_to_end_ms"]),
                     (_num(r["samples_per_s"]), r["samples_per_s"]),
                     (_money(r["usd_per_million"]), r["usd_per_million"])])
    head = [("model", "l"), ("GPU", "l"), ("sizes", "l"), ("mode", "l"), ("time per call", ""),
            ("samples/s", ""), ("$ / M samples", "")]
    return (f'<section id="cheapest"><h2>Cheapest GPU that meets the target</h2><p class="note">'
            f'Target: {esc(want)}; {esc(how)}.</p>{_table(head, rows, "cheapest-table")}</section>')


def _frontier_section(res) -> str:
    f = res["frontier"]
    gpus = res["gpus"]
    head = [("model", "l"), ("batches swept", "l")] + [(g, "") for g in gpus]
    rows = []
    for r in f.to_dict("records"):
        cells = [(_label(r), None), (r["batches"], None)]
        for g in gpus:
            v = r.get(g)
            cells.append(("-" if v is None or v != v else "none fits" if v == 0 else str(int(v)),
                          None if v is None or v != v else float(v)))
        rows.append(cells)
    return ('<section id="frontier"><h2>Memory frontier</h2><p class="note">The largest batch '
            'swept whose weights, inputs and activation peak fit in each GPU\'s memory (in some '
            'mode); "none fits" when even the smallest does not.</p>'
            f'{_table(head, rows, "frontier-table")}</section>')


def _fastest_section(res) -> str:
    fm = res["fastest_mode"]
    head = [("model", "l"), ("sizes", "l"), ("GPU", "l"), ("fastest mode", "l"),
            ("time per call", ""), ("over eager", "")]
    rows = [[(_label(r), None), (r["sizes"] or "-", None), (r["gpu"], None), (r["mode"], None),
             (_ms(r["end_to_end_ms"]), r["end_to_end_ms"]),
             ("-" if r["speedup_over_eager"] != r["speedup_over_eager"]
              else f"{r['speedup_over_eager']:.2f}x", r["speedup_over_eager"])]
            for r in fm.to_dict("records")]
    return ('<section id="fastest"><h2>Fastest mode</h2><p class="note">Per model, sizes and '
            'GPU, the mode with the least time per call (end to end, host included), and its '
            f'speed-up over eager PyTorch.</p>{_table(head, rows, "fastest-table")}</section>')


def _cost_section(res) -> str:
    c = res["cost"]
    if c is None:
        return ('<section id="cost"><h2>Cost per million samples</h2><p class="note">Give '
                'each GPU\'s hourly price (<code>--price h100=2.49 --price a100=1.29</code>) to '
                'rank GPUs by cost.</p></section>')
    prices = ", ".join(f"{g} ${p:g}/h" for g, p in res["prices"].items())
    head = [("model", "l"), ("GPU", "l"), ("at sizes", "l"), ("mode", "l"), ("samples/s", ""),
            ("$ / M samples", "")]
    rows = [[(_label(r), None), (r["gpu"], None), (r["sizes"] or "-", None), (r["mode"], None),
             (_num(r["samples_per_s"]), r["samples_per_s"]),
             (_money(r["usd_per_million"]), r["usd_per_million"])] for r in c.to_dict("records")]
    missing = (f' No rows for {", ".join(res["missing_prices"])}.' if res["missing_prices"] else "")
    return ('<section id="cost"><h2>Cost per million samples</h2><p class="note">At each GPU\'s '
            f'cheapest batch and mode that fits; prices given: {esc(prices)}.{esc(missing)}</p>'
            f'<div class="fig pic">{cost_svg(res)}</div>{_table(head, rows, "cost-table")}</section>')


def _errors_section(res) -> str:
    e = res["errors"]
    if not len(e):
        return ""
    head = [("model", "l"), ("sizes", "l"), ("GPU", "l"), ("mode", "l"), ("error", "l")]
    rows = [[(r["model"], None), (r["sizes"] or "-", None), (r["gpu"], None), (r["mode"], None),
             (r["error"], None)] for r in e.to_dict("records")]
    return (f'<section id="errors"><h2>Errors</h2><p class="note">{len(e)} row(s) failed.</p>'
            f'{_table(head, rows, "errors-table")}</section>')


def sweep_html(res, source: str = "") -> str:
    """The page of a sweep's answers ``res`` (:func:`gpusim.sweep.answers.answers`)."""
    rows = res["rows"]
    models = list(dict.fromkeys(rows["model"]))
    modes = list(dict.fromkeys(rows["mode"]))
    title = f"gpusim sweep: {len(models)} model(s) on {len(res['gpus'])} GPU(s)"
    facts = [f"{len(rows)} rows", f"GPUs {', '.join(res['gpus'])}", f"modes {', '.join(modes)}",
             f"host {', '.join(dict.fromkeys(rows['host']))}"]
    if source:
        facts.append(source)
    n_panels = rows.groupby(["model", "dtype", "other_sizes"]).ngroups
    more = (f" The first {MAX_PANELS} of {n_panels} panels are drawn." if n_panels > MAX_PANELS
            else "")
    tp = (f'<div class="fig pic">{throughput_svg(res)}</div>' if len(res["throughput"]) else
          '<p class="note">No row ran without an error and fitted in memory.</p>')
    body = [
        f'<header><h1>gpusim sweep <span>{esc(", ".join(models[:6]))}'
        f'{" …" if len(models) > 6 else ""}</span></h1><p>{esc(" · ".join(facts))}</p></header>',
        _cheapest_section(res),
        '<section id="throughput"><h2>Throughput against batch</h2><p class="note">Samples per '
        'second (batch over the time per call, end to end), one colour per GPU, one line style '
        f'per mode (solid eager, dashed compiled, dotted CUDA graphs); rows that fit only.{more}'
        f'</p>{tp}</section>',
        _frontier_section(res), _fastest_section(res), _cost_section(res), _errors_section(res),
        '<footer>gpusim sweep report · predicted times on GPU spec files and the host profile '
        'named above, not measurements.</footer>']
    return _page(title, "\n".join(b for b in body if b), script=True)
