"""Test-session housekeeping: the cyclic garbage collector's work kept to the test at hand.

Capture collects garbage before every trace (:mod:`gpusim.capture.lifetimes`: earlier garbage
must not die while it watches), and a full collection scans every object the process holds:
late in the suite, with hundreds of graphs held by module fixtures and caches, one took
~0.5 s, more than tracing a one-conv graph (the sweep-driven dispatch tests trace hundreds).
So the objects alive when a test starts move to the permanent generation (``gc.freeze``):
collections during the test scan only what it made. After each test module they are unfrozen
and collected once, so what the module let go is freed. Reference counting, which decides
the Python lifetimes capture records, is untouched, and so are the collector's settings
(tests that change its thresholds or switch it off still do).
"""

import gc

import pytest


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item):
    gc.freeze()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_teardown(item, nextitem):
    yield
    if nextitem is None or nextitem.module is not item.module:
        gc.unfreeze()
        gc.collect()
