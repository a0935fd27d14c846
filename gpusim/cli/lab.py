"""The lab's commands: ``gpusim calibrate``, ``gpusim validate`` and ``gpusim accuracy`` call the measurement harness and the accuracy records of :mod:`validation` (the only part of gpusim that imports the lab)."""

from __future__ import annotations
import argparse
import os
import sys
from gpusim.util.errors import UserError


def cmd_calibrate(a) -> int:
    from validation import calibrate
    argv = ["--out", a.out] + (["--base", a.base] if a.base else []) + (
        ["--host-only"] if a.host_only else []) + (["--forward-only"] if a.forward_only else [])
    return calibrate.main(argv)


def cmd_validate(a) -> int:
    from validation import measure, runner
    try:
        measure.require_cuda()          # before the results folder is made: nothing half-written
    except RuntimeError as e:
        raise UserError(str(e)) from None
    return runner.main(a)


def cmd_accuracy(a) -> int:
    """The accuracy table (:func:`validation.accuracy.main`), then the plot."""
    from validation import accuracy
    from validation.plot import accuracy_plot
    if a.results is not None and not os.path.isdir(a.results):
        raise UserError(f"results folder {a.results} does not exist")
    rc = accuracy.main(argparse.Namespace(**{**vars(a), "plot": None}))
    if a.plot:
        accuracy_plot(a.results or accuracy.RESULTS_DIR, a.gpu, a.plot)
        print(f"wrote {a.plot}", file=sys.stderr)
    return rc
