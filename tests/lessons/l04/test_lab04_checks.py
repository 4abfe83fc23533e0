"""Lab 04 (timing): common wrong answers fail for the right reason.

What every lab must satisfy (reference full marks, judges that never crash, no leaked answers)
is in ``test_lab_contract.py``; here are only lab 04's wrong answers. The workloads cost a known
wall-clock time per call, so these tests hold on a loaded machine: they judge structure and ratios.
"""

from __future__ import annotations

import itertools
import math
import statistics
import time
from typing import Any, Callable

import pytest
import torch

from conftest import checks_by_task
from torchcontracts.checks import Case, Check
from torchcontracts.lessons.l04_async.lab04_timing import (
    SimStream,
    Workload,
    broken_speedup,
    expected_intensity,
    judge_bench,
    judge_speedup,
    lab,
    run_bench,
    run_speedup,
)


@pytest.fixture(scope="module")
def checks() -> dict[str, list[Check]]:
    return checks_by_task(lab.lab_id)


def _failures(checks: list[Check], fn: Callable[..., Any], hidden: bool | None = None) -> list[str]:
    chosen = [c for c in checks if hidden is None or c.hidden == hidden]
    return [o.reason for o in (c.run_local(fn, seed=12345) for c in chosen) if not o.ok]


# --- t1: benches that get one rule wrong ------------------------------------------------------------


def _bench(
    fn, args, sync, *, warm=True, synced=True, adaptive=True, per_call=True, count_calibration=True, samples=7
) -> dict:
    sync = sync or (lambda: None)
    calls = 0
    if warm:
        fn(*args)
        sync()
        calls += 1
    number = 1
    while adaptive:
        t0 = time.perf_counter()
        for _ in range(number):
            fn(*args)
        if synced:
            sync()
        took, calls = time.perf_counter() - t0, calls + number
        if took >= 1e-3:
            break
        number *= 10 if took < 1e-4 else 2
    warmup = calls if count_calibration else int(warm)
    times = []
    for _ in range(samples):
        t0 = time.perf_counter()
        for _ in range(number):
            fn(*args)
        if synced:
            sync()
        times.append((time.perf_counter() - t0) / (number if per_call else 1))
    q1, med, q3 = statistics.quantiles(times, n=4, method="inclusive")
    return {"median_s": med, "iqr_s": q3 - q1, "times_s": times, "number": number, "warmup": warmup}


def good(fn, *args, sync=None):
    return _bench(fn, args, sync)


def no_warmup(fn, *args, sync=None):
    return _bench(fn, args, sync, warm=False, count_calibration=False, adaptive=False)


def no_sync(fn, *args, sync=None):
    return _bench(fn, args, sync, synced=False)


def one_call_per_sample(fn, *args, sync=None):
    return _bench(fn, args, sync, adaptive=False)


def per_sample_times(fn, *args, sync=None):
    return _bench(fn, args, sync, per_call=False)


def forgets_calibration_calls(fn, *args, sync=None):
    return _bench(fn, args, sync, count_calibration=False)


def two_samples(fn, *args, sync=None):
    return _bench(fn, args, sync, samples=2)


def forged(fn, *args, sync=None):
    """Calls fn the right number of times, then reports the same figure for every workload."""
    out = _bench(fn, args, sync)
    return {**out, "median_s": 1e-3, "times_s": [1e-3] * len(out["times_s"]), "iqr_s": 0.0}


def test_a_good_bench_passes_every_check(checks):
    assert _failures(checks["t1"], good) == []


@pytest.mark.parametrize(
    "wrong, reason",
    [
        (no_warmup, "warm-up"),
        (no_sync, "sync"),
        (one_call_per_sample, "sample length"),
        (per_sample_times, "per call"),
        (forgets_calibration_calls, "calls add up"),
        (two_samples, "at least 5 samples"),
        (forged, "fastest sample"),
        (lambda fn, *args, sync=None: 0.001, "not a dict"),
    ],
)
def test_t1_wrong_benches_fail_for_the_right_reason(wrong, reason, checks):
    fails = _failures(checks["t1"], wrong, hidden=False)
    assert fails and any(reason in f for f in fails), fails


def test_t1_forged_figures_that_fit_each_workload_still_fail_on_the_ratio():
    figures = itertools.cycle([0.6e-3, 0.44e-3])  # each within its workload's bounds, in the wrong ratio (twice)

    def plausible(fn, *args, sync=None):
        out, t = _bench(fn, args, sync), next(figures)
        return {**out, "median_s": t, "times_s": [t] * len(out["times_s"]), "iqr_s": 0.0}

    case = Case("two spins", ("plain", [4e-4, 5e-4], 0.0))
    bad = [(r.name, r.status) for r in judge_bench(case, run_bench(plausible, case)) if not r.ok]
    assert [name for name, _ in bad] == ["ratio of the two workloads"], bad


