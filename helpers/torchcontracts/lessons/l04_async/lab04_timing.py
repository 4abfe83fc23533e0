"""Lab 04 (timing): the tasks, their workloads and call drivers, and public checks; hidden checks live in the solution.

t1 ``bench(fn, *args, sync=None)`` and t4 ``speedup(fn_a, fn_b, *args, sync=None)`` are judged on
workloads whose true cost the grader knows: ``Workload`` spins on the wall clock for a known time
per call (a first call may cost more: a lazy init), and ``SimStream`` is a simulated CUDA stream
(a call only queues its cost; ``sync()`` waits until the queue is done), all without threads. The
call drivers build them inside the learner's kernel, call the learner's function, and return only
plain tensors: what the function reported *and* what the workloads saw (calls, syncs, wall time).
Judges check structure and ratios, never absolute speed: there must be a warm-up and the calls must
add up, the median must not be below the known cost (the clock stopped before the work was done),
the fastest sample must be per call, and two workloads' fastest samples must keep their known ratio
(a forged constant fails). Fastest, because on a shared machine contention only ever adds time; and a
record that fails is measured once more on fresh workloads, since preemption can hit every sample.

t2 ``intensity(op, shapes, dtype, stride, padding)`` is judged against ``FlopCounterMode`` and
meta tensors; t3 ``place(kernels, ceilings)`` against ``torchcontracts.lessons.l04_async.roofline``.
Their judges live in ``lab04_judges`` (t1, t4) and ``lab04_intensity`` (t2, t3); every public name is
importable from here.
"""

from __future__ import annotations

import math
import time
from typing import Any, Callable

import torch

from torchcontracts.checks import Case, Check, LabSpec, Task
from torchcontracts.lessons.l04_async.lab04_intensity import (
    expected_intensity,
    intensity_cases,
    judge_intensity,
    judge_place,
    place_cases,
)
from torchcontracts.lessons.l04_async.lab04_judges import (
    _judge_attempt,
    _judge_speedup_attempt,
    _num,
    judge_bench,
    judge_speedup,
)
from torchcontracts.lessons.l04_async.workloads import (
    MAX_QUEUED_S,
    CudaMatmul,
    SimStream,
    Workload,
    cuda_matmul_cost,
    measured_twice_if_it_fails,
    spin,
)

__all__ = [
    "MAX_QUEUED_S",
    "SimStream",
    "Workload",
    "bench_cases",
    "broken_speedup",
    "expected_intensity",
    "intensity_cases",
    "judge_bench",
    "judge_intensity",
    "judge_place",
    "judge_speedup",
    "lab",
    "place_cases",
    "run_bench",
    "run_speedup",
    "speedup_cases",
    "spin",
]

LAZY_FIRST_S = 0.08  # a lazy first call: hundreds of later calls


# --- t1 bench(fn, *args, sync=None) ---------------------------------------------------------------

STAT_KEYS = ("median_s", "iqr_s", "number", "warmup")


def _record(result: Any) -> tuple[torch.Tensor, torch.Tensor, str]:
    """The learner's dict as plain tensors: (median, iqr, number, warmup, samples), the times, and a problem or ""."""
    if not isinstance(result, dict):
        return (
            torch.full((5,), math.nan, dtype=torch.float64),
            torch.zeros(0, dtype=torch.float64),
            f"bench returned {type(result).__name__}, not a dict",
        )
    missing = [k for k in (*STAT_KEYS, "times_s") if k not in result]
    times = result.get("times_s")
    try:
        t = (
            torch.tensor([float(x) for x in times], dtype=torch.float64)
            if isinstance(times, (list, tuple))
            else torch.as_tensor(times, dtype=torch.float64).reshape(-1)
        )
    except (TypeError, ValueError, RuntimeError):
        t = torch.zeros(0, dtype=torch.float64)
    stats = torch.tensor([_num(result.get(k)) for k in STAT_KEYS] + [float(t.numel())], dtype=torch.float64)
    return stats, t, f"the dict lacks {missing}" if missing else ""


def run_bench(fn: Callable[..., Any], case: Case) -> dict[str, Any]:
    """Call driver: time two workloads of known cost with ``fn``; return its reports and what the workloads saw
    (measured once more if the record fails: ``measured_twice_if_it_fails``)."""
    return measured_twice_if_it_fails(_bench_attempt, _judge_attempt, fn, case)


