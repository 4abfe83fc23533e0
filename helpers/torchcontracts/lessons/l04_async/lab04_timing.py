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
"""

from __future__ import annotations

import math
import statistics
import time
from typing import Any, Callable, Sequence

import torch
import torch.nn.functional as F
from torch.utils.flop_counter import FlopCounterMode

from torchcontracts.checks import Case, Check, Comparison, LabSpec, Task
from torchcontracts.lessons.l04_async.roofline import Ceilings, Kernel
from torchcontracts.lessons.l04_async.workloads import (
    MAX_QUEUED_S,
    CudaMatmul,
    SimStream,
    Workload,
    cuda_matmul_cost,
    first_unless_the_retry_passes,
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

SAMPLE_MIN_S = 1e-4  # a timed sample shorter than this measures the clock, not the op
LAZY_FIRST_S = 0.08  # a lazy first call: hundreds of later calls


# --- t1 bench(fn, *args, sync=None) ---------------------------------------------------------------

STAT_KEYS = ("median_s", "iqr_s", "number", "warmup")


def _num(v: Any) -> float:
    try:
        x = float(v)
    except (TypeError, ValueError, RuntimeError, OverflowError):
        return math.nan
    return x


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


def _not_a_result(out: Any, keys: Sequence[str]) -> list[Comparison]:
    if isinstance(out, dict) and all(k in out for k in keys):
        return []
    got = type(out).__name__ if not isinstance(out, dict) else f"a dict with keys {sorted(map(str, out))}"
    return [
        Comparison.plain(
            "result",
            False,
            "the check's driver did not return its measurements: rerun the cell",
            expected=f"a dict with keys {list(keys)}",
            got=got,
        )
    ]


def _row(name: str, ok: bool, good: str, bad: str, **kw: Any) -> Comparison:
    return Comparison.plain(name, ok, good if ok else bad, **kw)


def _bench_rows(
    label: str,
    kind: str,
    first: float,
    cost: float,
    stats: Any,
    times: Any,
    problem: Any,
    calls: float,
    syncs: float,
    wrong: float,
    wall: float,
) -> list[Comparison]:
    try:
        median, iqr, number, warmup, samples = (float(x) for x in stats)
        ts = [float(x) for x in times]
    except (TypeError, ValueError, RuntimeError):
        return [Comparison.plain(label, False, "the driver's record is unreadable: rerun the cell")]
    if problem:
        return [
            Comparison.plain(
                f"{label}: result", False, f"{problem}: return {{'median_s', 'iqr_s', 'times_s', 'number', 'warmup'}}}}"
            )
        ]
    finite = all(math.isfinite(x) for x in (median, iqr, number, warmup, *ts))
    if not (
        finite
        and median > 0
        and iqr >= 0
        and ts
        and all(x > 0 for x in ts)
        and number == int(number) >= 1
        and warmup == int(warmup) >= 0
    ):
        return [
            Comparison.plain(
                f"{label}: result",
                False,
                "median_s > 0, iqr_s >= 0 and times_s (seconds per call, "
                "one per sample) must be numbers; number >= 1 and warmup >= 0 ints",
                got=f"median {median}, iqr {iqr}, number {number}, warmup {warmup}, {len(ts)} times",
            )
        ]
    n, w = int(number), int(warmup)
    rows = [
        _row(
            f"{label}: samples",
            len(ts) >= 5,
            f"{len(ts)} samples",
            "take at least 5 samples: a spread needs them",
            expected=">= 5",
            got=len(ts),
        ),
        _row(
            f"{label}: args",
            wrong == 0,
            "passed on",
            "call fn(*args): pass the arguments on to fn, unchanged",
            got=f"{int(wrong)} calls with other arguments",
        ),
        _row(
            f"{label}: warm-up",
            w >= 1,
            f"{w} call(s) before timing",
            "time nothing before one untimed call (a first call pays for lazy init and allocation)",
            expected=">= 1",
            got=w,
        ),
        _row(
            f"{label}: calls add up",
            calls == w + n * len(ts),
            "the workload saw exactly what you report",
            f"the workload was called {int(calls)} times, but warmup + number x samples = {w + n * len(ts)}: "
            "count every untimed call (calibration too) in warmup",
            expected=w + n * len(ts),
            got=int(calls),
        ),
        _row(
            f"{label}: statistics",
            abs(median - statistics.median(ts)) <= 1e-3 * median + 1e-9 and iqr <= max(ts) - min(ts) + 1e-9,
            "median_s and iqr_s match times_s",
            "median_s must be the median of times_s, and iqr_s their interquartile range",
            expected=f"{statistics.median(ts):.4g}",
            got=f"{median:.4g}",
        ),
        _row(
            f"{label}: sample length",
            n * cost >= SAMPLE_MIN_S,
            f"{n} call(s) per sample",
            f"a sample of {n} call(s) lasts ~{n * cost * 1e6:.3g} us: repeat the op in each sample until it lasts "
            f"at least {SAMPLE_MIN_S * 1e6:.0f} us (a clock reading is not free)",
            expected=f">= {SAMPLE_MIN_S * 1e6:.0f} us",
        ),
    ]
    if kind in ("lazy", "plain", "tiny"):  # spinning workloads: the wall time bounds the number of calls
        spent = (first - cost if first else 0.0) + calls * cost
        rows.append(
            _row(
                f"{label}: time spent",
                wall >= 0.9 * spent,
                "consistent with the calls",
                "the workload's call count does not fit the time the call took",
                got=f"{wall:.3g} s",
            )
        )
    if kind == "async":
        rows.append(
            _row(
                f"{label}: synced",
                syncs >= len(ts),
                f"sync() before each clock read ({int(syncs)} syncs)",
                f"sync() was called {int(syncs)} times for {len(ts)} samples: call it before every clock "
                "read that ends a sample",
                expected=f">= {len(ts)}",
                got=int(syncs),
            )
        )
    low, fastest, high = 0.8 * cost, min(ts), 1.5 * cost + 2e-5
    rows.append(
        _row(
            f"{label}: median",
            median >= low,
            "not below the work's known cost",
            "below the work's known cost: the clock stopped before the work was done (sync, and time the work itself)",
            expected=f">= {low * 1e6:.3g} us",
            got=f"{median * 1e6:.3g} us",
        )
    )
    rows.append(
        _row(
            f"{label}: per call",
            fastest <= high,
            "seconds per call",  # the fastest: contention only adds
            "the fastest sample is far above the work's cost: report seconds per call (divide a sample by "
            "its number of calls)",
            expected=f"<= {high * 1e6:.3g} us",
            got=f"{fastest * 1e6:.3g} us",
        )
    )
    return rows


def judge_bench(case: Case, out: Any) -> list[Comparison]:
    """t1: each workload's report is a right benchmark of it, and the two medians keep their known ratio.

    The first attempt's rows, unless it failed and the driver's second attempt passes every row."""
    return first_unless_the_retry_passes(_judge_attempt, case, out)


def _judge_attempt(case: Case, out: Any) -> list[Comparison]:
    keys = ("stats", "times", "problems", "calls", "syncs", "wrong_args", "wall", "costs")
    bad = _not_a_result(out, keys)
    if bad:
        return bad
    kind, costs, first = case.args
    try:
        truth = [float(c) for c in out["costs"]] if kind == "cuda" else [float(c) for c in costs]
        calls, syncs = [float(c) for c in out["calls"]], [float(s) for s in out["syncs"]]
        wrong, wall = [float(x) for x in out["wrong_args"]], [float(x) for x in out["wall"]]
        stats, times, problems = list(out["stats"]), list(out["times"]), list(out["problems"])
        assert len(truth) == len(calls) == len(stats) == len(times) == len(problems) == len(syncs) == 2
    except (TypeError, ValueError, RuntimeError, AssertionError):
        return [Comparison.plain("result", False, "the driver's record is unreadable: rerun the cell")]
    rows: list[Comparison] = []
    for i, cost in enumerate(truth):
        rows += _bench_rows(
            f"workload {i + 1}",
            kind,
            float(first),
            cost,
            stats[i],
            times[i],
            problems[i],
            calls[i],
            syncs[i],
            wrong[i],
            wall[i],
        )
    if all(r.ok for r in rows):  # the fastest samples: contention only adds time, so they keep the ratio
        m1, m2 = min(float(x) for x in times[0]), min(float(x) for x in times[1])
        want = truth[1] / truth[0]
        ok = 0.6 * want <= m2 / m1 <= 1.6 * want
        rows.append(
            _row(
                "ratio of the two workloads",
                ok,
                "keeps the known ratio",
                "the two workloads' fastest samples do not keep their known cost ratio: time each one",
                expected=f"{want:.3g}",
                got=f"{m2 / m1:.3g}",
            )
        )
    return rows


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


def judge_speedup(case: Case, out: Any) -> list[Comparison]:
    """t4: the ratio of the two fastest per-call times, within a factor that a loaded machine keeps (the first
    attempt's rows, unless the driver's second attempt passes every row)."""
    return first_unless_the_retry_passes(_judge_speedup_attempt, case, out)


def _judge_speedup_attempt(case: Case, out: Any) -> list[Comparison]:
    bad = _not_a_result(out, ("ratio", "calls", "wrong_args"))
    if bad:
        return bad
    kind, cost_a, cost_b, first_a = case.args
    want = cost_b / cost_a
    got = _num(out["ratio"])
    try:
        calls = [int(c) for c in out["calls"]]
        wrong = int(out["wrong_args"])
    except (TypeError, ValueError, RuntimeError):
        return [Comparison.plain("result", False, "the driver's record is unreadable: rerun the cell")]
    if not math.isfinite(got) or got <= 0:
        return [
            Comparison.plain(
                "speedup",
                False,
                "return a positive float: fn_b's fastest per-call time / fn_a's",
                expected=f"{want:.3g}",
                got=got,
            )
        ]
    ok = 0.6 * want <= got <= 1.6 * want
    if ok:
        status = "right"
    elif 0.5 <= got * want <= 2:
        status = "inverted: return fn_b's time over fn_a's (how many times faster fn_a is)"
    elif kind == "lazy":
        status = "off: fn_a's first call is a lazy init; warm both up before timing"
    elif kind == "async":
        status = "off: the work is queued; call sync() before reading the clock"
    else:
        status = "off: repeat each op in samples long enough for the clock, and compare medians"
    return [
        _row("speedup", ok, status, status, expected=f"{want:.3g}", got=f"{got:.3g}", diff=abs(got - want)),
        _row(
            "args",
            wrong == 0,
            "passed on",
            "call fn(*args): pass the arguments on, unchanged",
            got=f"{wrong} calls with other arguments",
        ),
        _row(
            "repeats",
            min(calls) >= 3,
            "each op ran several times",
            "run each op more than once: one call is one sample of noise",
            got=calls,
        ),
    ]


def speedup_cases(seed: int) -> list[Case]:
    return [
        Case("lazy fn_a: 60 ms first", ("lazy", 2.5e-4, 7.5e-4, 0.06)),
        Case("queued on a stream", ("async", 2.5e-4, 1e-3, 0.0)),
        Case("tiny: 5 us vs 20 us", ("tiny", 5e-6, 2e-5, 0.0)),
    ]


# --- t2 intensity(op, shapes, dtype, stride, padding) ---------------------------------------------


def expected_intensity(
    op: str, shapes: Sequence[Sequence[int]], dtype: str = "float32", stride: int = 1, padding: int = 0
) -> tuple[int, int]:
    """(FLOPs, bytes) as torch counts them: FlopCounterMode on meta tensors (matmul, conv), 1 FLOP per output
    element for an add and per input element for a sum; bytes = every input read once + the output written once."""
    dt = getattr(torch, dtype)
    ts = [torch.empty(tuple(s), dtype=dt, device="meta") for s in shapes]
    fns: dict[str, Callable[..., torch.Tensor]] = {
        "matmul": torch.matmul,
        "add": torch.add,
        "sum": lambda t: t.sum(-1),
        "conv2d": lambda x, w: F.conv2d(x, w, stride=stride, padding=padding),
    }
    with FlopCounterMode(display=False) as counter:
        out = fns[op](*ts)
    flops = counter.get_total_flops() + {"add": out.numel(), "sum": ts[0].numel()}.get(op, 0)
    return int(flops), int(sum(t.numel() * t.element_size() for t in (*ts, out)))


def judge_intensity(case: Case, out: Any) -> list[Comparison]:
    """t2: FLOPs and bytes exactly, intensity to 1e-6."""
    op, shapes, dtype, stride, padding = case.args
    flops, nbytes = expected_intensity(op, shapes, dtype, stride, padding)
    if not isinstance(out, dict) or not all(k in out for k in ("flops", "bytes", "intensity")):
        return [Comparison.plain("answer", False, "return {'flops': int, 'bytes': int, 'intensity': float}", got=out)]
    got_f, got_b, got_i = _num(out["flops"]), _num(out["bytes"]), _num(out["intensity"])
    size = torch.empty((), dtype=getattr(torch, dtype)).element_size()
    if got_f == flops:
        hint_f = "right"
    elif got_f * 2 == flops:
        hint_f = "half: a multiply-add is 2 FLOPs"
    else:
        hint_f = "FLOPs differ (matmul 2mkn; conv 2 x output elements x C_in x kh x kw; add/sum 1 per element)"
    out_bytes = nbytes - sum(math.prod(s) for s in shapes) * size
    if got_b == nbytes:
        hint_b = "right"
    elif got_b * size == nbytes:
        hint_b = "these are elements: multiply by the dtype's size in bytes"
    elif got_b == nbytes - out_bytes:
        hint_b = "count the output written as well as the inputs read"
    else:
        hint_b = (
            "bytes differ: read each input once at its own size (a broadcast input is small), write the output once"
        )
    ok_i = math.isfinite(got_i) and math.isclose(got_i, flops / nbytes, rel_tol=1e-6)
    return [
        _row("flops", got_f == flops, hint_f, hint_f, expected=None if got_f == flops else flops, got=out["flops"]),
        _row("bytes", got_b == nbytes, hint_b, hint_b, expected=None if got_b == nbytes else nbytes, got=out["bytes"]),
        _row(
            "intensity",
            ok_i,
            "right",
            "intensity = flops / bytes",
            expected=f"{flops / nbytes:.6g}",
            got=out["intensity"],
        ),
    ]


def intensity_cases(seed: int) -> list[Case]:
    return [
        Case("matmul (64, 128) @ (128, 32)", ("matmul", [[64, 128], [128, 32]], "float32", 1, 0)),
        Case("add of two (1000, 1000) bf16", ("add", [[1000, 1000], [1000, 1000]], "bfloat16", 1, 0)),
        Case("sum over the last dim of (256, 1024)", ("sum", [[256, 1024]], "float32", 1, 0)),
        Case("conv2d 3x3, padding 1", ("conv2d", [[8, 3, 32, 32], [16, 3, 3, 3]], "float32", 1, 1)),
    ]


# --- t3 place(kernels, ceilings) ------------------------------------------------------------------


def judge_place(case: Case, out: Any) -> list[Comparison]:
    """t3: each kernel's intensity, attainable FLOP/s, % of ceiling (rel 1e-6) and bound."""
    kernels, ceilings = case.args
    roof = Ceilings("judge", 1, bandwidth=ceilings["bandwidth"], flops={"float32": ceilings["peak"]})
    if not isinstance(out, (list, tuple)) or len(out) != len(kernels):
        return [
            Comparison.plain(
                "answer", False, f"return a list of {len(kernels)} dicts, one per kernel, in order", got=out
            )
        ]
    rows = []
    for k, got in zip(kernels, out):
        want = Kernel(k["name"], k["flops"], k["bytes"], k["seconds"])
        expect = {
            "intensity": want.intensity,
            "attainable": roof.attainable(want.intensity),
            "percent": want.percent_of_ceiling(roof),
        }
        if not isinstance(got, dict):
            rows.append(
                Comparison.plain(
                    k["name"], False, "each item is a dict with intensity, attainable, percent, bound", got=got
                )
            )
            continue
        for key, value in expect.items():
            g = _num(got.get(key))
            ok = math.isfinite(g) and math.isclose(g, value, rel_tol=1e-6)
            hint = {
                "intensity": "FLOPs / bytes",
                "attainable": "min(peak, bandwidth x intensity)",
                "percent": "100 x (flops / seconds) / attainable",
            }[key]
            rows.append(_row(f"{k['name']}: {key}", ok, "right", hint, expected=f"{value:.6g}", got=got.get(key)))
        b = got.get("bound")
        rows.append(
            _row(
                f"{k['name']}: bound",
                b == want.bound(roof),
                "right",
                "memory left of the ridge point (peak / bandwidth), compute at or right of it",
                expected=want.bound(roof),
                got=b,
            )
        )
    return rows


def _kernel(name: str, flops: float, nbytes: float, seconds: float) -> dict[str, Any]:
    return {"name": name, "flops": float(flops), "bytes": float(nbytes), "seconds": float(seconds)}


def place_cases(seed: int) -> list[Case]:
    cpu = {"bandwidth": 16e9, "peak": 100e9}
    return [
        Case(
            "three kernels on a 2-core CPU's roofline",
            (
                [
                    _kernel("add 4M", 4e6, 48e6, 4.1e-3),
                    _kernel("softmax 1024x1024", 5 * 2**20, 8 * 2**20, 1.3e-3),
                    _kernel("matmul 1024^3", 2 * 1024**3, 12 * 2**20, 0.031),
                ],
                cpu,
            ),
        )
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
