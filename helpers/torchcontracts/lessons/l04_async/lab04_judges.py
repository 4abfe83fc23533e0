"""Lab 04's timing judges (t1 ``bench``, t4 ``speedup``): what a driver's record must show to pass.

They run in the grader's own process on the plain tensors that ``run_bench`` and ``run_speedup`` (in
``lab04_timing``, which re-exports ``judge_bench`` and ``judge_speedup``) return, and check structure
and ratios, never absolute speed. t1 rests on the driver's own log, never on a counter of a handed
object: the calls it counted add up to what the learner reports, every timed sample fits its calls'
window on the driver's clock (a figure not read from a clock around those calls fails), a sync ends
each sample where one is handed, the median is not below the case's cost, times are per call, and two
workloads' fastest samples keep their known ratio. A judge never raises on an odd answer: it returns
a failing row. No kernel-side code calls anything here.
"""

from __future__ import annotations

import heapq
import math
import statistics
from typing import Any, Callable

from torchcontracts.checks import Case, Comparison
from torchcontracts.checks.comparison import not_a_result as _not_a_result
from torchcontracts.lessons.l04_async.workloads import SAMPLE_MIN_S, SAMPLES_MIN, SYNCED_KINDS, _num

__all__ = [
    "CLOCK_ABS_S",
    "CLOCK_REL",
    "calls_per_sample",
    "first_unless_the_retry_passes",
    "judge_bench",
    "judge_speedup",
    "unmatched_samples",
]

CLOCK_ABS_S, CLOCK_REL = 5e-7, 1e-4  # slack of a sample against its window: float rounding, a coarser clock
Judge = Callable[[Case, Any], list[Comparison]]


def calls_per_sample(cost: float) -> int:
    """The fewest calls of an op of ``cost`` seconds that make a sample of ``SAMPLE_MIN_S``: 25 for 4 us, 1 for 1 ms."""
    return max(1, math.ceil(SAMPLE_MIN_S / cost - 1e-6))


def _row(name: str, ok: bool, good: str, bad: str, **kw: Any) -> Comparison:
    return Comparison.plain(name, ok, good if ok else bad, **kw)


def first_unless_the_retry_passes(judge: Judge, case: Case, out: Any) -> list[Comparison]:
    """The judge's rows for the first attempt, unless it failed and the retry passes every row."""
    rows = judge(case, out)
    retry = out.get("retry") if isinstance(out, dict) else None
    if not all(r.ok for r in rows) and isinstance(retry, dict):
        again = judge(case, retry)
        if all(r.ok for r in again):
            return again
    return rows


def unmatched_samples(samples: list[float], windows: list[tuple[float, float]]) -> int:
    """How many samples no window can hold, each window holding one sample (greedy: the samples in increasing
    order, each given the open window that closes first), with ``CLOCK_ABS_S`` and ``CLOCK_REL`` of slack."""
    slack = [(lo - CLOCK_ABS_S - CLOCK_REL * lo, hi + CLOCK_ABS_S + CLOCK_REL * hi) for lo, hi in windows]
    slack.sort()
    open_: list[float] = []
    missed, i = 0, 0
    for s in sorted(samples):
        while i < len(slack) and slack[i][0] <= s:
            heapq.heappush(open_, slack[i][1])
            i += 1
        while open_ and open_[0] < s:  # closed before this sample: no later sample fits it either
            heapq.heappop(open_)
        if open_:
            heapq.heappop(open_)
        else:
            missed += 1
    return missed


# --- t1 bench(fn, *args, sync=None) ---------------------------------------------------------------