def test_t1_a_right_bench_whose_first_attempt_a_busy_machine_spoiled_passes_on_the_retry():
    attempts = []

    def preempted_once(fn, *args, sync=None):  # the first two calls (one per workload) lose every sample
        out = _bench(fn, args, sync)
        attempts.append(out)
        if len(attempts) <= 2:
            out = {**out, "times_s": [t + 5e-3 for t in out["times_s"]], "median_s": out["median_s"] + 5e-3}
        return out

    case = Case("two spins", ("plain", [4e-4, 1e-3], 0.0))
    record = run_bench(preempted_once, case)
    assert "retry" in record and len(attempts) == 4
    assert all(r.ok for r in judge_bench(case, record))
    first_only = {k: v for k, v in record.items() if k != "retry"}
    assert [r.name for r in judge_bench(case, first_only) if not r.ok] == [
        "workload 1: per call",
        "workload 2: per call",
    ]


def _ten_per_sample_undivided(fn, *args, sync=None):
    """Right but for one rule, whatever the load: 10 calls a sample, reported per sample (not per call)."""
    sync = sync or (lambda: None)
    fn(*args)
    sync()
    times = []
    for _ in range(7):
        t0 = time.perf_counter()
        for _ in range(10):
            fn(*args)
        sync()
        times.append(time.perf_counter() - t0)
    q1, med, q3 = statistics.quantiles(times, n=4, method="inclusive")
    return {"median_s": med, "iqr_s": q3 - q1, "times_s": times, "number": 10, "warmup": 1}


def test_t1_a_wrong_bench_is_measured_twice_and_keeps_its_first_reasons():
    case = Case("two spins", ("plain", [4e-4, 1e-3], 0.0))
    record = run_bench(_ten_per_sample_undivided, case)
    assert "retry" in record
    first = [r.name for r in judge_bench(case, {k: v for k, v in record.items() if k != "retry"}) if not r.ok]
    assert first == ["workload 1: per call", "workload 2: per call"], first
    assert [r.name for r in judge_bench(case, record) if not r.ok] == first


def test_t1_a_bench_that_never_syncs_is_stopped_before_it_queues_too_much():
    stream = SimStream()
    w = Workload(1e-2, stream=stream, arg=None)
    with pytest.raises(RuntimeError, match="sync"):
        for _ in range(200):
            w(None)


def test_t1_workloads_cost_what_they_say_and_count_their_calls():
    arg = torch.zeros(1)
    w = Workload(2e-3, first_s=2e-2, arg=arg)
    t0 = time.perf_counter()
    w(arg)
    first = time.perf_counter() - t0
    t0 = time.perf_counter()
    w(arg)
    w("other")
    assert first >= 2e-2 and time.perf_counter() - t0 >= 4e-3
    assert w.calls == 3 and w.wrong_args == 1


# --- t2 ---------------------------------------------------------------------------------------------


def _ref_intensity(op, shapes, dtype="float32", stride=1, padding=0):
    flops, nbytes = expected_intensity(op, shapes, dtype, stride, padding)
    return {"flops": flops, "bytes": nbytes, "intensity": flops / nbytes}


def test_t2_the_judges_truth_matches_hand_counts():
    assert expected_intensity("matmul", [[64, 128], [128, 32]]) == (
        2 * 64 * 128 * 32,
        4 * (64 * 128 + 128 * 32 + 64 * 32),
    )
    assert expected_intensity("add", [[512, 300], [300]]) == (512 * 300, 4 * (2 * 512 * 300 + 300))
    flops, _ = expected_intensity("conv2d", [[8, 3, 32, 32], [16, 3, 3, 3]], padding=1)
    assert flops == 2 * 8 * 16 * 32 * 32 * 3 * 9


def _scaled(key: str, factor: float):
    def wrong(*a, **k):
        out = _ref_intensity(*a, **k)
        out[key] = type(out[key])(out[key] * factor)
        out["intensity"] = out["flops"] / out["bytes"]
        return out

    return wrong


def no_output_bytes(op, shapes, dtype="float32", stride=1, padding=0):
    out = _ref_intensity(op, shapes, dtype, stride, padding)
    size = torch.empty((), dtype=getattr(torch, dtype)).element_size()
    out["bytes"] = sum(math.prod(s) for s in shapes) * size
    out["intensity"] = out["flops"] / out["bytes"]
    return out


def full_size_broadcast(op, shapes, dtype="float32", stride=1, padding=0):
    out = _ref_intensity(op, shapes, dtype, stride, padding)
    if op == "add":
        n = math.prod(torch.broadcast_shapes(*map(tuple, shapes)))
        out["bytes"] = 3 * n * torch.empty((), dtype=getattr(torch, dtype)).element_size()
        out["intensity"] = out["flops"] / out["bytes"]
    return out


