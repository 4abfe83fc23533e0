"""Measure this machine's roofline (memory bandwidth and GEMM FLOP/s) and place kernels on it (lesson 04).

A roofline needs two ceilings: how many bytes per second memory delivers (a triad over arrays
well past the last-level cache, so the caches cannot help) and how many FLOP/s the arithmetic
units reach (a large GEMM). ``measure_ceilings`` measures both on the CPU, or on a CUDA device
with events, and cross-checks the CPU figures against an independent implementation (NumPy's
copy and NumPy's GEMM, run like for like). Ceilings are the *best* of a few repeats, because
contention only ever adds time; when another process took the CPUs meanwhile, ``Ceilings.noisy``
says so and the figures are lower bounds.

``Kernel`` holds what one op did (FLOPs, bytes, seconds); ``roofline_plot`` draws the roof and
the kernels with their % of the ceiling at their arithmetic intensity. Everything draws headless
(any matplotlib backend, Agg included). The teaching part, counting FLOPs and bytes, stays in
the notebook.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import math
import os
import time
from pathlib import Path
from typing import Any, Callable, Iterator, Sequence

import numpy as np
import torch

from torchcontracts.core.timing import WAIT_MAX, _waited

__all__ = [
    "Ceilings",
    "Kernel",
    "bf16_native",
    "last_level_cache_bytes",
    "machine_label",
    "measure_ceilings",
    "roofline_plot",
    "tf32_off",
]

MiB = 1 << 20
CPU_ARRAY_MIN = 64 * MiB  # per array: past any desktop LLC even when the sysfs size is unknown
CPU_ARRAY_MAX = 256 * MiB
CPU_GEMM_N = 1536  # 7.2 GFLOP per call: near the peak on 2 cores, 70 ms at 100 GFLOP/s
CUDA_ARRAY_BYTES = 1 << 30
CUDA_GEMM_N = 8192
SETTLE_S = 0.25  # idle pause between two libraries' blocks, so neither one's spinning threads remain
BF16_PROBE_N = 128  # without bf16 units torch falls back to a scalar loop: probe small, never as a ceiling


def last_level_cache_bytes() -> int | None:
    """The largest CPU cache this machine reports (Linux sysfs), or None when unknown."""
    sizes = []
    for path in Path("/sys/devices/system/cpu/cpu0/cache").glob("index*/size"):
        try:
            text = path.read_text().strip().upper()
            sizes.append(int(text.rstrip("KMG")) * {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}.get(text[-1], 1))
        except (OSError, ValueError, IndexError):
            continue
    return max(sizes) if sizes else None


def bf16_native() -> bool:
    """Whether this CPU has bf16 matrix units (AVX512-BF16 or AMX), so a bf16 GEMM is a real ceiling."""
    probes = ("_is_avx512_bf16_supported", "_is_amx_tile_supported")
    return any(bool(getattr(torch.cpu, name, lambda: False)()) for name in probes)


@dataclasses.dataclass(frozen=True)
class Ceilings:
    """What this device delivers at best: bytes/s (triad, 3 streams counted) and GEMM FLOP/s per dtype.

    ``checks`` holds the independent cross-check (NumPy) beside torch's figure, like for like;
    ``noisy`` is "" on a quiet machine, else why the figures are only lower bounds.
    """

    device: str
    threads: int
    bandwidth: float  # bytes/s of a triad a = b + s*c: 2 reads + 1 write per element
    flops: dict[
        str, float
    ]  # FLOP/s of a large GEMM by dtype name ("float32", "bfloat16"); fp32: torch's or NumPy's, the faster
    checks: dict[str, tuple[float, float]] = dataclasses.field(default_factory=dict)  # name -> (torch, numpy)
    sizes: dict[str, int] = dataclasses.field(default_factory=dict)
    noisy: str = ""
    notes: tuple[str, ...] = ()
    torch_version: str = torch.__version__

    @property
    def peak(self) -> float:
        """The fp32 FLOP/s ceiling (the roof of an fp32 roofline)."""
        return self.flops["float32"]

    def ridge(self, dtype: str = "float32") -> float:
        """FLOPs per byte where the memory roof meets the compute roof."""
        return self.flops[dtype] / self.bandwidth

    def attainable(self, intensity: float, dtype: str = "float32") -> float:
        """The roofline: min(peak, bandwidth x intensity) FLOP/s."""
        return min(self.flops[dtype], self.bandwidth * intensity)

    def ratios(self) -> dict[str, float]:
        """torch / NumPy for each cross-check: about 1 when both measure the same hardware limit."""
        return {name: t / n for name, (t, n) in self.checks.items() if n > 0}

    def to_json(self) -> str:
        """The figures as JSON (to record a GPU's roofline beside a CPU learner's)."""
        return json.dumps(dataclasses.asdict(self), indent=2)

    @classmethod
    def from_json(cls, text: str) -> Ceilings:
        data = json.loads(text)
        data["checks"] = {k: tuple(v) for k, v in data.get("checks", {}).items()}
        data["notes"] = tuple(data.get("notes", ()))
        return cls(**data)


@dataclasses.dataclass(frozen=True)
class Kernel:
    """One op as measured: its FLOPs, the bytes it must move, and its seconds per call."""

    name: str
    flops: float
    bytes: float
    seconds: float
    noisy: bool = False  # the time came from a contended measurement (its fastest block)

    @property
    def intensity(self) -> float:
        """Arithmetic intensity, FLOPs per byte moved."""
        return self.flops / self.bytes

    @property
    def achieved(self) -> float:
        """FLOP/s this kernel reached."""
        return self.flops / self.seconds

    def percent_of_ceiling(self, ceilings: Ceilings, dtype: str = "float32") -> float:
        """Achieved FLOP/s as a % of the roofline at this kernel's intensity."""
        return 100 * self.achieved / ceilings.attainable(self.intensity, dtype)

    def bound(self, ceilings: Ceilings, dtype: str = "float32") -> str:
        """ "memory" left of the ridge point, "compute" right of it."""
        return "memory" if self.intensity < ceilings.ridge(dtype) else "compute"