def _bench_attempt(fn: Callable[..., Any], case: Case) -> dict[str, Any]:
    kind, costs, first = case.args
    stats, times, problems, calls, syncs, wrong, wall, truth = [], [], [], [], [], [], [], []
    for cost in costs:
        if kind == "cuda":
            arg = torch.randn(int(cost), int(cost), device="cuda")
            work: Any = CudaMatmul(arg)
            stream = None
        else:
            arg = torch.zeros(3)
            stream = SimStream() if kind == "async" else None
            work = Workload(float(cost), float(first), stream, arg)
        t0 = time.perf_counter()
        result = fn(work, arg, sync=stream.sync) if stream is not None else fn(work, arg)
        wall.append(time.perf_counter() - t0)
        s, t, problem = _record(result)
        stats.append(s)
        times.append(t)
        problems.append(problem)
        calls.append(work.calls)
        wrong.append(work.wrong_args)
        syncs.append(stream.syncs if stream else -1)
        truth.append(cuda_matmul_cost(arg) if kind == "cuda" else float(cost))
    return {
        "stats": torch.stack(stats),
        "times": times,
        "problems": problems,
        "calls": torch.tensor(calls),
        "syncs": torch.tensor(syncs),
        "wrong_args": torch.tensor(wrong),
        "wall": torch.tensor(wall, dtype=torch.float64),
        "costs": torch.tensor(truth, dtype=torch.float64),
    }


def bench_cases(seed: int) -> list[Case]:
    """t1's public cases: a lazy first call, queued (asynchronous) work, and a tiny op."""
    return [
        Case("lazy first call", ("lazy", [3e-4, 9e-4], LAZY_FIRST_S)),
        Case("async stream", ("async", [4e-4, 1e-3], 0.0)),
        Case("tiny op", ("tiny", [5e-6, 15e-6], 0.0)),
    ]


# --- t4 speedup(fn_a, fn_b, *args, sync=None): the broken benchmark, fixed -----------------------


def broken_speedup(
    fn_a: Callable[..., Any], fn_b: Callable[..., Any], *args: Any, sync: Callable[[], None] | None = None
) -> float:
    """How many times faster fn_a is than fn_b. (Broken: the lab asks you to say why, and fix it.)"""
    t0 = time.time()
    fn_a(*args)
    t_a = time.time() - t0
    t0 = time.time()
    fn_b(*args)
    t_b = time.time() - t0
    return t_b / t_a


def run_speedup(fn: Callable[..., Any], case: Case) -> dict[str, Any]:
    """Call driver: ``fn(a, b, arg)`` on two workloads of known cost (sharing one stream when async), measured
    once more if the record fails (``measured_twice_if_it_fails``)."""
    return measured_twice_if_it_fails(_speedup_attempt, _judge_speedup_attempt, fn, case)


def _speedup_attempt(fn: Callable[..., Any], case: Case) -> dict[str, Any]:
    kind, cost_a, cost_b, first_a = case.args
    arg = torch.zeros(3)
    stream = SimStream() if kind == "async" else None
    wa, wb = Workload(cost_a, first_a, stream, arg), Workload(cost_b, 0.0, stream, arg)
    result = fn(wa, wb, arg, sync=stream.sync) if stream is not None else fn(wa, wb, arg)
    return {
        "ratio": torch.tensor(_num(result), dtype=torch.float64),
        "calls": torch.tensor([wa.calls, wb.calls]),
        "wrong_args": torch.tensor(wa.wrong_args + wb.wrong_args),
    }


def speedup_cases(seed: int) -> list[Case]:
    return [
        Case("lazy fn_a: 60 ms first", ("lazy", 2.5e-4, 7.5e-4, 0.06)),
        Case("queued on a stream", ("async", 2.5e-4, 1e-3, 0.0)),
        Case("tiny: 5 us vs 20 us", ("tiny", 5e-6, 2e-5, 0.0)),
    ]


# --- the lab ---------------------------------------------------------------------------------------

lab = LabSpec(
    "lab04_timing",
    "Timing: a benchmark harness that tells the truth, arithmetic intensity, the roofline, a broken benchmark fixed",
    tasks=[
        Task("t1", "bench(fn, *args, sync=None): warm up, sync, repeat adaptively, median and spread", 5, "bench"),
        Task("t2", "intensity(op, shapes, dtype, stride, padding): FLOPs, bytes and FLOPs per byte", 3, "intensity"),
        Task("t3", "place(kernels, ceilings): each kernel on the roofline", 2, "place"),
        Task("t4", "speedup(fn_a, fn_b, *args, sync=None): the broken benchmark, fixed", 3, "speedup"),
    ],
    checks=[
        Check("t1", "t1 lazy first call, queued work, tiny op", bench_cases, judge_bench, call=run_bench),
        Check("t2", "t2 matmul, add, sum, conv2d", intensity_cases, judge_intensity),
        Check("t3", "t3 three kernels on a roofline", place_cases, judge_place),
        Check("t4", "t4 lazy, queued and plain pairs", speedup_cases, judge_speedup, call=run_speedup),
    ],
)