def _bench_rows(
    label: str, kind: str, cost: float, stats: Any, times: Any, problem: Any, calls: float, wrong: float, windows: Any
) -> list[Comparison]:
    try:
        median, iqr, number, warmup, samples = (float(x) for x in stats)
        ts = [float(x) for x in times]
        win = [(float(lo), float(hi), float(synced)) for lo, hi, synced in windows]
    except (TypeError, ValueError, RuntimeError):
        return [Comparison.plain(label, False, "the driver's record is unreadable: rerun the cell")]
    if problem:
        return [
            Comparison.plain(
                f"{label}: result", False, f"{problem}: return {{'median_s', 'iqr_s', 'times_s', 'number', 'warmup'}}"
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
    adds_up = calls == w + n * len(ts)
    rows = [
        _row(
            f"{label}: samples",
            len(ts) >= SAMPLES_MIN,
            f"{len(ts)} samples",
            f"take at least {SAMPLES_MIN} samples: a spread needs them",
            expected=f">= {SAMPLES_MIN}",
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
            adds_up,
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
    if kind == "async" and adds_up and win:  # a sync() handed: the driver saw where each timed sample's calls end
        synced = int(sum(s for _, _, s in win))
        rows.append(
            _row(
                f"{label}: synced",
                synced == len(win),
                f"sync() after each sample's calls ({synced})",
                f"{len(win) - synced} of your {len(win)} samples had no sync() after their calls: call sync() at "
                "the end of every sample, before the clock read that ends it",
                expected=f"{len(win)} synced samples",
                got=synced,
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
    per_call = fastest <= high
    rows.append(
        _row(
            f"{label}: per call",
            per_call,
            "seconds per call",  # the fastest: contention only adds
            "the fastest sample is far above the work's cost: report seconds per call (divide a sample by "
            "its number of calls)",
            expected=f"<= {high * 1e6:.3g} us",
            got=f"{fastest * 1e6:.3g} us",
        )
    )
    if adds_up and per_call and len(win) == len(ts):  # every figure must come from a clock read around its calls
        missed = unmatched_samples([t * n for t in ts], [(lo, hi) for lo, hi, _ in win])
        rows.append(
            _row(
                f"{label}: timed",
                missed == 0,
                "each sample fits the clock around its calls",
                f"{missed} of your {len(ts)} times_s do not fit the time their calls took on the driver's clock: time "
                "each sample with time.perf_counter(), read just before its first call and just after its last "
                "call (and sync), and report it divided by number",
                expected="0 samples off the clock",
                got=missed,
            )
        )
    return rows


def judge_bench(case: Case, out: Any) -> list[Comparison]:
    """t1: each workload's report is a right benchmark of it, and the two medians keep their known ratio.

    The first attempt's rows, unless it failed and the driver's second attempt passes every row."""
    return first_unless_the_retry_passes(_judge_attempt, case, out)


def _judge_attempt(case: Case, out: Any) -> list[Comparison]:
    keys = ("stats", "times", "problems", "calls", "wrong_args", "windows", "costs")
    bad = _not_a_result(out, keys)
    if bad:
        return bad
    kind, costs, _first = case.args
    try:
        truth = [float(c) for c in out["costs"]] if kind == "cuda" else [float(c) for c in costs]
        calls, wrong = [float(c) for c in out["calls"]], [float(x) for x in out["wrong_args"]]
        stats, times, problems, windows = list(out["stats"]), list(out["times"]), list(out["problems"]), out["windows"]
        assert len(truth) == len(calls) == len(stats) == len(times) == len(problems) == len(windows) == 2
    except (TypeError, ValueError, RuntimeError, AssertionError):
        return [Comparison.plain("result", False, "the driver's record is unreadable: rerun the cell")]
    rows: list[Comparison] = []
    for i, cost in enumerate(truth):
        rows += _bench_rows(
            f"workload {i + 1}", kind, cost, stats[i], times[i], problems[i], calls[i], wrong[i], windows[i]
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


# --- t4 speedup(fn_a, fn_b, *args, sync=None) ----------------------------------------------------


def judge_speedup(case: Case, out: Any) -> list[Comparison]:
    """t4: the ratio of the two fastest per-call times, within a factor that a loaded machine keeps (the first
    attempt's rows, unless the driver's second attempt passes every row)."""
    return first_unless_the_retry_passes(_judge_speedup_attempt, case, out)


def _judge_speedup_attempt(case: Case, out: Any) -> list[Comparison]:
    bad = _not_a_result(out, ("ratio", "calls", "wrong_args", "runs", "wall"))
    if bad:
        return bad
    kind, cost_a, cost_b, first_a = case.args
    want = cost_b / cost_a
    got = _num(out["ratio"])
    try:
        calls = [int(c) for c in out["calls"]]
        wrong = int(out["wrong_args"])
        runs = [(int(a), int(b)) for a, b in out["runs"]]
        wall = float(out["wall"])
        assert len(calls) == 2
    except (TypeError, ValueError, RuntimeError, AssertionError):
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
    rows = [
        _row("speedup", ok, status, status, expected=f"{want:.3g}", got=f"{got:.3g}", diff=abs(got - want)),
        _row(
            "args",
            wrong == 0,
            "passed on",
            "call fn(*args): pass the arguments on, unchanged",
            got=f"{wrong} calls with other arguments",
        ),
    ]
    return rows + _sample_size_rows(kind, (float(cost_a), float(cost_b)), float(first_a), calls, runs, wall)


def _sample_size_rows(
    kind: str, costs: tuple[float, float], first_a: float, calls: list[int], runs: list[tuple[int, int]], wall: float
) -> list[Comparison]:
    """t4's stated sample size, on the driver's own counts: a warm-up and ``SAMPLES_MIN`` samples of at least
    ``calls_per_sample(cost)`` calls each (in all; and, where a sync() was handed, sample by sample: the calls of one
    function between two syncs), and the calls must fit the time the learner's function took."""
    rows = []
    for i, (name, cost) in enumerate(zip(("fn_a", "fn_b"), costs)):
        n = calls_per_sample(cost)
        need = 1 + SAMPLES_MIN * n
        rule = (
            f"a warm-up and at least {SAMPLES_MIN} samples of at least {n} call(s) each (an op of "
            f"{cost * 1e6:.3g} us: {n} call(s) last {SAMPLE_MIN_S * 1e6:.0f} us)"
        )
        rows.append(
            _row(
                f"{name}: calls",
                calls[i] >= need,
                f"{calls[i]} calls",
                f"{name} was called {calls[i]} times; {rule} take at least {need}",
                expected=f">= {need}",
                got=calls[i],
            )
        )
        if kind in SYNCED_KINDS:
            full = sum(1 for run in runs if run[i] >= n and run[1 - i] == 0)
            rows.append(
                _row(
                    f"{name}: samples",
                    full >= SAMPLES_MIN,
                    f"{full} samples of >= {n} calls",
                    f"{full} of {name}'s samples (its calls between two sync()s, no other calls) had at least {n} "
                    f"call(s): take {rule}, and call sync() at the end of each sample; a sample of one call times "
                    "the clock, not the op",
                    expected=f">= {SAMPLES_MIN}",
                    got=full,
                )
            )
    if kind not in ("async",):  # spinning workloads: the wall time bounds the number of calls
        spent = (first_a - costs[0] if first_a and calls[0] else 0.0) + calls[0] * costs[0] + calls[1] * costs[1]
        rows.append(
            _row(
                "time spent",
                wall >= 0.9 * spent,
                "consistent with the calls",
                "the workloads' call counts do not fit the time the call took",
                expected=f">= {0.9 * spent:.3g} s",
                got=f"{wall:.3g} s",
            )
        )
    return rows
