"""The GPU comparisons that `torchcontracts record` runs: each lesson's model, ceiling or demo, on the real device.

A lesson's CPU path teaches with a model or a small figure; on a GPU the same idea is measured for real
and kept in the GPU record, so a learner on a CPU sees the recorded figure beside their own
(``torchcontracts.publish.record.recorded``). Each comparison is a function that returns an :class:`Outcome`
(ok or not, one line of detail, and named figures), registered with :func:`comparison`.

To add one for a lesson: write the function in the lesson's own helper module, decorate it with
``@comparison("area.name", lesson="05", what="...")``, and add the module's name to :data:`MODULES`, which
``record`` imports before it runs the registry. A module's comparison replaces a built-in one of the
same name (the built-in roofline measurement below stands in until lesson 04's helper registers its own).
Figure keys read ``area.quantity_unit`` (``roofline.hbm_GBps``); lessons look them up by that key.

None of the CUDA code here has run on a GPU in this repository's history until a record says so:
the device and date of every figure are in the record itself.
"""

from __future__ import annotations

import dataclasses
import importlib
import statistics
import time
from typing import Any, Callable, Mapping

import torch

__all__ = [
    "MODULES",
    "REGISTRY",
    "Comparison",
    "Measured",
    "Outcome",
    "comparison",
    "copy_bandwidth",
    "figures_of",
    "launch_returns_early",
    "load_modules",
    "matmul_throughput",
    "roofline_plausible",
    "run_all",
    "streams_overlapped",
]

# Lesson helper modules that register comparisons when imported (missing ones are skipped: a lesson not written yet).
MODULES: tuple[str, ...] = ("torchcontracts.lessons.l04_async.roofline",)


@dataclasses.dataclass(frozen=True)
class Measured:
    """One figure: a number, its unit, and what was measured (a short phrase)."""

    value: float
    unit: str
    what: str


@dataclasses.dataclass(frozen=True)
class Outcome:
    """What one comparison found: ``ok`` (the model agreed, or the demo behaved as the lesson says)."""

    ok: bool
    detail: str
    figures: dict[str, Measured] = dataclasses.field(default_factory=dict)


@dataclasses.dataclass(frozen=True)
class Comparison:
    """A registered GPU comparison: its name, the lesson that defines it, and the function that measures."""

    name: str
    lesson: str
    what: str
    fn: Callable[[], Outcome]


REGISTRY: dict[str, Comparison] = {}


def comparison(name: str, *, lesson: str, what: str) -> Callable[[Callable[[], Outcome]], Callable[[], Outcome]]:
    """Register ``fn`` as the GPU comparison ``name`` of ``lesson`` ("03"); a later registration replaces it."""

    def register(fn: Callable[[], Outcome]) -> Callable[[], Outcome]:
        REGISTRY[name] = Comparison(name, lesson, what, fn)
        return fn

    return register


def load_modules(modules: tuple[str, ...] | None = None) -> list[str]:
    """Import the lesson modules that register comparisons (default :data:`MODULES`); return those not there yet."""
    missing = []
    for name in MODULES if modules is None else modules:
        try:
            importlib.import_module(name)
        except ModuleNotFoundError as err:
            if err.name != name:  # the module exists but one of its imports is missing: that is a bug
                raise
            missing.append(name)
    return missing


def run_all(
    names: list[str] | None = None, deadline: float | None = None, progress: bool = True
) -> dict[str, dict[str, Any]]:
    """Run the registered comparisons (or ``names``); a failure is recorded with its reason, never raised.

    Returns ``{name: {"lesson", "what", "ok", "detail", "seconds", "figures": {key: {"value", "unit", "what"}}}}``.
    ``deadline`` is a ``time.monotonic()`` value; comparisons not started by then are recorded as not run.
    """
    from tqdm.auto import tqdm

    chosen = [REGISTRY[n] for n in (names if names is not None else sorted(REGISTRY))]
    out: dict[str, dict[str, Any]] = {}
    for comp in tqdm(chosen, desc="GPU comparisons", unit="check", disable=not progress):
        entry: dict[str, Any] = {"lesson": comp.lesson, "what": comp.what, "figures": {}}
        if deadline is not None and time.monotonic() > deadline:
            out[comp.name] = {**entry, "ok": False, "detail": "not run: the time budget ran out", "seconds": 0.0}
            continue
        start = time.perf_counter()
        try:
            res = comp.fn()
            entry.update(
                ok=bool(res.ok), detail=res.detail, figures={k: dataclasses.asdict(m) for k, m in res.figures.items()}
            )
        except Exception as err:  # a comparison that breaks is a finding, not a crash of the whole record
            lines = str(err).strip().splitlines() or [""]
            entry.update(ok=False, detail=f"failed: {type(err).__name__}: {lines[0][:200]}")
        entry["seconds"] = round(time.perf_counter() - start, 2)
        out[comp.name] = entry
    return out


