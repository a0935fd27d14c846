"""``gpusim.predict``: one GPU (:func:`gpusim.predict.pipeline.predict`), or across GPUs when ``nproc_per_node`` or
``nnodes`` is given (:func:`gpusim.predict.distributed.predict_distributed`: ``target`` is then a builder)."""

from __future__ import annotations

import functools

from gpusim.predict import pipeline
from gpusim.predict.distributed import predict_distributed
from gpusim.util.errors import UserError


@functools.wraps(pipeline.predict)
def predict(target, args=None, gpu="h100", mode: str = "eager", partition=None, opts=None, regions: bool = False,
            host=None, amp=None, nproc_per_node: int | None = None, nnodes: int | None = None):
    if nproc_per_node is None and nnodes is None:
        kw = {} if opts is None else {"opts": opts}
        return pipeline.predict(target, args, gpu, mode, partition, regions=regions, host=host, amp=amp, **kw)
    if args is not None or amp is not None or partition is not None or mode != "eager" or opts is not None:
        raise UserError("across GPUs, predict takes a builder (no args, amp, partition or opts; eager mode): put "
                        "the model, optimizer and autocast inside the builder")
    return predict_distributed(target, gpu, 1 if nproc_per_node is None else nproc_per_node,
                               1 if nnodes is None else nnodes, host=host)


predict.__doc__ = (pipeline.predict.__doc__ or "") + """
    Across GPUs: ``gpusim.predict(builder, gpu=..., nproc_per_node=N, nnodes=M)``, where ``builder()`` returns
    ``(step, args)`` written as for ``torchrun`` (the model on "cuda", DDP or ``fully_shard``, the optimizer,
    autocast): a :class:`~gpusim.predict.distributed.DistPrediction` of rank 0.
"""
