"""Lower: the one answer to "which kernels run" for a graph and a mode.

:mod:`.lowering` is the entry (:func:`lower`); :mod:`.dispatch` is eager ATen/cuDNN/cuBLAS dispatch, :mod:`.inductor`
what torch.compile generates, :mod:`.legality` which nodes may share a kernel and :mod:`.partition` a chosen grouping."""