# -- timing plumbing: CUDA events on a GPU, perf_counter on a CPU (so the tests can run the same code) -------
def _seconds_per_call(fn: Callable[[], Any], device: torch.device, repeats: int) -> float:
    """Median seconds of ``fn()`` over ``repeats`` calls after one warm-up, timed on the device's own clock."""
    fn()
    times = []
    for _ in range(repeats):
        if device.type == "cuda":
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            fn()
            end.record()
            end.synchronize()
            times.append(start.elapsed_time(end) / 1e3)
        else:
            t0 = time.perf_counter()
            fn()
            times.append(time.perf_counter() - t0)
    return statistics.median(times)


def copy_bandwidth(device: str | torch.device = "cuda", nbytes: int = 1 << 30, repeats: int = 10) -> float:
    """GB/s of a device-to-device ``copy_``, counting the bytes read plus the bytes written."""
    dev = torch.device(device)
    src = torch.empty(nbytes, dtype=torch.uint8, device=dev)
    dst = torch.empty_like(src)
    secs = _seconds_per_call(lambda: dst.copy_(src), dev, repeats)
    return 2 * nbytes / secs / 1e9


def matmul_throughput(
    device: str | torch.device = "cuda", n: int = 8192, dtype: torch.dtype = torch.bfloat16, repeats: int = 10
) -> float:
    """TFLOP/s of an ``n x n`` by ``n x n`` matmul (2 n^3 flops)."""
    dev = torch.device(device)
    a = torch.randn(n, n, device=dev, dtype=dtype)
    b = torch.randn(n, n, device=dev, dtype=dtype)
    secs = _seconds_per_call(lambda: a @ b, dev, repeats)
    return 2 * n**3 / secs / 1e12


# -- the built-in comparisons --------------------------------------------------------------------------------
_ALLOC_TRACES = {
    "mixed": "alloc a 1000\nalloc b 1MiB\nalloc c 1.5MiB\nalloc d 12MiB\nfree b\nalloc e 700KiB\nfree c\nfree d\n"
    "empty_cache",
    "small pool": "alloc a 512\nalloc b 1\nalloc c 1MiB\nfree a\nalloc d 256\nfree b\nfree c\nalloc e 1MiB\n"
    "reset_peak\nfree d\nfree e\nempty_cache",
    "large rounding": "alloc a 19.5MiB\nalloc b 10MiB\nalloc c 10.5MiB\nfree a\nalloc d 2MiB\nfree b\nfree c\n"
    "free d\nempty_cache",
}


@comparison(
    "alloc.model_vs_real",
    lesson="03",
    what="the allocator model against the real caching allocator, op by op, in fresh processes",
)
def _alloc_model_vs_real() -> Outcome:
    from torchcontracts.lessons.l03_memory.alloc import MiB, Config
    from torchcontracts.lessons.l03_memory.alloc_viz import (
        fragmentation_trace,
        fresh_cuda_report,
        mismatches,
        report_model,
    )

    frag = fragmentation_trace(8, 6.0, "every other", 12.0)
    traces = {**_ALLOC_TRACES, "fragmentation": frag}
    problems, steps = [], 0
    for conf, config in (("", Config()), ("max_split_size_mb:20", Config(max_split_size=20 * MiB))):
        real = fresh_cuda_report(traces, conf)
        for name, trace in traces.items():
            model = report_model(trace, config)
            steps += len(model["steps"])
            problems += [f"{name} [{conf or 'default'}] {p}" for p in mismatches(real[name], model)]
    detail = (
        f"the model predicted every one of {steps} steps ({len(traces)} traces, 2 settings)"
        if not problems
        else f"{len(problems)} mismatches, first: {'; '.join(problems[:3])}"
    )
    return Outcome(
        not problems,
        detail,
        {
            "alloc.steps_compared": Measured(steps, "steps", "allocator steps compared, model vs real"),
            "alloc.mismatches": Measured(
                len(problems), "mismatches", "steps where the model and the real allocator differ"
            ),
        },
    )


