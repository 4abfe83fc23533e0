"""Workloads whose true cost is known, for judging a learner's benchmark (lab 04). Kernel-side: no judge here.

A benchmark can only be judged against a truth. ``spin`` busy-waits on the wall clock, so a call
costs exactly its time however loaded the machine is; ``Workload`` is a callable of known cost per
call that counts its calls (its first call may cost more: a lazy init), for the lab's demo cells;
``SimStream`` is a simulated CUDA stream: a call only queues its cost and returns at once, and
``sync()`` waits until the queue is done, with no thread and no GPU, so the "no sync" mistake shows
on any machine. ``cuda_matmul_cost`` times the real thing on a GPU (CUDA events).

What the graders' drivers hand a learner's function are plain functions (``logged_work``,
``logged_sync``), never an object with a cost or a counter: each call and sync is written to the
driver's own ``EventLog`` (its kind, and the clock when it began and ended), and each call costs the
case's cost times a factor drawn per call, so no field anywhere states what a sample of calls took:
only a clock does. ``measured_twice`` runs a driver's attempt twice on fresh workloads (contention
only adds time, but it can add it to every sample of a right benchmark); the judge decides which
attempt counts, in the grader's process.
"""

from __future__ import annotations

import math
import os
import random
import statistics
import time
from array import array
from typing import Any, Callable

import torch

from torchcontracts.checks import Case

__all__ = [
    "CALL",
    "EventLog",
    "JITTER",
    "MAX_QUEUED_S",
    "SAMPLES_MIN",
    "SAMPLE_MIN_S",
    "SYNC",
    "SYNCED_KINDS",
    "SimStream",
    "Workload",
    "cuda_matmul_cost",
    "logged_sync",
    "logged_work",
    "measured_twice",
    "spin",
]

MAX_QUEUED_S = 1.0  # a stream never holds more than this much unsynced work: a bench that never syncs fails fast
SAMPLE_MIN_S = 1e-4  # a timed sample shorter than this measures the clock, not the op
SAMPLES_MIN = 5  # timed samples the tasks ask for
SYNCED_KINDS = ("async", "tiny")  # t4 cases whose driver hands a sync(): there the samples themselves are judged
JITTER = 0.1  # a logged call costs the case's cost times a factor drawn in [1 - JITTER, 1 + JITTER]
CALL, SYNC = 0, 2  # event kinds in an EventLog (a call's kind is CALL + the index of the function called)


def _num(v: Any) -> float:
    """``float(v)``, or nan when it is not a number."""
    try:
        return float(v)
    except (TypeError, ValueError, RuntimeError, OverflowError):
        return math.nan


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


# --- what a driver hands over: plain functions that log to the driver's own record ---------------


class EventLog:
    """The driver's record of one call of a learner's function: each event's kind and clock at its start and end."""

    def __init__(self) -> None:
        self.kinds, self.starts, self.ends = array("b"), array("d"), array("d")
        self.wrong_args = 0

    def add(self, kind: int, start: float, end: float) -> None:
        self.kinds.append(kind)
        self.starts.append(start)
        self.ends.append(end)

    def count(self, kind: int) -> int:
        return self.kinds.count(kind)


def logged_work(
    log: EventLog,
    kind: int,
    cost_s: float,
    arg: Any,
    *,
    first_s: float = 0.0,
    stream: SimStream | None = None,
    matmul: torch.Tensor | None = None,
) -> Callable[..., Any]:
    """A plain function ``fn(arg)`` that costs about ``cost_s`` per call (``first_s`` the first time, a lazy init),
    spun on the clock or queued on ``stream`` (or a real ``matmul @ matmul``), and logs each call in ``log``.

    Each call's cost is ``cost_s`` times a factor drawn in ``[1 - JITTER, 1 + JITTER]`` by a generator seeded from
    the OS: a sample's seconds exist only on a clock, so a harness that reports a figure it did not time fails."""
    draw = random.Random(int.from_bytes(os.urandom(8), "little")).uniform
    first = [bool(first_s)]

    def work(*args: Any) -> Any:
        start = time.perf_counter()
        if len(args) != 1 or args[0] is not arg:
            log.wrong_args += 1
        out = None
        if matmul is not None:
            out = matmul @ matmul
        else:
            cost = first_s if first[0] else cost_s * draw(1 - JITTER, 1 + JITTER)
            first[0] = False
            if stream is None:
                spin(cost)
            else:
                stream.enqueue(cost)
        log.add(kind, start, time.perf_counter())
        return out

    return work


def logged_sync(log: EventLog, wait: Callable[[], None] | None) -> Callable[[], None]:
    """A plain ``sync()`` that calls ``wait`` (a stream's sync, or nothing) and logs itself in ``log``."""

    def sync() -> None:
        start = time.perf_counter()
        if wait is not None:
            wait()
        log.add(SYNC, start, time.perf_counter())

    return sync


Attempt = Callable[[Callable[..., Any], Case], dict[str, Any]]


def measured_twice(attempt: Attempt, fn: Callable[..., Any], case: Case) -> dict[str, Any]:
    """Two attempts on fresh workloads, the second under ``retry``: a right benchmark can lose every sample to
    preemption on a busy machine, a wrong one fails both the same way. The grader's judge takes the first attempt
    unless it fails and the retry passes; nothing here judges (no judge runs in the learner's kernel)."""
    record = attempt(fn, case)
    record["retry"] = attempt(fn, case)
    return record
