"""One base for every mistake a user can make (``GpusimError``), as ``NetworkXError`` is
networkx's. The CLI prints such errors as one line and exits 2; anything else is a bug."""


class GpusimError(ValueError):
    """Base of every user-facing gpusim error."""


class UserError(GpusimError):
    """Bad command-line or API input that no more specific error covers."""
