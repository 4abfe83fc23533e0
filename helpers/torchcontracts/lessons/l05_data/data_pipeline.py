"""Lesson 05's loader machinery: the seeding recipe, worker process meters, importable datasets, a draw recorder.

Datasets that ``spawn`` or ``forkserver`` workers must unpickle live here, in an importable module:
a class defined in a notebook belongs to ``__main__``, which a fresh interpreter cannot import.
Everything the lesson teaches stays in its cells; this module holds what they would repeat, and the
loader recipe that lab 05 (and any training script) imports: ``seed_worker`` and ``seeded_loader``.
Throughput timing is in ``torchcontracts.lessons.l05_data.throughput``.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import os
import random
import sys
from typing import Any, Callable, Iterator, Sequence

import numpy as np
import torch
from torch.utils.data import DataLoader, Dataset, IterableDataset, get_worker_info

__all__ = [
    "PARENT_MARK",
    "WORKER_COMM",
    "CudaRoundTrip",
    "DrawDataset",
    "Memory",
    "ModuleDataset",
    "ShardedStream",
    "close_workers",
    "dataloader_workers",
    "descendants",
    "process_memory",
    "record_draws",
    "seed_worker",
    "seeded_loader",
    "worker_iter",
]

PARENT_MARK: str | None = None  # the notebook sets it; a forked worker inherits it, a fresh interpreter does not
WORKER_COMM = "pt_data_worker"  # the name torch gives each DataLoader worker (torch.multiprocessing._set_thread_name)
NOTICED_MODULES = ("pandas", "matplotlib", "IPython")  # imported by a notebook kernel, never by a worker itself


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


# --------------------------------------------------------------------------- worker processes


@dataclasses.dataclass(frozen=True)
class Memory:
    """A process's resident memory (``rss``) and the part only it holds (``uss``: its private pages), in bytes.

    After ``fork`` RSS counts the pages a worker still shares with its parent, so it hardly moves when
    copy-on-write copies a page; USS grows by exactly those copies. ``None`` where /proc is missing.
    """

    rss: int | None
    uss: int | None


def process_memory(pid: int | str = "self") -> Memory:
    """RSS and USS of ``pid`` (default: this process) from Linux's /proc/<pid>/smaps_rollup."""
    fields: dict[str, int] = {}
    try:
        with open(f"/proc/{pid}/smaps_rollup", encoding="ascii") as fh:
            for line in fh:
                key, _, value = line.partition(":")
                parts = value.split()
                if len(parts) == 2 and parts[1] == "kB":
                    fields[key] = int(parts[0]) * 1024
    except OSError:  # not Linux, or the process is gone
        return Memory(None, None)
    return Memory(fields.get("Rss"), fields.get("Private_Clean", 0) + fields.get("Private_Dirty", 0))


def _proc_text(pid: int | str, name: str) -> str:
    try:
        with open(f"/proc/{pid}/{name}", "rb") as fh:
            return fh.read().decode(errors="replace").replace("\0", " ").strip()
    except OSError:
        return ""


def descendants(pid: int | None = None) -> list[int]:
    """Every live process below ``pid`` (default: this one), children first; [] where /proc is missing."""
    root = os.getpid() if pid is None else pid
    parent_of: dict[int, int] = {}
    try:
        entries = os.listdir("/proc")
    except OSError:
        return []
    for name in entries:
        if name.isdigit():
            stat = _proc_text(name, "stat")
            if ") " in stat:  # "pid (comm) state ppid ...": comm may hold spaces, so split after it
                parent_of[int(name)] = int(stat.rsplit(") ", 1)[1].split()[1])
    found: list[int] = []
    frontier = [root]
    while frontier:
        kids = sorted(p for p, pp in parent_of.items() if pp in frontier)
        found += kids
        frontier = kids
    return found


def dataloader_workers(pid: int | None = None) -> list[int]:
    """The live DataLoader worker processes below ``pid``: torch names each one ``pt_data_worker``."""
    return [p for p in descendants(pid) if _proc_text(p, "comm") == WORKER_COMM]