# -- the verdicts: pure functions of the measured figures, so a test can feed them figures that must fail ----------

BANDWIDTH_GBPS = (100.0, 20_000.0)  # any CUDA GPU's memory: past a laptop's GDDR, short of any HBM yet (H200: 4,800)
TFLOPS = (0.5, 10_000.0)  # a large GEMM on any CUDA GPU (H200 datasheet: 67 fp32, 989 dense bf16)
LAUNCH_SHARE = 0.1  # a launch that returns before its kernel ends takes well under a tenth of the synced time
OVERLAP_RATIO = 0.95  # overlapped / serial: copy and compute overlapped only if the total clearly shrank


def roofline_plausible(hbm_GBps: float, copy_GBps: float, fp32_TFLOPs: float, bf16_TFLOPs: float) -> bool:
    """Both bandwidths in a band any CUDA GPU falls in and within 2x of each other (two ways to measure the same
    memory), and both GEMM rates in a plausible band. A wrong byte count, a timer that missed the kernel
    (host time without a synchronize) or a unit slip (GB/s read as B/s) lands outside."""
    lo, hi = BANDWIDTH_GBPS
    return (
        lo <= hbm_GBps <= hi
        and lo <= copy_GBps <= hi
        and 0.5 <= hbm_GBps / copy_GBps <= 2.0
        and all(TFLOPS[0] <= r <= TFLOPS[1] for r in (fp32_TFLOPs, bf16_TFLOPs))
    )


def launch_returns_early(launch_s: float, done_s: float) -> bool:
    """The call returned in under LAUNCH_SHARE of the time the kernel took to finish (both from the same start):
    False for a synchronous launch, which returns only when the kernel is done (launch close to done)."""
    return 0 < launch_s < LAUNCH_SHARE * done_s


def streams_overlapped(serial_s: float, overlapped_s: float) -> bool:
    """The side-stream version took under OVERLAP_RATIO of the one-stream time: False when the copy and the
    matmuls ran one after the other anyway (ratio about 1, or above)."""
    return serial_s > 0 and overlapped_s / serial_s < OVERLAP_RATIO


@comparison("roofline.ceilings", lesson="04", what="the GPU's memory-bandwidth and matmul ceilings")
def _roofline_ceilings() -> Outcome:
    """Lesson 04's own ``roofline.measure_ceilings("cuda")`` (a triad) where it exists, plus a plain copy."""
    copy = copy_bandwidth("cuda", 1 << 30)
    figures = {"roofline.copy_GBps": Measured(copy, "GB/s", "device-to-device copy_ of 1 GiB, read + write")}
    try:
        from torchcontracts.lessons.l04_async.roofline import measure_ceilings
    except ImportError:  # lesson 04's helper is not there: measure the same ceilings here
        hbm, bf16 = copy, matmul_throughput("cuda", 8192, torch.bfloat16)
        old = torch.backends.cuda.matmul.allow_tf32
        torch.backends.cuda.matmul.allow_tf32 = False
        try:
            fp32 = matmul_throughput("cuda", 4096, torch.float32)
        finally:
            torch.backends.cuda.matmul.allow_tf32 = old
        how = "copy_ of 1 GiB, read + write"
    else:
        ceil = measure_ceilings("cuda")
        hbm, bf16, fp32 = ceil.bandwidth / 1e9, ceil.flops["bfloat16"] / 1e12, ceil.flops["float32"] / 1e12
        how = "triad a = b + s*c over 1 GiB arrays, 3 streams counted (lesson 04's measure_ceilings)"
    figures.update(
        {
            "roofline.hbm_GBps": Measured(hbm, "GB/s", how),
            "roofline.bf16_TFLOPs": Measured(bf16, "TFLOP/s", "large bf16 matmul"),
            "roofline.fp32_TFLOPs": Measured(fp32, "TFLOP/s", "large fp32 matmul, TF32 off"),
            "roofline.ridge_bf16_flop_per_byte": Measured(bf16 * 1e3 / hbm, "flop/byte", "bf16 ceiling over bandwidth"),
        }
    )
    return Outcome(
        roofline_plausible(hbm, copy, fp32, bf16),
        f"bandwidth {hbm:,.0f} GB/s ({how}), copy {copy:,.0f} GB/s, bf16 matmul {bf16:,.0f} TFLOP/s, "
        f"fp32 {fp32:,.1f} TFLOP/s; ridge point {bf16 * 1e3 / hbm:,.0f} flop/byte (bf16)",
        figures,
    )


