"""Simulate: the host and GPU stream timeline of the lowered kernels (:mod:`.timeline`) and the liveness simulation of memory through the caching allocator (:mod:`.memory`, :mod:`.allocator`)."""
