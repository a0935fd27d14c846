"""gpusim.util.collector: the collector is off while a model loads, what loaded is frozen after,
and the collector's state comes back as it was (on an exception, nothing frozen)."""

import gc

import pytest

from gpusim.util.collector import loading_for_good


@pytest.fixture
def collector():
    was = gc.isenabled()
    gc.unfreeze()
    yield
    gc.unfreeze()
    (gc.enable if was else gc.disable)()


@pytest.mark.parametrize("on", [True, False])
def test_off_while_loading_then_frozen_and_restored(collector, on):
    (gc.enable if on else gc.disable)()
    before = gc.get_freeze_count()
    with loading_for_good():
        assert not gc.isenabled()
        kept = [[i] for i in range(1000)]          # tracked objects the block made
    assert gc.isenabled() == on
    assert gc.get_freeze_count() >= before + len(kept)
    assert gc.get_count()[0] < 100                   # no collection of them owed


def test_an_exception_freezes_nothing(collector):
    gc.enable()
    before = gc.get_freeze_count()
    with pytest.raises(RuntimeError), loading_for_good():
        raise RuntimeError("the model failed to load")
    assert gc.isenabled() and gc.get_freeze_count() == before
