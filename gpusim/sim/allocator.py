"""PyTorch's CUDA caching allocator, modelled: what a sequence of mallocs and frees
reserves, apart from the liveness simulation that produces them (:mod:`gpusim.sim.memory`).

The allocator (:class:`CachingAllocator`) follows ``c10/cuda/CUDACachingAllocator.cpp``:
sizes round up to 512 B; requests up to 1 MiB come from 2 MiB small-pool segments, larger
ones from 20 MiB segments (requests under 10 MiB) or a segment of their size rounded up to
2 MiB; best fit (smallest free block that fits); a block is split only if the remainder is
at least 512 B (small pool) or more than 1 MiB (large pool), else the whole block counts as
allocated; freed blocks coalesce with free neighbours and stay cached (reserved).
"""

from __future__ import annotations

import bisect

MIN_BLOCK = 512                 # kMinBlockSize: every size rounds up to 512 B
SMALL_SIZE = 1 << 20            # kSmallSize: largest small-pool request (1 MiB)
SMALL_BUFFER = 2 << 20          # kSmallBuffer: small-pool segment (2 MiB)
LARGE_BUFFER = 20 << 20         # kLargeBuffer: segment for large requests < 10 MiB
MIN_LARGE_ALLOC = 10 << 20      # kMinLargeAlloc
ROUND_LARGE = 2 << 20           # kRoundLarge: larger segments round up to 2 MiB


def round_size(size: int) -> int:
    """The caching allocator's block size for a request (``round_size``)."""
    return MIN_BLOCK if size < MIN_BLOCK else MIN_BLOCK * ((size + MIN_BLOCK - 1) // MIN_BLOCK)


def segment_size(size: int) -> int:
    """The cudaMalloc size when no cached block fits (``get_allocation_size``)."""
    if size <= SMALL_SIZE:
        return SMALL_BUFFER
    if size < MIN_LARGE_ALLOC:
        return LARGE_BUFFER
    return ROUND_LARGE * ((size + ROUND_LARGE - 1) // ROUND_LARGE)


class CachingAllocator:
    """PyTorch's CUDA caching allocator, one stream, default settings (no
    ``max_split_size``, no expandable segments). ``allocated``/``reserved`` are the
    ``memory_allocated()``/``memory_reserved()`` stats; ``peak_*`` their maxima.
    Segments survive :meth:`free`; :meth:`empty_cache` returns wholly free ones."""

    def __init__(self):
        self.free_blocks = {True: [], False: []}   # small? -> sorted [(size, seg, offset)]
        self.segments: dict[int, dict] = {}        # seg -> {"size", "small", "blocks": {off: [size, free]}}
        self.live: dict[int, tuple] = {}           # handle -> (seg, offset)
        self.allocated = self.reserved = self.peak_allocated = self.peak_reserved = 0
        self._next = 0

    def malloc(self, size: int) -> int:
        size = round_size(size)
        small = size <= SMALL_SIZE
        pool = self.free_blocks[small]
        i = bisect.bisect_left(pool, (size, -1, -1))
        if i < len(pool):                         # best fit: smallest free block that fits
            bsize, seg, off = pool.pop(i)
        else:                                      # no cached block: a new segment
            bsize, seg, off = segment_size(size), self._next, 0
            self._next += 1
            self.segments[seg] = {"size": bsize, "small": small, "blocks": {0: [bsize, True]}}
            self.reserved += bsize
        blocks = self.segments[seg]["blocks"]
        rest = bsize - size
        if rest >= MIN_BLOCK if small else rest > SMALL_SIZE:    # should_split
            blocks[off] = [size, False]
            blocks[off + size] = [rest, True]
            bisect.insort(pool, (rest, seg, off + size))
        else:
            blocks[off] = [bsize, False]
        self.allocated += blocks[off][0]
        handle = self._next
        self._next += 1
        self.live[handle] = (seg, off)
        self.peak_allocated = max(self.peak_allocated, self.allocated)
        self.peak_reserved = max(self.peak_reserved, self.reserved)
        return handle

    def free(self, handle: int) -> None:
        seg, off = self.live.pop(handle)
        s = self.segments[seg]
        blocks, pool = s["blocks"], self.free_blocks[s["small"]]
        size = blocks[off][0]
        self.allocated -= size
        # coalesce with the free neighbours of the same segment
        prev = max((o for o in blocks if o < off), default=None)
        nxt = off + size
        if nxt in blocks and blocks[nxt][1]:
            pool.remove((blocks[nxt][0], seg, nxt))
            size += blocks.pop(nxt)[0]
        if prev is not None and blocks[prev][1] and prev + blocks[prev][0] == off:
            pool.remove((blocks[prev][0], seg, prev))
            del blocks[off]
            off, size = prev, blocks[prev][0] + size
        blocks[off] = [size, True]
        bisect.insort(pool, (size, seg, off))

    def empty_cache(self) -> None:
        for seg in [k for k, s in self.segments.items()
                    if len(s["blocks"]) == 1 and s["blocks"][0][1]]:
            s = self.segments.pop(seg)
            self.free_blocks[s["small"]].remove((s["size"], seg, 0))
            self.reserved -= s["size"]

    def reset_peak(self) -> None:
        self.peak_allocated, self.peak_reserved = self.allocated, self.reserved


def blas_workspace_bytes(spec=None) -> tuple[int, int]:
    """cuBLAS's and cuBLASLt's workspaces (bytes): PyTorch allocates one of each through
    the caching allocator at the first GEMM (the Lt one at the first GEMM with a bias
    epilogue) and keeps them for the process. Defaults of ``CublasHandlePool.cpp``
    (``CUBLAS_WORKSPACE_CONFIG`` unset): ``:4096:8`` = 32 MiB on compute capability 9.0
    and newer, else ``:4096:2:16:8`` = 8 MiB + 128 KiB (the architecture table's
    ``cublas_workspace_kib``; a spec without a row: 32 MiB); cuBLASLt 1 MiB. A fresh H100
    process holds 33.0 MiB after a first call with bias GEMMs and 32.0 MiB without
    (``validation/results/h100/fresh/``, all 103 cases)."""
    from gpusim.hw.arch import arch_of
    row = arch_of(spec) if spec is not None else None
    return (row.cublas_workspace_kib << 10) if row else (32 << 20), 1 << 20
