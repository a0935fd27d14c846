"""Sweeps: many models, sizes, GPUs and modes on Dask into one table (:mod:`.run`), the answers people run them for (:mod:`.answers`) and their page (:mod:`.page`)."""