@pytest.mark.parametrize(
    "wrong, reason, hidden",
    [
        (_scaled("flops", 0.5), "a multiply-add is 2 FLOPs", False),
        (
            lambda op, shapes, dtype="float32", stride=1, padding=0: {
                **_ref_intensity(op, shapes, dtype, stride, padding),
                "bytes": expected_intensity(op, shapes, dtype, stride, padding)[1]
                // torch.empty((), dtype=getattr(torch, dtype)).element_size(),
            },
            "elements",
            False,
        ),
        (no_output_bytes, "count the output", False),
        (full_size_broadcast, "broadcast input is small", True),
        (lambda *a, **k: (1, 2, 3), "return {'flops'", False),
    ],
)
def test_t2_wrong_answers_fail_for_the_right_reason(wrong, reason, hidden, checks):
    fails = _failures(checks["t2"], wrong, hidden=hidden)
    assert fails and reason in fails[0], fails


# --- t3 ---------------------------------------------------------------------------------------------


def _place(kernels, ceilings, roof=min, percent=100, flip=False):
    bw, peak = ceilings["bandwidth"], ceilings["peak"]
    out = []
    for k in kernels:
        i = k["flops"] / k["bytes"]
        att = roof(peak, bw * i)
        memory = i < peak / bw
        out.append(
            {
                "name": k["name"],
                "intensity": i,
                "attainable": att,
                "percent": percent * k["flops"] / k["seconds"] / att,
                "bound": ("compute" if memory else "memory") if flip else ("memory" if memory else "compute"),
            }
        )
    return out


def test_t3_reference_passes(checks):
    assert _failures(checks["t3"], _place) == []


@pytest.mark.parametrize(
    "wrong, reason",
    [
        (lambda k, c: _place(k, c, roof=max), "min(peak, bandwidth x intensity)"),
        (lambda k, c: _place(k, c, percent=1), "100 x"),
        (lambda k, c: _place(k, c, flip=True), "ridge point"),
        (lambda k, c: _place(k, c)[:1], "return a list of 3 dicts"),
    ],
)
def test_t3_wrong_answers_fail_for_the_right_reason(wrong, reason, checks):
    fails = _failures(checks["t3"], wrong, hidden=False)
    assert fails and reason in fails[0], fails


def test_t3_at_the_ridge_a_kernel_is_compute_bound(checks):
    def ridge_is_memory(kernels, ceilings):
        out = _place(kernels, ceilings)
        for row in out:
            if math.isclose(row["intensity"], ceilings["peak"] / ceilings["bandwidth"]):
                row["bound"] = "memory"
        return out

    fails = _failures(checks["t3"], ridge_is_memory, hidden=True)
    assert fails and "at or right of it" in fails[0], fails


# --- t4 ---------------------------------------------------------------------------------------------


def _speedup(fn_a, fn_b, *args, sync=None, warm=True, synced=True, samples=15, inverted=False):
    sync = sync or (lambda: None)

    def per_call(fn):
        if warm:
            fn(*args)
            sync()
        number = 1
        while True:
            t0 = time.perf_counter()
            for _ in range(number):
                fn(*args)
            if synced:
                sync()
            if time.perf_counter() - t0 >= 5e-4:
                break
            number *= 4
        times = []
        for _ in range(samples):
            t0 = time.perf_counter()
            for _ in range(number):
                fn(*args)
            if synced:
                sync()
            times.append((time.perf_counter() - t0) / number)
        return min(times)

    a, b = per_call(fn_a), per_call(fn_b)
    return a / b if inverted else b / a


def test_t4_reference_passes(checks):
    assert _failures(checks["t4"], _speedup) == []


@pytest.mark.parametrize(
    "wrong, reason",
    [
        (broken_speedup, "lazy init"),
        (lambda a, b, *args, sync=None: _speedup(a, b, *args, sync=sync, inverted=True), "inverted"),
        (lambda a, b, *args, sync=None: _speedup(a, b, *args, sync=sync, synced=False), "sync()"),
    ],
)
def test_t4_wrong_answers_fail_for_the_right_reason(wrong, reason, checks):
    fails = _failures(checks["t4"], wrong, hidden=False)
    assert fails and any(reason in f for f in fails), fails


def test_t4_a_speedup_a_busy_machine_spoiled_once_passes_on_the_retry():
    calls = []

    def spoiled_once(a, b, *args, sync=None):
        calls.append(1)
        ratio = _speedup(a, b, *args, sync=sync)
        return ratio / 3 if len(calls) == 1 else ratio  # fn_a's samples all preempted, the first time only

    case = Case("two spins", ("plain", 2.5e-4, 1e-3, 0.0))
    record = run_speedup(spoiled_once, case)
    assert "retry" in record and len(calls) == 2
    assert all(r.ok for r in judge_speedup(case, record))
    assert not all(r.ok for r in judge_speedup(case, {k: v for k, v in record.items() if k != "retry"}))