@comparison(
    "async.launch_returns_early",
    lesson="04",
    what="a CUDA launch returns before its kernel ends: a host timer without synchronize times the launch",
)
def _async_launch() -> Outcome:
    a = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
    (a @ a).sum().item()  # warm-up: cuBLAS handle and workspace
    rows = []
    for _ in range(5):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        c = a @ a
        launched = time.perf_counter() - t0
        torch.cuda.synchronize()
        done = time.perf_counter() - t0
        rows.append((launched, done))
        del c
    launch, done = statistics.median(r[0] for r in rows), statistics.median(r[1] for r in rows)
    return Outcome(
        launch_returns_early(launch, done),
        f"the call returned after {launch * 1e6:,.0f} us; the matmul ended after {done * 1e3:,.2f} ms "
        f"(medians of 5; asynchronous if the return took under {LAUNCH_SHARE:.0%} of that)",
        {
            "async.launch_us": Measured(launch * 1e6, "us", "host time until a bf16 8192^3 matmul call returns"),
            "async.matmul_synced_ms": Measured(done * 1e3, "ms", "the same matmul timed with a synchronize"),
        },
    )


@comparison(
    "streams.copy_compute_overlap",
    lesson="04",
    what="a pinned host-to-device copy on a side stream runs beside matmuls on the default stream",
)
def _stream_overlap() -> Outcome:
    host = torch.empty(256 << 20, dtype=torch.uint8).pin_memory()
    dev = torch.empty_like(host, device="cuda")
    a = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
    side = torch.cuda.Stream()

    def serial() -> None:
        dev.copy_(host, non_blocking=True)
        for _ in range(4):
            a @ a

    def overlapped() -> None:
        with torch.cuda.stream(side):
            dev.copy_(host, non_blocking=True)
        for _ in range(4):
            a @ a
        torch.cuda.current_stream().wait_stream(side)

    def timed(fn: Callable[[], None]) -> float:
        fn()
        torch.cuda.synchronize()
        runs = []
        for _ in range(5):
            t0 = time.perf_counter()
            fn()
            torch.cuda.synchronize()
            runs.append(time.perf_counter() - t0)
        return statistics.median(runs)

    s, o = timed(serial), timed(overlapped)
    return Outcome(
        streams_overlapped(s, o),
        f"copy then 4 matmuls: {s * 1e3:.2f} ms on one stream, "
        f"{o * 1e3:.2f} ms with the copy on a side stream ({o / s:.2f}x; overlap if below {OVERLAP_RATIO})",
        {
            "streams.serial_ms": Measured(s * 1e3, "ms", "256 MiB pinned H2D copy then 4 bf16 matmuls, one stream"),
            "streams.overlapped_ms": Measured(o * 1e3, "ms", "the same with the copy on a side stream"),
            "streams.overlap_ratio": Measured(
                o / s, "x", "overlapped time over serial time (below 1: they overlapped)"
            ),
        },
    )


def figures_of(result: Mapping[str, Any], units: Mapping[str, str] | None = None) -> dict[str, Measured]:
    """Turn a lesson helper's ``{key: number}`` (or ``{key: (number, unit)}``) into figures, for an adapter."""
    out = {}
    for key, val in result.items():
        value, unit = val if isinstance(val, tuple) else (val, (units or {}).get(key, ""))
        out[key] = Measured(float(value), unit, key)
    return out