@contextlib.contextmanager
def worker_iter(loader: DataLoader) -> Iterator[Iterator[Any]]:
    """``iter(loader)`` whose workers are shut down on exit, even after an exception or a ``break``.

    A persistent loader keeps its workers (that is its point): end them with ``close_workers``.
    """
    it = iter(loader)
    try:
        yield it
    finally:
        if not loader.persistent_workers:
            shutdown = getattr(it, "_shutdown_workers", None)  # what the iterator's __del__ calls
            if shutdown is not None:
                shutdown()
        del it


def close_workers(loader: DataLoader) -> None:
    """End a persistent loader's workers now (the iterator it caches); the next epoch starts new ones."""
    it = getattr(loader, "_iterator", None)
    if it is not None and hasattr(it, "_shutdown_workers"):
        it._shutdown_workers()
    loader._iterator = None


# --------------------------------------------------------------------------- importable datasets


class DrawDataset(Dataset):
    """Records, for each index, one draw from every RNG an augmentation might use, in the worker that ran it.

    ``self.rng`` is a NumPy Generator built in ``__init__``: every worker gets a copy in the same state.
    """

    def __init__(self, n: int = 8, rng_seed: int | None = 0) -> None:
        self.n = n
        self.rng = np.random.default_rng(rng_seed)

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, index: int) -> dict[str, Any]:
        info = get_worker_info()
        return {
            "worker": -1 if info is None else info.id,
            "index": int(index),
            "torch": round(float(torch.rand(())), 6),
            "random": round(random.random(), 6),
            "np.random": round(float(np.random.random()), 6),
            "self.rng": round(float(self.rng.random()), 6),
            "initial_seed": torch.initial_seed(),
        }


DRAW_COLUMNS = ["epoch", "worker", "index", "torch", "random", "np.random", "self.rng", "initial_seed"]


def record_draws(loader: DataLoader, epochs: int = 2) -> Any:
    """A pandas DataFrame with one row per (epoch, worker, index): the draws a ``DrawDataset`` made there.

    The loader must yield single items (``batch_size=None``), so each row is one ``__getitem__`` call.
    """
    import pandas as pd

    if loader.batch_size is not None:
        raise ValueError("record_draws needs DataLoader(..., batch_size=None): one item (one row of draws) per index")
    rows = []
    for epoch in range(epochs):
        with worker_iter(loader) as it:
            rows += [{"epoch": epoch, **item} for item in it]
    return pd.DataFrame(rows, columns=DRAW_COLUMNS)


class ModuleDataset(Dataset):
    """Items computed by an ``nn.Module`` the dataset holds (pickled whole into spawn/forkserver workers).

    Each item also says where it was made: the pid, the process's command line, whether the
    notebook's ``PARENT_MARK`` reached it, which of the kernel's modules it already had, and the
    worker's private memory (USS) at that moment.
    """

    def __init__(self, n: int = 2, seed: int = 0) -> None:
        self.n = n
        with torch.random.fork_rng():  # seeded weights, and the caller's global RNG left as it was
            torch.manual_seed(seed)
            self.net = torch.nn.Linear(3, 2)

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, index: int) -> dict[str, Any]:
        with torch.no_grad():
            y = self.net(torch.full((3,), float(index)))
        return {
            "pid": os.getpid(),
            "ppid": os.getppid(),
            "cmdline": _proc_text("self", "cmdline"),
            "parent_mark": PARENT_MARK,
            "kernel_modules": [m for m in NOTICED_MODULES if m in sys.modules],
            "uss": process_memory().uss,
            "y": y,
        }


class CudaRoundTrip(Dataset):
    """Calls ``.cuda()`` inside ``__getitem__`` (the seed's anti-pattern), then returns the result on the CPU."""

    def __len__(self) -> int:
        return 2

    def __getitem__(self, index: int) -> torch.Tensor:
        x = torch.full((4,), float(index)).cuda()
        return (x * 2).cpu()


class ShardedStream(IterableDataset):
    """Yields ``range(n)`` split by ``shard(n, worker_id, num_workers)``, which runs inside each worker.

    In the main process (``num_workers=0``) it calls ``shard(n, 0, 1)``.
    """

    def __init__(self, n: int, shard: Callable[[int, int, int], Sequence[int]]) -> None:
        self.n, self.shard = n, shard

    def __iter__(self) -> Iterator[int]:
        info = get_worker_info()
        wid, nw = (0, 1) if info is None else (info.id, info.num_workers)
        yield from (int(i) for i in self.shard(self.n, wid, nw))
