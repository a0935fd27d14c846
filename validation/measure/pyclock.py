"""The model's own Python clocked on this machine by replaying a meta forward: a lab
instrument (``validation/measure/python_replay.py``), not part of any prediction.

gpusim used to price eager's model Python with this clock at capture (``gpusim/pytime.py``,
``capture(..., python=True)``); the figure was this machine's timing, so the same command
printed different numbers each run (10.87-11.41 ms for the README's ResNet-50). Predictions
now price it from capture's counts (:func:`gpusim.hw.host.python_us`, fitted by
``validation/score/host_accuracy.py --fit``); the clock stays here for the lab's replay records
(``validation/results/h100/host/2026-11-23-lease6-replay.jsonl``).

How: a forward on meta tensors runs the same Python as on CUDA, but meta kernels are
slow and pollute the CPU's caches, so :func:`python_us` runs the forward once to *record*
each top-level torch call's result (a tape), then *replays* it under a
``TorchFunctionMode``: every torch call returns its recorded result at once, and the
forward costs only its own Python plus one mode dispatch per call, measured on a replayed
loop of ``x.add(1)`` and subtracted per call. Times are the thread's CPU time.
"""

from __future__ import annotations

import statistics
import time

import torch
from torch.overrides import TorchFunctionMode

#: host reads of a tensor's value: a meta tensor has none, eager typically takes True
_READS = ("__bool__", "item", "tolist", "__int__", "__float__", "__index__")


def _answer(func, args):
    t = args[0] if args else None
    name = getattr(func, "__name__", "")
    if name not in _READS or not isinstance(t, torch.Tensor) or not t.is_meta:
        return None
    if name == "tolist":
        return torch.ones(t.shape, dtype=t.dtype).tolist()
    return True if name == "__bool__" or t.dtype == torch.bool else 1


class Replay(TorchFunctionMode):
    """Without a ``tape``, records: each top-level torch call runs (meta host reads
    answered) and ``(func, result)`` is kept. With one, replays: the i-th call returns
    the tape's i-th result if it is the same function; otherwise the call runs and
    ``diverged`` is set. Replaying costs one mode dispatch and a list look-up per call."""

    def __init__(self, tape: list | None = None):
        super().__init__()
        self.tape = tape
        self.record: list = []
        self.i, self.diverged = 0, False

    def __torch_function__(self, func, types, args=(), kwargs=None):
        tape = self.tape
        if tape is not None:
            i = self.i
            self.i = i + 1
            if i < len(tape) and tape[i][0] == func:
                return tape[i][1]
            self.diverged = True
        out = _answer(func, args)
        if out is None:
            out = func(*args, **(kwargs or {}))
        if tape is None:
            self.record.append((func, out))
        return out


def _cpu_us(fn, tape) -> float:
    """Thread CPU time of ``fn()`` under a replay of ``tape`` (time this thread ran:
    other load on the machine only slows it, never adds descheduled time), run once
    untimed first: right after other code, the first run pays ~50 us for cold caches
    (a replayed one-line function: 7 us warm, 50-85 us cold), which a model's forward
    run back to back does not."""
    with Replay(tape):
        fn()
    with Replay(tape):
        t = time.thread_time()
        fn()
        return (time.thread_time() - t) * 1e6


def _record(fn) -> list:
    rec = Replay(None)
    with rec:
        fn()
    return rec.record


def _chain(k: int):
    x = torch.ones(1, device="meta")
    m = torch.nn.Sequential(*[torch.nn.Identity() for _ in range(k)])

    def f():
        for _ in range(50):
            m(x)
    return f


def python_us(module, args, rounds: int = 15) -> dict:
    """The Python of ``module(*args)`` outside torch calls on this machine.

    Each round times (thread CPU time) one replayed forward, a replayed loop of 500
    ``x.add(1)`` (the clock's cost per call, loop included, as the device harness
    subtracts it) and the host-speed probe (64 vs 1 ``nn.Identity``: ``eager_module_us``
    as ``gpusim calibrate --host-only`` measures it). A round's Python over its probe
    is the forward's Python in module-call equivalents; the median over the rounds is
    kept (a busy machine slows a round's forward and probe alike: this quotient repeats
    to ~5%, the fastest forward alone to ~10-40%). ``args`` should be meta tensors (the
    recording pass runs the forward once).

    Returns ``{"module_calls", "python_us", "host_speed_us", "calls", "clock_us"}``:
    module-call equivalents, the same in µs at this machine's median speed, that
    speed, torch calls per forward, the clock's cost per call.
    """
    def fwd():
        with torch.no_grad():
            module(*args)
    x = torch.ones(4, device="meta")

    def loop():
        for _ in range(500):
            x.add(1)
    tape, loop_tape = _record(fwd), _record(loop)
    c1, c64 = _chain(1), _chain(64)
    units, speeds, clocks = [], [], []
    for _ in range(rounds):
        fw = _cpu_us(fwd, tape)
        over = _cpu_us(loop, loop_tape) / 500
        speed = (_cpu_us(c64, None) - _cpu_us(c1, None)) / 50 / 63
        if speed > 0:
            units.append(max(fw - len(tape) * over, 0.0) / speed)
            speeds.append(speed)
        clocks.append(over)
    if not units:
        raise RuntimeError("the module-call probe measured no time on this machine")
    calls, speed = statistics.median(units), statistics.median(speeds)
    return {"module_calls": calls, "python_us": calls * speed, "host_speed_us": speed,
            "calls": len(tape), "clock_us": statistics.median(clocks)}