# -- measuring -----------------------------------------------------------------------------------


def _best(*fns: Callable[[], Any], repeats: int) -> list[float]:
    """Fastest of ``repeats`` timed calls of each fn after one warm-up (contention and page faults only add time).

    Each fn gets its own block after a pause: interleaved, one library's worker threads still spin after
    its call and take the cores from the other's (OpenBLAS beside torch's OpenMP pool halved torch's GEMM).
    """
    best = []
    for fn in fns:
        if len(fns) > 1:
            time.sleep(SETTLE_S)
        fn()
        fastest = math.inf
        for _ in range(repeats):
            t0 = time.perf_counter()
            fn()
            fastest = min(fastest, time.perf_counter() - t0)
        best.append(fastest)
    return best


def _best_cuda(fn: Callable[[], Any], repeats: int) -> float:
    """Fastest of ``repeats`` calls timed with CUDA events (GPU time, not host time)."""
    fn()
    torch.cuda.synchronize()
    best = math.inf
    for _ in range(repeats):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        end.synchronize()
        best = min(best, start.elapsed_time(end) / 1e3)
    return best


def _gemm_rate(n: int, dtype: torch.dtype, device: str, repeats: int) -> float:
    a = torch.randn(n, n, device=device).to(dtype)
    b = torch.randn(n, n, device=device).to(dtype)
    seconds = _best_cuda(lambda: a @ b, repeats) if device != "cpu" else _best(lambda: a @ b, repeats=repeats)[0]
    return 2 * n**3 / seconds


def _with_threads(n: int, fn: Callable[[], Any]) -> Any:
    before = torch.get_num_threads()
    torch.set_num_threads(n)
    try:
        return fn()
    finally:
        torch.set_num_threads(before)


def _contention(wall: float, cpu0: float, waited0: float | None) -> str:
    """Why the measurement ran on a busy machine, or "" (run-queue wait, else CPU share of wall time)."""
    waited1 = _waited()
    if waited0 is not None and waited1 is not None and (waited1 - waited0) / wall > WAIT_MAX:
        return (
            f"threads waited for a free CPU for {(waited1 - waited0) / wall:.2f}x the wall time: another "
            "process is busy, so these ceilings are lower bounds (rerun on a quiet machine)"
        )
    share = (time.process_time() - cpu0) / wall
    if share < 0.5:  # memory-bound phases idle some cores, so only a gross shortfall counts
        return f"this process ran on a CPU for only {share:.0%} of the wall time: the figures are lower bounds"
    return ""


