"""Lab 04 (timing): the tasks, their cases and call drivers, and public checks; hidden checks live in the solution.

This module is kernel-side: the drivers (``run_bench``, ``run_speedup``) run in the learner's kernel and
call nothing from ``lab04_judges`` or ``lab04_intensity`` (the grader's judges, imported here only to
register the checks).

t1 ``bench(fn, *args, sync=None)`` and t4 ``speedup(fn_a, fn_b, *args, sync=None)`` are judged on
workloads whose cost the grader knows from the case: the driver hands the learner's function plain
functions (``workloads.logged_work``, ``logged_sync``) that spin on the wall clock, or queue on a
simulated CUDA stream (``SimStream``: ``sync()`` waits until the queue is done), and write each call
and sync, with the clock at its start and end, to the driver's own ``EventLog``. No handed object
has a cost or a counter to read or write, and each call's cost is drawn around the case's, so a
sample's seconds exist only on a clock. The drivers return plain tensors: what the function reported
and what the log saw: calls, and for t1 each timed sample's window (``sample_windows``: the shortest
and longest time a clock read around its calls can show, and whether a sync followed), for t4 the
calls between syncs. Judges check structure and ratios, never absolute speed; each attempt is made
twice on fresh workloads and a failing first attempt counts only if the retry fails too, since
preemption can hit every sample.

t2 ``intensity(op, shapes, dtype, stride, padding)`` is judged against ``FlopCounterMode`` and meta
tensors; t3 ``place(kernels, ceilings)`` on a roofline with several memory levels. Their judges live
in ``lab04_intensity`` (t2, t3), t1's and t4's in ``lab04_judges``; the judges are importable from here.
"""

from __future__ import annotations

import math
import time
from typing import Any, Callable

import torch

from torchcontracts.checks import Case, Check, LabSpec, Task
from torchcontracts.lessons.l04_async.lab04_intensity import judge_intensity, judge_place  # grader-side only
from torchcontracts.lessons.l04_async.lab04_judges import judge_bench, judge_speedup  # grader-side only
from torchcontracts.lessons.l04_async.workloads import (
    CALL,
    MAX_QUEUED_S,
    SYNC,
    SYNCED_KINDS,
    EventLog,
    SimStream,
    Workload,
    _num,
    cuda_matmul_cost,
    logged_sync,
    logged_work,
    measured_twice,
    spin,
)

