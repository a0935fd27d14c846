"""The lab's commands: ``gpusim calibrate``, ``gpusim validate`` and ``gpusim accuracy`` call the measurement harness and the accuracy records of :mod:`validation` (the only part of gpusim that imports the lab)."""

from __future__ import annotations
import argparse
import os
import sys
from gpusim.util.errors import UserError


def cmd_calibrate(a) -> int:
    from validation.fit import calibrate
    argv = ["--out", a.out] + (["--base", a.base] if a.base else []) + (
        ["--host-only"] if a.host_only else []) + (["--forward-only"] if a.forward_only else []) + (
        ["--rounds", str(a.rounds)] if getattr(a, "rounds", None) else [])
    return calibrate.main(argv)


def cmd_validate(a) -> int:
    from validation.measure import timing as measure
    from validation.measure import runner
    try:
        measure.require_cuda()          # before the results folder is made: nothing half-written
    except RuntimeError as e:
        raise UserError(str(e)) from None
    return runner.main(a)


def cmd_accuracy(a) -> int:
    """The accuracy table (:func:`validation.reports.accuracy_page.main`), then the plot."""
    from validation.reports import accuracy_page
    from validation.reports.plot import accuracy_plot
    from validation.score.accuracy import RESULTS_DIR
    if a.results is not None and not os.path.isdir(a.results):
        raise UserError(f"results folder {a.results} does not exist")
    rc = accuracy_page.main(argparse.Namespace(**{**vars(a), "plot": None}))
    if a.plot:
        accuracy_plot(a.results or RESULTS_DIR, a.gpu, a.plot)
        print(f"wrote {a.plot}", file=sys.stderr)
    return rc
