"""Two pieces of work at once on a machine with two cores: one in this process, one in a forked
copy of it (:func:`both`).

A fork starts where this process stands, with everything it has imported and built (torch, a
model library, the model, the tracer's warm caches), so the second piece pays none of that again:
on a 2-core machine ``gpusim generate``'s two paths (dynamic eager, static compiled) run side by
side after the model is built (benchmarks/generate_speed_results.txt). The child's answer comes
back pickled through a pipe; it must be small and plain (a prediction's graphs are not sent).

The child's answer is only a shortcut: where it gives none (no ``fork`` on this platform, one
core, the child fails, dies or outlasts :data:`PATIENCE`), this process does the work itself, so
the result is the same either way, and an error the work raises is raised here, as it would be
without the fork."""

from __future__ import annotations

import os
import pickle
import select
import sys
import time
import warnings

#: how long the child may run past this process's own piece, as a multiple of that piece's
#: seconds (at least MIN_WAIT_S): a child that takes longer is stopped and its piece done here
PATIENCE = 3.0
MIN_WAIT_S = 60.0


def cores() -> int:
    """CPU cores this process may run on."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def can_fork() -> bool:
    """``fork`` exists and is safe to use here (Linux: macOS's system libraries are not
    fork-safe once initialised; no other Python thread, whose locks the child would inherit
    held) and there are two cores to use."""
    import threading
    return (hasattr(os, "fork") and sys.platform.startswith("linux") and cores() >= 2
            and threading.active_count() == 1)


def both(here, there):
    """``(here(), there())``, ``there`` run in a forked child while ``here`` runs in this process
    when :func:`can_fork`; ``there()``'s value must pickle. Either way the values are the same."""
    if not can_fork():
        return here(), there()
    read_fd, write_fd = os.pipe()
    sys.stdout.flush()
    sys.stderr.flush()
    with warnings.catch_warnings():     # Python >= 3.12 warns on fork in a threaded process
        warnings.simplefilter("ignore", DeprecationWarning)
        pid = os.fork()
    if pid == 0:                        # the child: its piece, sent; never returns
        code = 1
        try:
            os.close(read_fd)
            data = pickle.dumps(there(), protocol=pickle.HIGHEST_PROTOCOL)
            with os.fdopen(write_fd, "wb") as w:
                w.write(data)
            code = 0
        except BaseException:   # noqa: BLE001 - the parent does the piece itself and reports
            pass
        finally:
            os._exit(code)
    os.close(write_fd)
    try:
        t0 = time.perf_counter()
        mine = here()
        theirs = _receive(read_fd, pid, max(MIN_WAIT_S, PATIENCE * (time.perf_counter() - t0)))
    except BaseException:
        _stop(pid)
        raise
    finally:
        os.close(read_fd)
    if theirs is _NONE:
        theirs = there()
    return mine, theirs


_NONE = object()


def _receive(fd: int, pid: int, wait_s: float):
    """The child's pickled value, or ``_NONE`` if it sent none within ``wait_s`` seconds."""
    chunks, deadline = [], time.monotonic() + wait_s
    while True:
        left = deadline - time.monotonic()
        if left <= 0 or not select.select([fd], [], [], left)[0]:
            _stop(pid)
            return _NONE
        chunk = os.read(fd, 1 << 20)
        if not chunk:
            break
        chunks.append(chunk)
    _, status = os.waitpid(pid, 0)
    if os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0 and chunks:
        try:
            return pickle.loads(b"".join(chunks))
        except Exception:   # noqa: BLE001 - a garbled answer is no answer
            return _NONE
    return _NONE


def _stop(pid: int) -> None:
    try:
        os.kill(pid, 9)
        os.waitpid(pid, 0)
    except (ProcessLookupError, ChildProcessError):
        pass


__all__ = ["both", "can_fork", "cores"]
