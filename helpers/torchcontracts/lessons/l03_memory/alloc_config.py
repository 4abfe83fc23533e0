"""What the allocator model is configured by: c10's size constants and the ``PYTORCH_ALLOC_CONF`` options.

``constants()`` reads the size policy (``kMinBlockSize``, ``kSmallSize``, ``kLargeBuffer`` ...) from the
installed torch's ``c10/core/AllocatorConfig.h``, with the documented defaults as fallback, so the model
follows the torch it runs beside; ``Config.parse`` reads the allocator options the model understands.
``alloc`` (the model itself) re-exports every public name here.
"""

from __future__ import annotations

import dataclasses
import functools
import os
import re
from typing import Any

__all__ = ["KiB", "MiB", "Config", "Constants", "constants", "header_constants"]

KiB, MiB = 1 << 10, 1 << 20
MIN_MAX_SPLIT = 20 * MiB  # kLargeBuffer: CUDA's smallest max_split_size_mb


@dataclasses.dataclass(frozen=True)
class Constants:
    """The allocator's size policy, in bytes (names as in c10)."""

    kMinBlockSize: int = 512  # every size rounds up to a multiple of this
    kSmallSize: int = 1 * MiB  # largest "small" request
    kSmallBuffer: int = 2 * MiB  # small-pool segment size
    kMinLargeAlloc: int = 10 * MiB  # requests below this (and > kSmallSize) get a kLargeBuffer segment
    kRoundLarge: int = 2 * MiB  # larger requests round their segment up to this
    kLargeBuffer: int = 20 * MiB  # AcceleratorAllocatorConfig::large_segment_size_ default
    source: str = "documented defaults"


def _header_path() -> str | None:
    try:
        import torch
    except ImportError:  # pragma: no cover - torch is a dependency
        return None
    path = os.path.join(os.path.dirname(torch.__file__), "include", "c10", "core", "AllocatorConfig.h")
    return path if os.path.exists(path) else None


def header_constants(path: str | None = None) -> dict[str, int]:
    """Read ``constexpr size_t kXxx = N;`` and ``large_segment_size_{N}`` from AllocatorConfig.h."""
    path = path or _header_path()
    if path is None:
        return {}
    with open(path, encoding="utf-8") as fh:
        text = fh.read()
    found = {m[1]: int(m[2]) for m in re.finditer(r"constexpr\s+size_t\s+(k\w+)\s*=\s*(\d+)\s*;", text)}
    seg = re.search(r"large_segment_size_\s*\{\s*(\d+)\s*\}", text)
    if seg:
        found["kLargeBuffer"] = int(seg[1])
    return found


@functools.cache
def constants() -> Constants:
    """The constants of the installed torch (headers), else the documented defaults."""
    found = header_constants()
    names = {f.name for f in dataclasses.fields(Constants)} - {"source"}
    known = {k: v for k, v in found.items() if k in names}
    if not known:
        return Constants()
    return Constants(**known, source=f"torch headers ({len(known)} of {len(names)} constants read)")


@dataclasses.dataclass(frozen=True)
class Config:
    """The ``PYTORCH_ALLOC_CONF`` options the model understands (sizes in bytes)."""

    max_split_size: int | None = None  # None: unlimited (the default)
    max_non_split_rounding: int = 20 * MiB  # max_non_split_rounding_mb default
    roundup_power2_divisions: int = 0  # 0 or 1: plain 512 B rounding
    expandable_segments: bool = False
    capacity: int | None = None  # device bytes the model may reserve; None: unlimited

    def __post_init__(self) -> None:
        # CUDA's parser refuses the same (measured on an H200, torch 2.11: "CachingAllocator option
        # max_split_size_mb too small, must be >= 20"): a block under kLargeBuffer is never split off a segment.
        if self.max_split_size is not None and self.max_split_size < MIN_MAX_SPLIT:
            raise ValueError(
                f"CachingAllocator option max_split_size_mb too small, must be >= {MIN_MAX_SPLIT // MiB} "
                "(CUDA refuses it too)"
            )

    @classmethod
    def parse(cls, text: str, capacity: int | None = None) -> Config:
        """Parse e.g. ``"max_split_size_mb:64,roundup_power2_divisions:4"``."""
        kw: dict[str, Any] = {"capacity": capacity}
        for item in filter(None, (p.strip() for p in text.split(","))):
            key, _, value = item.partition(":")
            if key == "max_split_size_mb":
                kw["max_split_size"] = int(value) * MiB
            elif key == "max_non_split_rounding_mb":
                kw["max_non_split_rounding"] = int(value) * MiB
            elif key == "roundup_power2_divisions" and value.isdigit():
                kw["roundup_power2_divisions"] = int(value)
            elif key == "expandable_segments":
                kw["expandable_segments"] = value.strip().lower() == "true"
            else:
                raise ValueError(
                    f"the allocator model does not understand {item!r}: "
                    "use max_split_size_mb, max_non_split_rounding_mb, roundup_power2_divisions"
                )
        return cls(**kw)
