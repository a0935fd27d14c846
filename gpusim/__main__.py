"""``python -m gpusim`` and the ``gpusim`` console script: :func:`run`."""

import atexit
import os
import sys
import threading

from gpusim.cli.commands import main


def run() -> None:
    """The ``gpusim`` program: :func:`gpusim.cli.commands.main`, then the exit handlers
    (``atexit``: logging, ``weakref.finalize``, temporary directories) and flushed streams, but
    no interpreter teardown. Once a command has imported torch and a model library, tearing
    the interpreter down (every module's objects freed one by one, a last full collection)
    costs 1.5-2.5 s of CPU for nothing the user sees: 15% of ``gpusim generate`` on a 32-layer
    7B decoder (benchmarks/generate_speed_results.txt). While another thread lives (a
    sweep's workers), Python's own exit runs instead, which waits for it."""
    code = main()
    if threading.active_count() > 1:
        sys.exit(code)
    atexit._run_exitfuncs()
    try:
        sys.stdout.flush()
        sys.stderr.flush()
    except BrokenPipeError:     # the reader left after the answer (`gpusim ... | head`)
        code = code or 1
    os._exit(code)


if __name__ == "__main__":
    run()
