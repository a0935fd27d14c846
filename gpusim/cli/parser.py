"""The argument parser's behaviour: a bad argument is one line and exit 2, as every user error is (:class:`_Parser`)."""

from __future__ import annotations
import argparse
from gpusim.util.errors import UserError


class _Once(argparse._StoreAction):
    """A single-valued option given twice (``--gpu h100 --gpu v100``) is a mistake, not
    "the last one wins": which GPU did the user mean?"""

    def __call__(self, parser, namespace, values, option_string=None):
        given = namespace.__dict__.setdefault("_given", set())
        if self.dest in given:
            parser.error(f"{option_string} given twice; give it once")
        given.add(self.dest)
        super().__call__(parser, namespace, values, option_string)


class _Parser(argparse.ArgumentParser):
    """argparse with one-line errors (raised, so ``main`` prints them as every other
    user error) and single-valued options that refuse a second value."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.register("action", None, _Once)
        self.register("action", "store", _Once)

    def error(self, message):
        raise UserError(f"{message} (see `{self.prog} --help`)")
