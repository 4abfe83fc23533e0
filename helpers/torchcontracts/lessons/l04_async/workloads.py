"""Workloads whose true cost is known, for judging a learner's benchmark (lab 04).

A benchmark can only be judged against a truth. ``spin`` busy-waits on the wall clock, so a call
costs exactly its time however loaded the machine is; ``Workload`` is a callable of known cost per
call that counts its calls (its first call may cost more: a lazy init); ``SimStream`` is a simulated
CUDA stream: a call only queues its cost and returns at once, and ``sync()`` waits until the queue
is done, with no thread and no GPU, so the "no sync" mistake shows on any machine. ``CudaMatmul``
and ``cuda_matmul_cost`` are the real thing on a GPU (CUDA events). ``measured_twice_if_it_fails`` and
``first_unless_the_retry_passes`` give a failing record one more attempt: contention only adds time,
but it can add it to every sample of a right benchmark.
"""

from __future__ import annotations

import statistics
import time
from typing import Any, Callable

import torch

from torchcontracts.checks import Case, Comparison

__all__ = [
    "CudaMatmul",
    "MAX_QUEUED_S",
    "SimStream",
    "Workload",
    "cuda_matmul_cost",
    "first_unless_the_retry_passes",
    "measured_twice_if_it_fails",
    "spin",
]

MAX_QUEUED_S = 1.0  # a stream never holds more than this much unsynced work: a bench that never syncs fails fast


def spin(seconds: float) -> None:
    """Busy-wait ``seconds`` on the wall clock: it costs that wall time however loaded the machine is."""
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        pass


class SimStream:
    """A simulated CUDA stream: queued work ends ``cost`` after the previous work; ``sync()`` waits for all of it."""

    def __init__(self) -> None:
        self.busy_until = 0.0
        self.syncs = 0

    def enqueue(self, cost: float) -> None:
        now = time.perf_counter()
        self.busy_until = max(self.busy_until, now) + cost
        if self.busy_until - now > MAX_QUEUED_S:
            raise RuntimeError(
                f"more than {MAX_QUEUED_S:g} s of work queued on the stream without a sync(): "
                "your timing never waits for the work; call sync() before each clock read"
            )

    def sync(self) -> None:
        """Wait until every queued call is done (what torch.cuda.synchronize() does for a GPU)."""
        self.syncs += 1
        spin(self.busy_until - time.perf_counter())


class Workload:
    """``fn(arg)`` of a known cost per call that counts its calls; the first call costs ``first_s`` if given
    (a lazy init). With a ``stream`` a call only queues its cost and returns at once (an asynchronous op)."""

    def __init__(self, cost_s: float, first_s: float = 0.0, stream: SimStream | None = None, arg: Any = None) -> None:
        self.cost_s, self.first_s, self.stream, self.arg = cost_s, first_s, stream, arg
        self.calls = 0
        self.wrong_args = 0

    def __call__(self, *args: Any) -> None:
        self.calls += 1
        if len(args) != 1 or args[0] is not self.arg:
            self.wrong_args += 1
        cost = self.first_s if self.calls == 1 and self.first_s else self.cost_s
        if self.stream is None:
            spin(cost)
        else:
            self.stream.enqueue(cost)


class CudaMatmul:
    """A real CUDA matmul that counts its calls (the hidden CUDA case)."""

    def __init__(self, arg: torch.Tensor) -> None:
        self.arg, self.calls, self.wrong_args = arg, 0, 0

    def __call__(self, *args: Any) -> torch.Tensor:
        self.calls += 1
        if len(args) != 1 or args[0] is not self.arg:
            self.wrong_args += 1
        return self.arg @ self.arg


def cuda_matmul_cost(a: torch.Tensor, calls: int = 20) -> float:
    """Median seconds of ``a @ a`` timed with CUDA events (the truth the hidden CUDA case is judged against)."""
    times = []
    for _ in range(calls):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        a @ a
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) / 1e3)
    return statistics.median(times)


# --- judging a benchmark on a busy machine -------------------------------------------------------

Attempt = Callable[[Callable[..., Any], Case], dict[str, Any]]
Judge = Callable[[Case, Any], list[Comparison]]


def measured_twice_if_it_fails(attempt: Attempt, judge: Judge, fn: Callable[..., Any], case: Case) -> dict[str, Any]:
    """A record that fails ``judge`` gets one more attempt on fresh workloads, under ``retry``: a right benchmark
    can lose every sample to preemption on a busy machine, a wrong one fails both attempts the same way. (The
    judge run here, in the learner's kernel, only decides whether to retry; the grader judges the bytes.)"""
    record = attempt(fn, case)
    if not all(r.ok for r in judge(case, record)):
        record["retry"] = attempt(fn, case)
    return record


def first_unless_the_retry_passes(judge: Judge, case: Case, out: Any) -> list[Comparison]:
    """The judge's rows for the first attempt, unless it failed and the retry passes every row."""
    rows = judge(case, out)
    retry = out.get("retry") if isinstance(out, dict) else None
    if not all(r.ok for r in rows) and isinstance(retry, dict):
        again = judge(case, retry)
        if all(r.ok for r in again):
            return again
    return rows
