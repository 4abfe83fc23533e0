"""A faithful, small model of PyTorch's CUDA caching allocator, so learners without a GPU can replay traces.

Policy as in ``c10/cuda/CUDACachingAllocator.cpp`` (``DeviceCachingAllocator``: ``round_size``,
``get_pool``, ``get_allocation_size``, ``get_free_block``, ``should_split``, ``alloc_found_block``,
``free_block``/``try_merge_blocks``, ``release_cached_blocks``); constants from the installed
torch's ``c10/core/AllocatorConfig.h`` (torch 2.13), with the documented defaults as fallback.

Modelled: 512 B rounding; a small pool (requests <= 1 MiB, carved from 2 MiB segments) and a
large pool (1-10 MiB requests get 20 MiB segments, larger ones are rounded up to 2 MiB); best-fit
(smallest adequate free block of the pool, ties by address); splitting (small pool when the
remainder is >= 512 B, large pool only when it is > 1 MiB and the request < max_split_size);
merging free neighbours on free; ``empty_cache`` releasing only whole free segments;
``max_split_size_mb`` (oversize blocks are not split, serve only requests >= max_split_size and
within ``max_non_split_rounding_mb``), ``roundup_power2_divisions`` (one value for all sizes), and
the OOM retry chain (free oversize blocks, then all whole free segments, then raise), and peaks.
Traces (``alloc a 1.5MiB`` / ``free a`` / ``reset_peak`` / ``empty_cache``) replay with ``alloc_viz``.
Not modelled: streams and events (one stream, frees complete at once), CUDA graph pools,
``garbage_collection_threshold``, and ``expandable_segments`` (asking for it raises).
The constants and ``Config`` live in ``alloc_config`` and are importable from here.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from torchcontracts.lessons.l03_memory.alloc_config import KiB, MiB, Config, Constants, constants, header_constants

__all__ = [
    "KiB",
    "MiB",
    "AllocatorModel",
    "Block",
    "Config",
    "Constants",
    "ModelOOM",
    "Segment",
    "constants",
    "header_constants",
]


@dataclasses.dataclass
class Block:
    """A contiguous range of a segment: allocated to a tensor, or free (cached)."""

    addr: int
    size: int
    segment: int
    allocated: bool = False
    requested: int = 0
    name: str = ""


@dataclasses.dataclass
class Segment:
    """One cudaMalloc: an address range split into blocks (sorted by address)."""

    id: int
    addr: int
    size: int
    small: bool
    blocks: list[Block]


class ModelOOM(RuntimeError):
    """The model ran out of its ``capacity``; the message mirrors the real CUDA OOM message."""


def _fmt(n: int) -> str:
    for unit, scale in (("GiB", 1 << 30), ("MiB", MiB), ("KiB", KiB)):
        if n >= scale:
            return f"{n / scale:.2f} {unit}"
    return f"{n} bytes"


class AllocatorModel:
    """The caching allocator of one device and one stream, in pure Python."""

    def __init__(self, config: Config | None = None, consts: Constants | None = None):
        self.config = config or Config()
        self.c = consts or constants()
        if self.config.expandable_segments:
            raise NotImplementedError(
                "the model does not simulate expandable_segments: run that experiment "
                "on a GPU (lesson 03), or use max_split_size_mb in the model"
            )
        self.segments: dict[int, Segment] = {}
        self.live: dict[str, Block] = {}
        self.events: list[dict[str, Any]] = []  # like snapshot()["device_traces"][0]
        self._next_addr = 0x7F0000000000
        self._next_id = 0
        self.counters = {"num_alloc_retries": 0, "num_ooms": 0, "num_device_alloc": 0, "num_device_free": 0}
        self.peaks: dict[str, int] = {}

    # -- policy (names follow CUDACachingAllocator.cpp) ---------------------------------
    def round_size(self, size: int) -> int:
        """``round_size``: at least kMinBlockSize, then a multiple of it (or a power-of-2 division)."""
        mb, div = self.c.kMinBlockSize, self.config.roundup_power2_divisions
        if size < mb:
            return mb
        if div > 1 and size > mb * div:
            floor = 1 << (size.bit_length() - 1)
            if floor == size:
                return size
            step = floor >> (div.bit_length() - 1)
            return size if size % step == 0 else (size // step + 1) * step
        return mb * ((size + mb - 1) // mb)

    def is_small(self, rounded: int) -> bool:
        """``get_pool``: the small pool serves rounded sizes <= kSmallSize."""
        return rounded <= self.c.kSmallSize

    def allocation_size(self, rounded: int) -> int:
        """``get_allocation_size``: the segment size cudaMalloc'd for a request that found no block."""
        c = self.c
        if rounded <= c.kSmallSize:
            return c.kSmallBuffer
        if rounded < c.kMinLargeAlloc:
            return c.kLargeBuffer
        return c.kRoundLarge * ((rounded + c.kRoundLarge - 1) // c.kRoundLarge)

    def should_split(self, block: Block, rounded: int) -> bool:
        """``should_split``: small pool if >= 512 B remain; large pool if > 1 MiB remain and size < max_split."""
        remaining = block.size - rounded
        if self.segments[block.segment].small:
            return remaining >= self.c.kMinBlockSize
        return rounded < self._max_split and remaining > self.c.kSmallSize

    @property
    def _max_split(self) -> int:
        return self.config.max_split_size if self.config.max_split_size is not None else 1 << 62

    def free_blocks(self, small: bool) -> list[Block]:
        """The pool's cached blocks in the allocator's order: by size, then address."""
        return sorted(
            (b for s in self.segments.values() if s.small == small for b in s.blocks if not b.allocated),
            key=lambda b: (b.size, b.addr),
        )

    def _get_free_block(self, rounded: int, small: bool) -> Block | None:
        """``get_free_block``: best fit, honouring the oversize rules of max_split_size."""
        fit = next((b for b in self.free_blocks(small) if b.size >= rounded), None)
        if fit is None:
            return None
        ms = self._max_split
        if rounded < ms and fit.size >= ms:
            return None  # do not hand an oversize block to a normal request
        if rounded >= ms and fit.size >= rounded + self.config.max_non_split_rounding:
            return None  # an oversize block may be used whole, but only within the rounding limit
        return fit

    # -- operations ------------------------------------------------------------------------
    def malloc(self, name: str, size: int) -> Block:
        """Allocate ``size`` bytes for tensor ``name`` (like ``torch.empty(size, dtype=uint8)``)."""
        if name in self.live:
            raise ValueError(f"tensor {name!r} is already allocated: free it first or use a new name")
        if size <= 0:
            raise ValueError(f"size must be positive, got {size}")
        rounded = self.round_size(size)
        small = self.is_small(rounded)
        block = self._get_free_block(rounded, small)
        if block is None:
            seg_size = self.allocation_size(rounded)
            block = self._alloc_segment(seg_size, small)
            if block is None and self._release_available(rounded, small):
                block = self._alloc_segment(seg_size, small)
            if block is None:  # release_cached_blocks, then one retry
                self._release_all()
                block = self._retry(seg_size, small)
            if block is None:
                self._oom(size, seg_size)
        assert block is not None
        if self.should_split(block, rounded):
            seg = self.segments[block.segment]
            rest = Block(block.addr + rounded, block.size - rounded, seg.id)
            block.size = rounded
            seg.blocks.insert(seg.blocks.index(block) + 1, rest)
        block.allocated, block.requested, block.name = True, size, name
        self.live[name] = block
        self._event("alloc", block.addr, size)
        self._update_peaks()
        return block

    def free(self, name: str) -> None:
        """Free tensor ``name``: its block returns to the pool and merges with free neighbours."""
        try:
            block = self.live.pop(name)
        except KeyError:
            raise KeyError(f"no live tensor named {name!r}: allocate it before freeing it") from None
        requested = block.requested
        self._event("free_requested", block.addr, requested)
        block.allocated, block.requested, block.name = False, 0, ""
        seg = self.segments[block.segment]
        i = seg.blocks.index(block)
        if i + 1 < len(seg.blocks) and not seg.blocks[i + 1].allocated:
            block.size += seg.blocks.pop(i + 1).size
        if i > 0 and not seg.blocks[i - 1].allocated:
            seg.blocks[i - 1].size += seg.blocks.pop(i).size
        self._event("free_completed", block.addr, requested)

    def empty_cache(self) -> int:
        """``release_cached_blocks``: cudaFree every segment that is one whole free block; return bytes."""
        return self._release_all()

    def _alloc_segment(self, seg_size: int, small: bool) -> Block | None:
        cap = self.config.capacity
        if cap is not None and self.reserved + seg_size > cap:
            return None
        seg = Segment(self._next_id, self._next_addr, seg_size, small, [])
        seg.blocks.append(Block(seg.addr, seg_size, seg.id))
        self.segments[seg.id] = seg
        self._next_id += 1
        self._next_addr += seg_size + 2 * MiB  # cudaMalloc hands out 2 MiB-aligned ranges
        self.counters["num_device_alloc"] += 1
        self._event("segment_alloc", seg.addr, seg_size)
        self._update_peaks()
        return seg.blocks[0]

    def _retry(self, seg_size: int, small: bool) -> Block | None:
        self.counters["num_alloc_retries"] += 1  # counted only here, as alloc_block(isRetry=true) does
        return self._alloc_segment(seg_size, small)

    def _release(self, seg: Segment) -> int:
        del self.segments[seg.id]
        self.counters["num_device_free"] += 1
        self._event("segment_free", seg.addr, seg.size)
        return seg.size

    def _release_all(self) -> int:
        whole = [s for s in self.segments.values() if len(s.blocks) == 1 and not s.blocks[0].allocated]
        return sum(self._release(s) for s in whole)

    def _release_available(self, rounded: int, small: bool) -> bool:
        """``release_available_cached_blocks``: with max_split_size set, free oversize cached blocks."""
        ms = self._max_split
        if self.config.max_split_size is None:
            return False
        key = max(rounded, ms)
        whole = [b for b in self.free_blocks(small) if len(self.segments[b.segment].blocks) == 1]
        fit = next((b for b in whole if b.size >= key), None)
        if fit is not None:
            self._release(self.segments[fit.segment])
            return True
        released = 0
        for b in reversed([b for b in whole if b.size >= ms]):
            if released >= key:
                break
            released += self._release(self.segments[b.segment])
        return released >= key

    def _oom(self, size: int, seg_size: int) -> None:
        self.counters["num_ooms"] += 1
        cap = self.config.capacity or 0
        self._event("oom", 0, size)
        raise ModelOOM(
            f"CUDA out of memory (allocator model). Tried to allocate {_fmt(seg_size)}. GPU 0 has a total "
            f"capacity of {_fmt(cap)} of which {_fmt(cap - self.reserved)} is free. Of the allocated memory "
            f"{_fmt(self.allocated)} is allocated by PyTorch, and {_fmt(self.reserved - self.allocated)} is "
            "reserved by PyTorch but unallocated. If reserved but unallocated memory is large try setting "
            "PYTORCH_ALLOC_CONF=expandable_segments:True to avoid fragmentation."
        )

    def _event(self, action: str, addr: int, size: int) -> None:
        self.events.append({"action": action, "addr": addr, "size": size, "stream": 0})

    def _update_peaks(self, reset: bool = False) -> None:
        for k, v in self._current_stats().items():
            if k.endswith(".current"):
                peak = k[: -len("current")] + "peak"
                self.peaks[peak] = v if reset else max(self.peaks.get(peak, 0), v)

    def reset_peak_memory_stats(self) -> None:
        """``torch.cuda.reset_peak_memory_stats``: every ``.peak`` becomes its ``.current`` (not zero)."""
        self._update_peaks(reset=True)

    # -- what memory_stats() and snapshot() report -------------------------------------------
    @property
    def allocated(self) -> int:
        """``memory_allocated()``: bytes of allocated blocks (rounded sizes, not requested ones)."""
        return sum(b.size for b in self.live.values())

    @property
    def reserved(self) -> int:
        """``memory_reserved()``: bytes of all segments held from the device."""
        return sum(s.size for s in self.segments.values())

    def memory_stats(self) -> dict[str, int]:
        """The keys of ``torch.cuda.memory_stats()`` the model reproduces: ``.current``, ``.peak``, counters."""
        return {**self._current_stats(), **self.peaks, **self.counters}

    def _current_stats(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for pool, pick in (
            ("all", lambda s: True),
            ("small_pool", lambda s: s.small),
            ("large_pool", lambda s: not s.small),
        ):
            segs = [s for s in self.segments.values() if pick(s)]
            blocks = [b for s in segs for b in s.blocks]
            split_free = [b for s in segs if len(s.blocks) > 1 for b in s.blocks if not b.allocated]
            out[f"allocated_bytes.{pool}.current"] = sum(b.size for b in blocks if b.allocated)
            out[f"active_bytes.{pool}.current"] = out[f"allocated_bytes.{pool}.current"]
            out[f"requested_bytes.{pool}.current"] = sum(b.requested for b in blocks if b.allocated)
            out[f"reserved_bytes.{pool}.current"] = sum(s.size for s in segs)
            out[f"inactive_split_bytes.{pool}.current"] = sum(b.size for b in split_free)
            out[f"allocation.{pool}.current"] = sum(b.allocated for b in blocks)
            out[f"active.{pool}.current"] = out[f"allocation.{pool}.current"]
            out[f"segment.{pool}.current"] = len(segs)
            out[f"inactive_split.{pool}.current"] = len(split_free)
        return out

    def fragmentation(self) -> float:
        """1 - largest free block / all free bytes: 0 when the cache is one piece, near 1 when it is crumbs."""
        free = [b.size for s in self.segments.values() for b in s.blocks if not b.allocated]
        return 0.0 if not free else 1.0 - max(free) / sum(free)

    def snapshot(self) -> dict[str, Any]:
        """The shape of ``torch.cuda.memory._snapshot()``: segments with blocks, and the event trace."""
        segs = []
        for s in sorted(self.segments.values(), key=lambda s: s.addr):
            blocks = [
                {
                    "address": b.addr,
                    "size": b.size,
                    "requested_size": b.requested,
                    "state": "active_allocated" if b.allocated else "inactive",
                    "name": b.name,
                }
                for b in s.blocks
            ]
            alloc = sum(b.size for b in s.blocks if b.allocated)
            segs.append(
                {
                    "device": 0,
                    "address": s.addr,
                    "total_size": s.size,
                    "allocated_size": alloc,
                    "active_size": alloc,
                    "stream": 0,
                    "segment_type": "small" if s.small else "large",
                    "is_expandable": False,
                    "blocks": blocks,
                }
            )
        return {"segments": segs, "device_traces": [list(self.events)], "source": "allocator model"}

    def check_invariants(self) -> None:
        """Raise AssertionError if the layout is impossible (used by the tests)."""
        for s in self.segments.values():
            assert s.blocks and s.blocks[0].addr == s.addr, "a segment must start with a block"
            assert sum(b.size for b in s.blocks) == s.size, "blocks must tile their segment"
            for a, b in zip(s.blocks, s.blocks[1:]):
                assert a.addr + a.size == b.addr, "blocks must be contiguous and must not overlap"
                assert a.allocated or b.allocated, "two free neighbours must have merged"
        assert self.allocated <= self.reserved
