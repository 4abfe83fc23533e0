"""The skip manifest: every cell or branch that does not run on this machine says why.

Notebooks guard CUDA-only code with ``cuda_or_skip(key)``. The key must be listed in
``data/skips.csv`` with a reason and what the CPU path shows instead; an unlisted key
raises, so an unexplained skip cannot reach a learner or slip through CI.
"""

from __future__ import annotations

import csv
import dataclasses
import functools
from importlib import resources

import torch

__all__ = ["SkipEntry", "cuda_or_skip", "manifest"]


@dataclasses.dataclass(frozen=True)
class SkipEntry:
    """Why a piece of a notebook does not run here, and what teaches instead."""

    key: str
    notebook: str
    needs: str
    reason: str
    cpu_path: str


@functools.cache
def manifest() -> dict[str, SkipEntry]:
    """All listed skips, keyed by ``key``."""
    text = resources.files("torchcontracts").joinpath("data/skips.csv").read_text(encoding="utf-8")
    return {r["key"]: SkipEntry(**r) for r in csv.DictReader(text.splitlines())}


def cuda_or_skip(key: str) -> bool:
    """Return True when CUDA works here; otherwise print the listed reason and return False."""
    try:
        entry = manifest()[key]
    except KeyError:
        raise KeyError(f"skip key {key!r} is not in torchcontracts/data/skips.csv: add it with a reason") from None
    if torch.cuda.is_available():
        return True
    print(f"SKIPPED on this machine ({entry.needs} needed): {entry.reason}")
    print(f"  Instead, on CPU: {entry.cpu_path}")
    return False
