"""Lesson 05's loader machinery: the seeding recipe, worker process meters, importable datasets, throughput tables.

Datasets that ``spawn`` or ``forkserver`` workers must unpickle live here, in an importable module:
a class defined in a notebook belongs to ``__main__``, which a fresh interpreter cannot import.
Everything the lesson teaches stays in its cells; this module holds what they would repeat, and the
loader recipe that lab 05 (and any training script) imports: ``seed_worker`` and ``seeded_loader``.
"""

from __future__ import annotations

import functools
import random
from typing import Any, Callable

import numpy as np
import torch
from torch.utils.data import DataLoader, get_worker_info

__all__ = ["seed_worker", "seeded_loader"]


# --------------------------------------------------------------------------- the seeding recipe

def seed_worker(worker_id: int) -> None:
    """``worker_init_fn`` that gives every worker, in every epoch, its own reproducible random streams.

    In a worker ``torch.initial_seed()`` is ``base_seed + worker_id``, and the DataLoader draws a new
    ``base_seed`` from its ``generator`` for every epoch (every new iterator). Seeding ``random`` and
    NumPy's global RNG from it (as the PyTorch reproducibility notes do) keeps them tied to that seed,
    and a NumPy ``Generator`` the dataset keeps in ``self.rng`` (built once in ``__init__``, so every
    worker got the same copy) is rebuilt from it too. Never ``torch.manual_seed(42 + worker_id)``:
    that replays the same draws every epoch.
    """
    seed = torch.initial_seed()
    random.seed(seed % 2**32)
    np.random.seed(seed % 2**32)
    info = get_worker_info()
    dataset = getattr(info, "dataset", None)
    if isinstance(getattr(dataset, "rng", None), np.random.Generator):
        dataset.rng = np.random.default_rng(seed)  # type: ignore[union-attr]


def _seed_then(init_fn: Callable[[int], Any], worker_id: int) -> None:
    seed_worker(worker_id)
    init_fn(worker_id)


def seeded_loader(dataset: Any, seed: int = 0, **loader_kwargs: Any) -> DataLoader:
    """A DataLoader with this lesson's recipe: ``generator=torch.Generator().manual_seed(seed)`` and ``seed_worker``.

    The generator makes the shuffling and every worker's ``base_seed`` a function of ``seed`` alone
    (the same run twice gives the same batches and the same augmentations), while draws still differ
    by worker and by epoch. A ``worker_init_fn`` in ``loader_kwargs`` runs after ``seed_worker``.
    """
    if "generator" in loader_kwargs:
        raise TypeError("seeded_loader makes its own generator from `seed`: pass seed=..., not generator=")
    user_init = loader_kwargs.pop("worker_init_fn", None)
    init = seed_worker if user_init is None else functools.partial(_seed_then, user_init)
    return DataLoader(dataset, generator=torch.Generator().manual_seed(seed), worker_init_fn=init, **loader_kwargs)
