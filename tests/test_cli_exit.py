"""``gpusim`` (``python -m gpusim``, the console script) ends without the interpreter's
teardown (:func:`gpusim.__main__.run`): its exit status, its whole output and the exit
handlers (``atexit``) are those of a normal exit."""

import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ENV = dict(os.environ, PYTHONPATH=ROOT)


def _run(argv: list[str]) -> subprocess.CompletedProcess:
    """``run()`` with ``argv``, after an exit handler that prints last on each stream."""
    code = ("import atexit, sys\n"
            "atexit.register(lambda: (print('handler ran'), print('handler ran', file=sys.stderr)))\n"
            f"sys.argv = ['gpusim'] + {argv!r}\n"
            "from gpusim.__main__ import run\n"
            "run()\n"
            "print('never here')\n")
    return subprocess.run([sys.executable, "-c", code], env=ENV, capture_output=True, text=True,
                          timeout=120, check=False)


def test_a_command_exits_zero_with_its_whole_output_and_handlers():
    r = _run(["specs"])
    normal = subprocess.run([sys.executable, "-m", "gpusim", "specs"], env=ENV, capture_output=True,
                            text=True, timeout=120, check=False)
    assert r.returncode == 0 and normal.returncode == 0, r.stderr
    assert r.stdout == normal.stdout + "handler ran\n"
    assert r.stderr.endswith("handler ran\n") and "never here" not in r.stdout


def test_a_user_error_keeps_exit_2_and_its_one_line():
    r = _run(["predict", "--bogus"])
    assert r.returncode == 2
    line = "gpusim: error: unrecognized arguments: --bogus (see `gpusim predict --help`)"
    assert r.stderr.splitlines() == [line, "handler ran"]
    assert r.stdout == "handler ran\n"


def test_help_exits_as_argparse_does():
    r = _run(["--help"])
    assert r.returncode == 0 and r.stdout.startswith("usage: gpusim")
