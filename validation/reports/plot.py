"""``gpusim accuracy --plot F.png``: predicted against measured time (log-log) and error
against size, per category and GPU, from recorded validation runs.

Each results folder is scored with the spec ``gpusim accuracy`` scores it with
(:func:`gpusim.hw.spec.spec_for`: the calibrated spec, else the datasheet), so the
picture and the table agree. Needs matplotlib (the optional ``plot`` extra).
"""

from __future__ import annotations

import math
import os

import numpy as np

from gpusim.util.errors import UserError
from gpusim.hw.spec import spec_for
from gpusim.hw.schema import SpecError
from gpusim.report.viz.common import GRID, INK, check_target, load_matplotlib, plot_format, save_figure
from validation.score.accuracy import ape, evaluate, load_records

CAT_COLOURS = {"kernel": "#2f6fd0", "device": "#e8743b", "end_to_end": "#2a9d8f"}
GPU_MARKERS = ["o", "s", "^", "D", "v"]


def accuracy_rows(results_dir: str, gpus=None) -> dict:
    """``{gpu: (spec, Errors)}`` for every results folder with records and a spec."""
    if not os.path.isdir(results_dir):
        return {}
    gpus = gpus or sorted(d for d in os.listdir(results_dir)
                          if os.path.isdir(os.path.join(results_dir, d)))
    out = {}
    for gpu in gpus:
        recs = load_records(os.path.join(results_dir, gpu))
        if not recs:
            continue
        try:
            spec = spec_for(gpu)
        except SpecError:       # a folder named after no GPU gpusim knows
            continue
        model, _, _ = evaluate(recs, spec)
        out[gpu] = (spec, model)
    return out


def accuracy_plot(results_dir: str, gpus, path: str):
    """Predicted against measured (log-log) and error against size, per category and
    GPU, from the validation records in ``results_dir/<gpu>/``; returns the path."""
    fmt = plot_format(path)
    check_target(path)
    data = accuracy_rows(results_dir, gpus)
    if not any(e.rows for _, e in data.values()):
        which = f" for {', '.join(gpus)}" if gpus else ""
        raise UserError(f"no validation records in {results_dir}{which}; run `gpusim validate "
                        "--out validation/results/<gpu>` on a GPU machine first")
    Figure, FigureCanvasAgg = load_matplotlib()
    fig = Figure(figsize=(12.5, 5.4))
    FigureCanvasAgg(fig)
    ax1, ax2 = fig.subplots(1, 2)
    lo, hi = math.inf, 0.0
    for gi, (gpu, (spec, errs)) in enumerate(data.items()):
        marker = GPU_MARKERS[gi % len(GPU_MARKERS)]
        for cat, colour in CAT_COLOURS.items():
            rows = errs.rows.get(cat) or []
            if not rows:
                continue
            p = np.array([r[1] for r in rows])
            m = np.array([r[2] for r in rows])
            e = np.array([ape(a, b) for a, b in zip(p, m)])
            lo, hi = min(lo, p.min(), m.min()), max(hi, p.max(), m.max())
            lab = f"{gpu} {cat.replace('_', '-')} (n={len(rows)}, median {np.median(e):.1f}%)"
            ax1.scatter(m, p, marker=marker, s=22, color=colour, alpha=0.7, edgecolors="none",
                        label=lab)
            ax2.scatter(m, e, marker=marker, s=22, color=colour, alpha=0.7, edgecolors="none",
                        label=lab)
            ax2.axhline(float(np.median(e)), color=colour, lw=1, ls="--", alpha=0.8)
    lo, hi = lo / 1.5, hi * 1.5
    xs = np.array([lo, hi])
    ax1.fill_between(xs, xs / 1.25, xs * 1.25, color="#d0d7de", alpha=0.45, lw=0,
                     label="within 25%")
    ax1.plot(xs, xs, color=INK, lw=1, label="predicted = measured")
    ax1.set(xscale="log", yscale="log", xlim=(lo, hi), ylim=(lo, hi),
            xlabel="measured (µs)", ylabel="predicted (µs)", title="Predicted vs measured")
    ax2.set(xscale="log", xlabel="measured (µs)", ylabel="absolute error (%)",
            title="Error vs size (dashed: medians)")
    ax2.set_ylim(bottom=0)
    for ax in (ax1, ax2):
        ax.grid(True, which="major", color=GRID, lw=0.8)
        ax.set_axisbelow(True)
    ax1.legend(fontsize=7.5, loc="upper left", framealpha=0.92)
    specs = ", ".join(f"{g}: {s.name}" for g, (s, _) in data.items())
    fig.suptitle(f"gpusim accuracy ({specs})", fontsize=11)
    fig.tight_layout()
    save_figure(fig, path, fmt)
    return path
