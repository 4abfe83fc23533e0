"""Lesson 05's "Try it" exercises: shard an iterable stream across workers, and seed a dataset's own Generator.

Both are judged by running the learner's function where it really runs: inside DataLoader worker
processes (``fork``, 2-3 workers, a few items), so the checker states what the loader did, not a
second formula. The reference answers live only in tests/test_tryit_lesson05.py.
"""

from __future__ import annotations

import warnings
from collections import Counter
from typing import Any, Callable

import torch
from torch.utils.data import DataLoader, Dataset, get_worker_info

from torchcontracts.checks import Case, Check, Comparison
from torchcontracts.lessons.l05_data.data_pipeline import ShardedStream, worker_iter
from torchcontracts.checks.tryit import Exercise, exercises_by_id

__all__ = ["EXERCISES", "GenAugment", "run_sharded", "run_gen_augment"]


# 05.1: every item of a stream exactly once, whatever the number of workers ------------------------


def _shard_cases(seed: int) -> list[Case]:
    # num_workers=0 first: a stub fails in this process, before any worker starts
    return [
        Case("num_workers=0 (main process), 10 items", (10, 0)),
        Case("2 workers, 10 items", (10, 2)),
        Case("3 workers, 11 items", (11, 3)),
        Case("3 workers, 2 items (a worker gets none)", (2, 3)),
    ]


def run_sharded(fn: Callable[[int, int, int], Any], case: Case) -> list[int]:
    """Every item a ``ShardedStream(n, fn)`` yields through a DataLoader with the case's number of workers."""
    n, workers = case.args
    with warnings.catch_warnings():  # 3 workers on a 2-core machine: torch's (sound) advice, not the learner's fault
        warnings.filterwarnings("ignore", message="This DataLoader will create")
        loader = DataLoader(
            ShardedStream(n, fn),
            batch_size=None,
            num_workers=workers,
            multiprocessing_context="fork" if workers else None,
        )
        with worker_iter(loader) as it:  # workers end even when the learner's function raises in them
            return [int(x) for x in it]


def _judge_shard(case: Case, out: Any) -> list[Comparison]:
    n, workers = case.args
    counts = Counter(out)
    twice = sorted(i for i, c in counts.items() if c > 1)
    missing = sorted(set(range(n)) - set(counts))
    stray = sorted(i for i in counts if not 0 <= i < n)
    if not (twice or missing or stray):
        return [Comparison.plain("each item once", True, "right")]
    if twice:
        status = (
            f"items {twice[:6]} came {max(counts.values())} times: each worker iterates its own copy of the "
            "dataset, so give each one its own part with worker_id and num_workers"
        )
    elif missing:
        status = f"items {missing[:6]} never came: the parts must cover range(n), including its tail"
    else:
        status = f"items {stray[:6]} are outside range({n})"
    return [Comparison.plain("each item once", False, status, expected=f"range({n}), each once", got=sorted(out)[:12])]


# 05.2: a dataset that keeps its own torch.Generator ---------------------------------------------


class GenAugment(Dataset):
    """Each item draws a random crop offset from ``self.gen``, a ``torch.Generator`` made in ``__init__``."""

    def __init__(self, n: int = 8) -> None:
        self.n = n
        self.gen = torch.Generator().manual_seed(0)

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, index: int) -> tuple[int, int, int]:
        info = get_worker_info()
        offset = int(torch.randint(0, 10_000, (), generator=self.gen))
        return (-1 if info is None else info.id, int(index), offset)


def run_gen_augment(fn: Callable[[int], Any], case: Case) -> list[list[list[tuple[int, int, int]]]]:
    """(worker, index, offset) per item, per epoch, for two runs of the same seeded loader using ``fn``."""
    (seed,) = case.args
    runs = []
    for _ in range(2):
        loader = DataLoader(
            GenAugment(8),
            batch_size=None,
            shuffle=True,
            num_workers=2,
            multiprocessing_context="fork",
            generator=torch.Generator().manual_seed(seed),
            worker_init_fn=fn,
        )
        epochs = []
        for _epoch in range(2):
            with worker_iter(loader) as it:  # workers end even when the learner's function raises in them
                epochs.append([tuple(int(v) for v in item) for item in it])
        runs.append(epochs)
    return runs


def _offsets(epoch: list[tuple[int, int, int]], worker: int) -> list[int]:
    return [off for w, _i, off in epoch if w == worker]


def _judge_gen(case: Case, out: Any) -> list[Comparison]:
    first, again = out
    by_worker = all(_offsets(e, 0) != _offsets(e, 1)[: len(_offsets(e, 0))] for e in first)
    by_epoch = all(_offsets(first[0], w) != _offsets(first[1], w) for w in (0, 1))
    rerun = first == again
    return [
        Comparison.plain(
            "workers differ",
            by_worker,
            "right"
            if by_worker
            else "both workers drew the same offsets: each worker's copy of self.gen starts in the same "
            "state; reseed the worker's copy (get_worker_info().dataset.gen)",
        ),
        Comparison.plain(
            "epochs differ",
            by_epoch,
            "right"
            if by_epoch
            else "the offsets replay every epoch: seed from torch.initial_seed(), which changes with the "
            "epoch, not from worker_id alone",
        ),
        Comparison.plain(
            "reproducible",
            rerun,
            "right"
            if rerun
            else "a rerun with the same loader seed drew other offsets: derive the seed from "
            "torch.initial_seed(), not from the clock or the OS",
        ),
    ]


EXERCISES = exercises_by_id(
    [
        Exercise(
            "05.1",
            "shard an iterable stream across workers",
            "shard",
            (Check("05.1", "every item exactly once", _shard_cases, _judge_shard, call=run_sharded),),
            hint="get_worker_info() is None in the main process (then worker_id=0, num_workers=1); "
            "range(start, stop, step) can split range(n) into num_workers interleaved parts",
        ),
        Exercise(
            "05.2",
            "seed a dataset's own torch.Generator in each worker",
            "init_worker",
            (
                Check(
                    "05.2",
                    "draws differ by worker and epoch, and repeat on a rerun",
                    lambda seed: [Case("seed 0", (0,))],
                    _judge_gen,
                    call=run_gen_augment,
                ),
            ),
            hint="inside a worker, get_worker_info().dataset is that worker's copy of the dataset, and "
            "torch.initial_seed() is a seed that differs by worker and by epoch",
        ),
    ]
)
