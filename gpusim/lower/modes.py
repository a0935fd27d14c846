"""The runtimes a lowering can target: eager PyTorch, ``torch.compile`` (Inductor) and a CUDA graph of
the compiled kernels. One list, checked at every entry (lower, predict, search, sweep, the CLI)."""

from gpusim.util.errors import GpusimError

MODES = ("eager", "compiled", "cudagraph")


class ModeError(GpusimError):
    """A mode that is not one of :data:`MODES`."""


def check_mode(mode: str) -> str:
    if mode not in MODES:
        raise ModeError(f"unknown mode {mode!r}; choose one of {', '.join(MODES)}")
    return mode
