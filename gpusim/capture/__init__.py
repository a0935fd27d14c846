"""Capture: a PyTorch callable, ``nn.Module`` or training step becomes an OpGraph, traced on fake tensors.

:mod:`.tracing` is the entry (:func:`capture`); :mod:`.amp` traces autocast as a GPU runs it, :mod:`.sdpa` picks the
attention backend, :mod:`.train`/:mod:`.train_fx`/:mod:`.train_amp` capture whole training steps, and :mod:`.fxnodes`,
:mod:`.pycalls`, :mod:`.pytrees`, :mod:`.lifetimes`, :mod:`.scopes` hold what tracing records beside the ops."""