def measure_ceilings(
    device: str | None = None,
    *,
    array_bytes: int | None = None,
    gemm_n: int | None = None,
    repeats: int = 4,
    numpy_check: bool = True,
) -> Ceilings:
    """This device's bandwidth and GEMM ceilings, best of ``repeats`` after a warm-up.

    CPU: a triad over three arrays of ``array_bytes`` (default 4x the last-level cache, 64-256 MiB),
    fp32 GEMM of ``gemm_n`` (and bf16 where the CPU has bf16 units), and, with ``numpy_check``,
    NumPy's copy and GEMM beside torch's, like for like (copy on one thread: NumPy's is single-threaded);
    the fp32 roof is then the faster GEMM of the two, since the roof is the hardware's, not one library's.
    CUDA (``device="cuda"``): the same triad, plus fp32 and bf16 GEMMs, timed with CUDA events.
    """
    dev = device or "cpu"
    if dev.startswith("cuda"):
        return _measure_cuda(dev, array_bytes or CUDA_ARRAY_BYTES, gemm_n or CUDA_GEMM_N, repeats)
    llc = last_level_cache_bytes()
    size = array_bytes or min(max(4 * (llc or 0), CPU_ARRAY_MIN), CPU_ARRAY_MAX)
    n = gemm_n or CPU_GEMM_N
    threads = torch.get_num_threads()
    wall0, cpu0, waited0 = time.perf_counter(), time.process_time(), _waited()
    a, b, c = (torch.rand(size // 4) for _ in range(3))
    (triad,) = _best(lambda: torch.add(b, c, alpha=3.0, out=a), repeats=repeats)  # noqa: F821 - ruff reads the later `del` as unbinding them
    checks: dict[str, tuple[float, float]] = {}
    notes = [
        f"triad over 3 arrays of {size / MiB:.0f} MiB (last-level cache: "
        f"{'unknown' if llc is None else f'{llc / MiB:.0f} MiB'}); fp32 GEMM {n}x{n}x{n}; {threads} threads"
    ]
    x, y = torch.randn(n, n), torch.randn(n, n)
    if numpy_check:
        an, bn, xn, yn = a.numpy(), b.numpy(), x.numpy(), y.numpy()
        copies = _with_threads(1, lambda: _best(lambda: a.copy_(b), lambda: np.copyto(an, bn), repeats=repeats))  # noqa: F821 - ruff reads the later `del` as unbinding them
        checks["copy, 1 thread (GB/s)"] = (2 * size / copies[0] / 1e9, 2 * size / copies[1] / 1e9)
        gemms = _best(lambda: x @ y, lambda: xn @ yn, repeats=repeats)
        checks["fp32 GEMM (GFLOP/s)"] = (2 * n**3 / gemms[0] / 1e9, 2 * n**3 / gemms[1] / 1e9)
        flops = {"float32": 2 * n**3 / min(gemms)}  # the roof is what this hardware demonstrably reaches
        if gemms[0] > gemms[1]:
            notes.append(
                f"fp32 roof from NumPy's BLAS ({2 * n**3 / gemms[1] / 1e9:.3g} GFLOP/s), faster here than torch's "
                f"GEMM ({2 * n**3 / gemms[0] / 1e9:.3g}): torch's kernels can reach at most that roof"
            )
    else:
        flops = {"float32": _gemm_rate(n, torch.float32, "cpu", repeats)}
    if bf16_native():
        flops["bfloat16"] = _gemm_rate(n, torch.bfloat16, "cpu", repeats)
    else:
        probe = _gemm_rate(BF16_PROBE_N, torch.bfloat16, "cpu", 1)
        notes.append(
            f"bf16: this CPU has no AVX512-BF16/AMX units; a {BF16_PROBE_N}^3 bf16 GEMM ran at "
            f"{probe / 1e9:.2g} GFLOP/s (a fallback loop, not a ceiling), so no bf16 roof is drawn"
        )
    del a, b, c
    noisy = _contention(time.perf_counter() - wall0, cpu0, waited0)
    return Ceilings(
        "cpu", threads, 3 * size / triad, flops, checks, {"array_bytes": size, "gemm_n": n}, noisy, tuple(notes)
    )


@contextlib.contextmanager
def tf32_off() -> Iterator[dict[str, bool]]:
    """fp32 as fp32 inside the block: TF32 off for cuBLAS matmuls and for cuDNN convolutions, restored after.

    torch's defaults differ (matmul TF32 off, cuDNN TF32 on), so an fp32 conv would run on tensor cores while an
    fp32 GEMM roof did not. Yields the flags as they were before. The flags exist, and this runs, on any build.
    """
    before = {"matmul": torch.backends.cuda.matmul.allow_tf32, "cudnn": torch.backends.cudnn.allow_tf32}
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    try:
        yield dict(before)
    finally:
        torch.backends.cuda.matmul.allow_tf32 = before["matmul"]
        torch.backends.cudnn.allow_tf32 = before["cudnn"]


def _measure_cuda(device: str, size: int, n: int, repeats: int) -> Ceilings:
    a, b, c = (torch.rand(size // 4, device=device) for _ in range(3))
    triad = _best_cuda(lambda: torch.add(b, c, alpha=3.0, out=a), repeats)  # noqa: F821 - ruff reads the later `del` as unbinding them
    copy = _best_cuda(lambda: a.copy_(b), repeats)  # noqa: F821 - ruff reads the later `del` as unbinding them
    del a, b, c
    with tf32_off():  # an fp32 roof: TF32 would make it a tensor-core roof (place fp32 kernels inside tf32_off too)
        fp32 = _gemm_rate(n, torch.float32, device, repeats)
    flops = {"float32": fp32, "bfloat16": _gemm_rate(n, torch.bfloat16, device, repeats)}
    name = torch.cuda.get_device_name(device)
    notes = (
        f"{name}: triad and copy over arrays of {size / MiB:.0f} MiB; GEMM {n}^3; CUDA events; "
        f"fp32 GEMM with TF32 off; device-to-device copy {2 * size / copy / 1e12:.2f} TB/s",
    )
    return Ceilings(f"{device} ({name})", 1, 3 * size / triad, flops, {}, {"array_bytes": size, "gemm_n": n}, "", notes)


# -- drawing -------------------------------------------------------------------------------------


def roofline_plot(
    kernels: Sequence[Kernel], ceilings: Ceilings, ax: Any = None, title: str = "", extra: Sequence[Ceilings] = ()
) -> Any:
    """The roofline (log-log: FLOP/s over FLOPs/byte) with each kernel and its % of the ceiling.

    ``extra`` draws other devices' roofs (dashed), e.g. a GPU's recorded figures beside this CPU's.
    Returns the matplotlib axis; works under any backend, including Agg in tests.
    """
    import matplotlib.pyplot as plt

    if ax is None:
        _, ax = plt.subplots(figsize=(8, 5))
    xs = [k.intensity for k in kernels if k.bytes > 0 and k.seconds > 0]
    lo = min(xs + [ceilings.ridge() / 100]) / 4
    hi = max(xs + [ceilings.ridge() * 20]) * 4
    grid = np.logspace(math.log10(lo), math.log10(hi), 200)
    for roof, style in [(ceilings, "-"), *((e, "--") for e in extra)]:
        for dtype, rate in roof.flops.items():
            ax.plot(
                grid,
                [min(rate, roof.bandwidth * i) / 1e9 for i in grid],
                style,
                linewidth=1.6 if style == "-" else 1,
                label=f"{roof.device} {dtype}: {roof.bandwidth / 1e9:.3g} GB/s, {rate / 1e9:.3g} GFLOP/s",
            )
    placed = sorted((k for k in kernels if k.bytes > 0 and k.seconds > 0), key=lambda k: k.intensity)
    for n, k in enumerate(placed):
        pct = k.percent_of_ceiling(ceilings)
        ax.scatter(
            [k.intensity],
            [k.achieved / 1e9],
            s=40,
            zorder=3,
            facecolors="none" if k.noisy else None,
            edgecolors="black",
            linewidths=0.8,
        )
        ax.annotate(
            f"{k.name}\n{pct:.0f}%" + (" (noisy)" if k.noisy else ""),
            (k.intensity, k.achieved / 1e9),
            textcoords="offset points",
            xytext=(6, 4) if n % 2 else (6, -20),
            fontsize=8,
        )  # alternate: no overlap
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("arithmetic intensity (FLOPs per byte moved)")
    ax.set_ylabel("GFLOP/s")
    ax.set_title(title or f"roofline of {ceilings.device} ({ceilings.threads} threads)", fontsize=10)
    ax.legend(fontsize=7, loc="upper left")
    ax.grid(True, which="both", alpha=0.25)
    return ax


def machine_label() -> str:
    """A short label of where the figures came from: host name is left out, CPU model and threads kept."""
    model = ""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return f"{model or os.uname().machine}, {torch.get_num_threads()} threads, torch {torch.__version__}"
