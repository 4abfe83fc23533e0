"""Lab 04's timing judges (t1 ``bench``, t4 ``speedup``): what a driver's record must show to pass.

They run in the grader's own process on the plain tensors that ``run_bench`` and ``run_speedup`` (in
``lab04_timing``, which re-exports ``judge_bench`` and ``judge_speedup``) return, and check structure
and ratios, never absolute speed: a warm-up, calls that add up, a median not below the work's known
cost, seconds per call, and two workloads' fastest samples in their known ratio. A judge never raises
on an odd answer: it returns a failing row.
"""

from __future__ import annotations

import math
import statistics
from typing import Any

from torchcontracts.checks import Case, Comparison
from torchcontracts.checks.comparison import not_a_result as _not_a_result
from torchcontracts.lessons.l04_async.workloads import first_unless_the_retry_passes

__all__ = ["SAMPLE_MIN_S", "judge_bench", "judge_speedup"]

SAMPLE_MIN_S = 1e-4  # a timed sample shorter than this measures the clock, not the op


def _num(v: Any) -> float:
    try:
        x = float(v)
    except (TypeError, ValueError, RuntimeError, OverflowError):
        return math.nan
    return x


def _row(name: str, ok: bool, good: str, bad: str, **kw: Any) -> Comparison:
    return Comparison.plain(name, ok, good if ok else bad, **kw)


# --- t1 bench(fn, *args, sync=None) ---------------------------------------------------------------


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


# --- t4 speedup(fn_a, fn_b, *args, sync=None) ----------------------------------------------------


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
