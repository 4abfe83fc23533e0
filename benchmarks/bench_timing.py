"""Does ``time_fn`` survive a busy core? (a script, not a test: it prints, it asserts nothing)

    python3 benchmarks/bench_timing.py [--min-run-time 0.2] [--busy 1] [--repeat 1]

Times ``x + 1``, ``x.sum(1)``, ``x.clone()`` (x a 1000x1000 and a 64x64 float32) and a transposed
1000x1000 ``+ 1``, first on the machine as it is ("quiet"), then with --busy cores kept busy by
``python3 -c "while True: pass"`` processes (killed afterwards). For each op it prints the quiet
and the busy figure of ``time_fn``, busy/quiet (``Timing.ratio``: None when either is noisy), and
what the old helper (the median of ``torch.utils.benchmark.Timer.blocked_autorange``) printed under
the same load. The requirement: under load, every figure is within 25% of the quiet one or the
"noisy" message; a scheduler quantum is never printed as a figure.

The "quiet" phase is only as quiet as the machine: its load average is printed with each phase;
if the quiet figure is itself noisy the row can't be compared, and says so. Runs in well under
two minutes with the defaults.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from typing import Any, Callable

import torch
import torch.utils.benchmark as benchmark

from torchcontracts.core.timing import NOISY, Timing, _human, time_fn

TOLERANCE = 0.25


def ops() -> dict[str, Callable[[], Any]]:
    big, small = torch.randn(1000, 1000), torch.randn(64, 64)
    big_t = big.t()
    return {
        "1000x1000 x + 1": lambda: big + 1,
        "1000x1000 x.sum(1)": lambda: big.sum(1),
        "1000x1000 x.clone()": lambda: big.clone(),
        "1000x1000 x.t() + 1": lambda: big_t + 1,
        "64x64 x + 1": lambda: small + 1,
        "64x64 x.sum(1)": lambda: small.sum(1),
        "64x64 x.clone()": lambda: small.clone(),
    }


def old_median(fn: Callable[[], Any], min_run_time: float) -> float:
    """What the helper printed before: the median of Timer.blocked_autorange, whatever the load."""
    timer = benchmark.Timer(stmt="fn()", globals={"fn": fn}, num_threads=torch.get_num_threads())
    return timer.blocked_autorange(min_run_time=min_run_time).median


def phase(name: str, min_run_time: float) -> tuple[dict[str, Timing], dict[str, float]]:
    load0 = os.getloadavg()
    t0 = time.perf_counter()
    new = {label: time_fn(fn, label=label, min_run_time=min_run_time) for label, fn in ops().items()}
    old = {label: old_median(fn, min_run_time) for label, fn in ops().items()}
    load1 = os.getloadavg()
    print(
        f"{name}: {time.perf_counter() - t0:.1f} s, load average before {_load(load0)}, after {_load(load1)}, "
        f"{torch.get_num_threads()} torch threads, {os.cpu_count()} CPUs"
    )
    return new, old


def _load(avg: tuple[float, float, float]) -> str:
    return "/".join(f"{a:.2f}" for a in avg)


def figure(t: Timing) -> str:
    return "noisy" if t.noisy else _human(t.median_s)


def verdict(quiet: Timing, busy: Timing) -> str:
    if busy.noisy:
        return "ok: says noisy"
    if quiet.noisy:
        return "can't compare: quiet run noisy"
    ratio = busy.ratio(quiet)
    assert ratio is not None
    return f"ok: within {TOLERANCE:.0%}" if abs(ratio - 1) <= TOLERANCE else f"NOT MET: {ratio:.2f}x"


def report(quiet: dict[str, Timing], busy: dict[str, Timing], old_q: dict[str, float], old_b: dict[str, float]) -> None:
    head = f"{'op':22} {'quiet':>9} {'busy':>9} {'busy/quiet':>10}  {'requirement':32} {'old quiet':>9} {'old busy':>9} {'old b/q':>7}"
    print(head)
    print("-" * len(head))
    for label in quiet:
        q, b = quiet[label], busy[label]
        r = b.ratio(q)
        print(
            f"{label:22} {figure(q):>9} {figure(b):>9} {'noisy' if r is None else f'{r:.2f}':>10}  "
            f"{verdict(q, b):32} {_human(old_q[label]):>9} {_human(old_b[label]):>9} {old_b[label] / old_q[label]:7.2f}"
        )
    print()
    for name, timings in (("quiet", quiet), ("busy", busy)):
        for t in timings.values():
            print(f"  {name:5} {t}  [cpu/wall {t.cpu_wall_ratio:.2f}]")
    met = all(verdict(quiet[k], busy[k]).startswith("ok") for k in quiet)
    print(
        f"\nrequirement (busy figure within {TOLERANCE:.0%} of quiet, or '{NOISY}'): "
        f"{'met' if met else 'NOT MET or not comparable'} on every row"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--min-run-time", type=float, default=0.2)
    parser.add_argument("--busy", type=int, default=1, help="how many cores to keep busy")
    parser.add_argument("--repeat", type=int, default=1, help="quiet/busy pairs to run")
    opts = parser.parse_args()
    print(f"torch {torch.__version__}, python {sys.version.split()[0]}")
    for i in range(opts.repeat):
        quiet, old_q = phase(f"[{i + 1}] quiet", opts.min_run_time)
        hogs = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(opts.busy)]
        try:
            time.sleep(0.5)
            busy, old_b = phase(f"[{i + 1}] busy ({opts.busy} core(s) spinning)", opts.min_run_time)
        finally:
            for hog in hogs:
                hog.kill()
                hog.wait()
        report(quiet, busy, old_q, old_b)
        print()


if __name__ == "__main__":
    main()