__all__ = [
    "MAX_QUEUED_S",
    "SimStream",
    "Workload",
    "bench_cases",
    "broken_speedup",
    "intensity_cases",
    "judge_bench",
    "judge_intensity",
    "judge_place",
    "judge_speedup",
    "kernel_row",
    "lab",
    "place_cases",
    "run_bench",
    "run_speedup",
    "sample_windows",
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
    """Call driver: time two workloads of known cost with ``fn``; return its reports and what the driver's own
    log saw, twice on fresh workloads (``measured_twice``: the grader's judge decides which attempt counts)."""
    return measured_twice(_bench_attempt, fn, case)


def sample_windows(log: EventLog, t_in: float, t_out: float, number: float, samples: int) -> torch.Tensor:
    """For each of the last ``number x samples`` calls in ``log``, in groups of ``number``: the shortest and longest
    time a clock read around that group can show, and whether a sync() followed it before the next call.

    Shortest: from the start of its first call to the end of its last. Longest: from the end of the event before
    its first call (or ``t_in``, when the learner's function began) to the start of the next group's first call (or
    ``t_out``). Rows ``(shortest, longest, synced)``; no rows when the calls cannot hold that many samples."""
    calls = [i for i, k in enumerate(log.kinds) if k != SYNC]
    n = int(number) if math.isfinite(number) and number == int(number) >= 1 else 0
    if not n or samples < 1 or n * samples > len(calls):
        return torch.zeros(0, 3, dtype=torch.float64)
    rows, timed = [], calls[len(calls) - n * samples :]
    for j in range(samples):
        first, last = timed[j * n], timed[j * n + n - 1]
        after = timed[(j + 1) * n] if j + 1 < samples else len(log.kinds)
        end = log.starts[after] if after < len(log.kinds) else t_out
        begin = log.ends[first - 1] if first > 0 else t_in
        synced = any(log.kinds[i] == SYNC for i in range(last + 1, after))
        rows.append((log.ends[last] - log.starts[first], end - begin, float(synced)))
    return torch.tensor(rows, dtype=torch.float64).reshape(-1, 3)


def _bench_attempt(fn: Callable[..., Any], case: Case) -> dict[str, Any]:
    """One call of ``fn`` per workload. Everything judged comes from the driver's own log, kept by the plain
    functions it hands over (``logged_work``, ``logged_sync``), never from a counter on a handed object."""
    kind, costs, first = case.args
    stats, times, problems, calls, wrong, windows, truth = [], [], [], [], [], [], []
    for cost in costs:
        log = EventLog()
        sync = None
        if kind == "cuda":
            arg = torch.randn(int(cost), int(cost), device="cuda")
            work = logged_work(log, CALL, 0.0, arg, matmul=arg)
        else:
            arg = torch.zeros(3)
            stream = SimStream() if kind == "async" else None
            work = logged_work(log, CALL, float(cost), arg, first_s=float(first), stream=stream)
            sync = logged_sync(log, stream.sync) if stream is not None else None
        t_in = time.perf_counter()
        result = fn(work, arg, sync=sync) if sync is not None else fn(work, arg)
        t_out = time.perf_counter()
        s, t, problem = _record(result)
        stats.append(s)
        times.append(t)
        problems.append(problem)
        calls.append(log.count(CALL))
        wrong.append(log.wrong_args)
        windows.append(sample_windows(log, t_in, t_out, float(s[2]), int(t.numel())))
        truth.append(cuda_matmul_cost(arg) if kind == "cuda" else float(cost))
    return {
        "stats": torch.stack(stats),
        "times": times,
        "problems": problems,
        "calls": torch.tensor(calls),
        "wrong_args": torch.tensor(wrong),
        "windows": windows,
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
    """Call driver: ``fn(a, b, arg)`` on two workloads of known cost (sharing one stream when async; with a
    ``sync`` for the kinds in ``SYNCED_KINDS``), twice on fresh workloads (``measured_twice``). It returns the
    ratio and the driver's own counts: calls of each function, the calls between syncs (t4's samples), the wall
    time."""
    return measured_twice(_speedup_attempt, fn, case)


CALL_A, CALL_B = CALL, CALL + 1  # the t4 driver's event kinds for fn_a and fn_b (and SYNC)


def _speedup_attempt(fn: Callable[..., Any], case: Case) -> dict[str, Any]:
    """One call of ``fn`` on two fresh workloads. The counts come from the driver's own log, kept by the plain
    functions it hands over, never from a counter on an object the learner's code is handed."""
    kind, cost_a, cost_b, first_a = case.args
    arg = torch.zeros(3)
    stream = SimStream() if kind == "async" else None
    log = EventLog()
    fa = logged_work(log, CALL_A, float(cost_a), arg, first_s=float(first_a), stream=stream)
    fb = logged_work(log, CALL_B, float(cost_b), arg, stream=stream)
    sync = logged_sync(log, stream.sync if stream is not None else None)  # CPU work ("tiny") gets one too
    t0 = time.perf_counter()
    result = fn(fa, fb, arg, sync=sync) if kind in SYNCED_KINDS else fn(fa, fb, arg)
    wall = time.perf_counter() - t0
    runs, a, b = [], 0, 0  # calls of fn_a and fn_b between two syncs: one row per sync
    for code in log.kinds:
        if code == SYNC:
            runs.append((a, b))
            a = b = 0
        elif code == CALL_A:
            a += 1
        else:
            b += 1
    return {
        "ratio": torch.tensor(_num(result), dtype=torch.float64),
        "calls": torch.tensor([log.count(CALL_A), log.count(CALL_B)]),
        "wrong_args": torch.tensor(log.wrong_args),
        "runs": torch.tensor(runs, dtype=torch.int64).reshape(-1, 2),
        "wall": torch.tensor(wall, dtype=torch.float64),
    }


def speedup_cases(seed: int) -> list[Case]:
    return [
        Case("lazy fn_a: 60 ms first", ("lazy", 2.5e-4, 7.5e-4, 0.06)),
        Case("queued on a stream", ("async", 2.5e-4, 1e-3, 0.0)),
        Case("tiny: 5 us vs 20 us, sync given", ("tiny", 5e-6, 2e-5, 0.0)),
    ]


# --- t2 intensity(op, shapes, dtype, stride, padding) and t3 place(kernels, ceilings): cases ----------


def intensity_cases(seed: int) -> list[Case]:
    return [
        Case("matmul (64, 128) @ (128, 32)", ("matmul", [[64, 128], [128, 32]], "float32", 1, 0)),
        Case("add of two (1000, 1000) bf16", ("add", [[1000, 1000], [1000, 1000]], "bfloat16", 1, 0)),
        Case("sum over the last dim of (256, 1024)", ("sum", [[256, 1024]], "float32", 1, 0)),
        Case("conv2d 3x3, padding 1", ("conv2d", [[8, 3, 32, 32], [16, 3, 3, 3]], "float32", 1, 1)),
    ]


def kernel_row(name: str, flops: float, seconds: float, **level_bytes: float) -> dict[str, Any]:
    """One of t3's kernels: ``{"name", "flops", "bytes": {level: bytes}, "seconds"}``."""
    return {
        "name": name,
        "flops": float(flops),
        "bytes": {k: float(v) for k, v in level_bytes.items()},
        "seconds": float(seconds),
    }


def place_cases(seed: int) -> list[Case]:
    cpu = {"peak": 100e9, "bandwidth": {"dram": 16e9, "l2": 60e9}}
    return [
        Case(
            "four kernels on a 2-core CPU's DRAM and L2 roofs",
            (
                [
                    kernel_row("add 4M", 4e6, 4.1e-3, dram=48e6, l2=48e6),
                    kernel_row("stencil, re-read from L2", 8e6, 1.4e-3, dram=8e6, l2=64e6),
                    kernel_row("matmul 1024^3", 2 * 1024**3, 0.031, dram=12 * 2**20, l2=96 * 2**20),
                    kernel_row("at the DRAM ridge", 6.25e6, 9e-5, dram=1e6, l2=1e6),
                ],
                cpu,
            ),
        ),
        Case(
            "a GPU kernel, the levels listed L2 first",
            (
                [kernel_row("reduction", 2**26, 1.6e-4, l2=2**29, hbm=2**28)],
                {"peak": 60e12, "bandwidth": {"l2": 7e12, "hbm": 2e12}},
            ),
        ),
    ]


# --- the lab ---------------------------------------------------------------------------------------

lab = LabSpec(
    "lab04_timing",
    "Timing: a benchmark harness that tells the truth, arithmetic intensity, the roofline, a broken benchmark fixed",
    tasks=[
        Task("t1", "bench(fn, *args, sync=None): warm up, sync, repeat adaptively, median and spread", 5, "bench"),
        Task("t2", "intensity(op, shapes, dtype, stride, padding): FLOPs, bytes and FLOPs per byte", 3, "intensity"),
        Task("t3", "place(kernels, ceilings): each kernel under its memory levels' roofs", 2, "place"),
        Task("t4", "speedup(fn_a, fn_b, *args, sync=None): the broken benchmark, fixed", 3, "speedup"),
    ],
    checks=[
        Check("t1", "t1 lazy first call, queued work, tiny op", bench_cases, judge_bench, call=run_bench),
        Check("t2", "t2 matmul, add, sum, conv2d", intensity_cases, judge_intensity),
        Check("t3", "t3 four kernels under DRAM and L2 roofs", place_cases, judge_place),
        Check("t4", "t4 lazy, queued and plain pairs", speedup_cases, judge_speedup, call=run_speedup),
    ],
)
