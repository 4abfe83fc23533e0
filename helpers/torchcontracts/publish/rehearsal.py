"""``torchcontracts record --rehearsal``: the GPU record's whole run on a CPU, and the progress file both runs write.

A GPU is lent for minutes at a time, so the run that makes the GPU record (``torchcontracts record``) is rehearsed on
a CPU first, in an environment like the GPU machine's (``.ci/gpu-kit/rehearse.sh``): every lesson executes with the
same loop (its CUDA-only cells take their CPU paths), then each GPU comparison's CPU half where it has one
(:data:`CPU_HALVES`); a comparison with none is listed under ``skipped`` with the reason. It writes a record with
``"rehearsal": true`` and its own schema, :data:`~torchcontracts.publish.record_schema.REHEARSAL_SCHEMA`, which
``record.load_record`` refuses (so ``recorded()`` and ``beside()`` never show a CPU figure as a GPU's), and which is
never written into the package. It prints each lesson's time against the record's 8-minute budget and exits 1 when a
lesson fails.

:class:`Progress` is the per-lesson flush both runs share (``--progress FILE``): one JSON line per event, written and
fsynced as it happens, so a run cut off at its limit still says where it stopped::

    {"event": "start", "mode": "gpu" | "rehearsal", "budget_s": 480.0, "torch": "...", "only": [], "time": "...Z"}
    {"event": "begin", "lesson": "03_memory_contracts.ipynb", "elapsed": 41.2}
    {"event": "lesson", "lesson": "03_memory_contracts.ipynb", "status": "ok" | "failed" | "not run",
     "seconds": 30.5, "elapsed": 71.7, "claims": 9, "error": "", "verdicts": {"C019": "false", ...}}
    {"event": "comparison", "name": "roofline.ceilings", "lesson": "04", "status": "ok" | "failed" | "skipped",
     "seconds": 2.1, "elapsed": 300.4, "detail": "..."}
    {"event": "end", "status": "ok" | "failed", "elapsed": 310.0, "exit": 0, "record": "/path/to/record.json",
     "failed": ["09_distributed.ipynb"]}
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import tempfile
import time
from pathlib import Path
from typing import Any, Callable

from torchcontracts.publish.record_schema import assemble, validate

__all__ = [
    "CPU_HALVES",
    "PROGRESS_EVENTS",
    "REHEARSAL_FILE",
    "Progress",
    "cpu_device",
    "load_rehearsal",
    "run",
    "run_cpu_halves",
    "run_lessons_logged",
]

REHEARSAL_FILE = "torchcontracts-gpu-rehearsal.json"  # default --out: in the temp folder, never in the package
PROGRESS_EVENTS = ("start", "begin", "lesson", "comparison", "end")


class Progress:
    """The ``--progress`` file: JSON lines, each flushed and fsynced as it is written (no file: does nothing)."""

    def __init__(self, path: str | os.PathLike[str] | None) -> None:
        self.path = Path(path) if path else None
        self.start = time.monotonic()
        if self.path is not None:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self.path.write_text("", encoding="utf-8")

    def elapsed(self) -> float:
        return round(time.monotonic() - self.start, 1)

    def write(self, event: str, **fields: Any) -> None:
        if self.path is None:
            return
        if event == "start":
            fields.setdefault("time", time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()))
        line = json.dumps({"event": event, **fields, "elapsed": self.elapsed()}, ensure_ascii=False)
        with open(self.path, "a", encoding="utf-8") as f:
            f.write(line + "\n")
            f.flush()
            os.fsync(f.fileno())

    def comparisons(self, results: dict[str, dict[str, Any]]) -> None:
        """One "comparison" line per GPU comparison's result (``gpu_checks.run_all``'s entries)."""
        for name, entry in results.items():
            self.write(
                "comparison",
                name=name,
                lesson=entry["lesson"],
                status="ok" if entry["ok"] else "failed",
                seconds=entry["seconds"],
                detail=entry["detail"],
            )


def run_lessons_logged(
    args: argparse.Namespace,
    progress: Progress,
    *,
    desc: str,
    deadline: float | None,
    after_each: Callable[[dict[str, dict[str, Any]], dict[str, dict[str, str]]], None] | None = None,
) -> tuple[dict[str, dict[str, Any]], dict[str, dict[str, str]]]:
    """Execute the lessons (``args.only``) one at a time, logging each to ``progress``; return (lessons, claims).

    ``after_each(lessons, claims)`` runs after every lesson (the GPU run writes its partial record there, so a run
    stopped at the device call's limit still leaves the lessons it finished).
    """
    from torchcontracts.labs.format import find_root
    from torchcontracts.publish.runner import lesson_paths, run_lessons

    lessons: dict[str, dict[str, Any]] = {}
    claims: dict[str, dict[str, str]] = {}
    for path in lesson_paths(find_root(), args.only):
        progress.write("begin", lesson=path.name)
        (result,) = run_lessons(
            [path],
            cell_timeout=args.cell_timeout,
            progress=not args.quiet,
            desc=desc,
            deadline=deadline,
            late=f"not run: the {args.budget:.0f} s budget ran out",
        )
        for rec in result.records:
            claims[rec["id"]] = {k: rec[k] for k in ("verdict", "evidence", "source", "notebook")}
            claims[rec["id"]].update({k: rec[k] for k in ("basis", "expect") if k in rec})  # since issue 25
        n = len({r["id"] for r in result.records})
        lessons[result.notebook] = {"seconds": round(result.seconds, 1), "error": result.error, "claims": n}
        status = "not run" if not result.ran else "failed" if result.error else "ok"
        progress.write(
            "lesson",
            lesson=result.notebook,
            status=status,
            seconds=round(result.seconds, 1),
            claims=n,
            error=result.error,
            verdicts={r["id"]: r["verdict"] for r in result.records},  # a run cut off later still keeps these
        )
        if after_each is not None:
            after_each(lessons, claims)
    return lessons, claims


# -- the comparisons' CPU halves -----------------------------------------------------------------------------------
def _alloc_model_half() -> Any:
    """Lesson 03: the allocator model over the same traces and settings the GPU run compares; no real allocator."""
    from torchcontracts.lessons.l03_memory.alloc import MiB, Config
    from torchcontracts.lessons.l03_memory.alloc_viz import fragmentation_trace, report_model
    from torchcontracts.publish.gpu_checks import _ALLOC_TRACES, Measured, Outcome

    traces = {**_ALLOC_TRACES, "fragmentation": fragmentation_trace(8, 6.0, "every other", 12.0)}
    steps = sum(
        len(report_model(trace, config)["steps"])
        for config in (Config(), Config(max_split_size=20 * MiB))
        for trace in traces.values()
    )
    return Outcome(
        steps > 0,
        f"the model's half: {steps} steps predicted ({len(traces)} traces, 2 settings); the real allocator's half "
        "needs CUDA",
        {"alloc.steps_compared": Measured(steps, "steps", "allocator steps the model predicted (CPU rehearsal)")},
    )


def _roofline_cpu_half() -> Any:
    """Lesson 04: the same ceilings on this CPU (small arrays and GEMMs: the rehearsal proves the code, not a peak)."""
    from torchcontracts.lessons.l04_async.roofline import measure_ceilings
    from torchcontracts.publish.gpu_checks import Measured, Outcome, copy_bandwidth

    ceil = measure_ceilings("cpu", array_bytes=32 << 20, gemm_n=512, repeats=2, numpy_check=False)
    copy = copy_bandwidth("cpu", 32 << 20, repeats=3)
    hbm, fp32 = ceil.bandwidth / 1e9, ceil.flops["float32"] / 1e12
    figures = {
        "roofline.copy_GBps": Measured(copy, "GB/s", "CPU rehearsal: copy_ of 32 MiB, read + write"),
        "roofline.hbm_GBps": Measured(hbm, "GB/s", "CPU rehearsal: triad over 32 MiB arrays (main memory, no HBM)"),
        "roofline.fp32_TFLOPs": Measured(fp32, "TFLOP/s", "CPU rehearsal: 512^3 fp32 GEMM"),
    }
    # Bands any CPU of the last decade falls in, wide enough for a busy 2-core box; a unit slip (bytes for GB, a
    # missed 1e12) or a timer that never ran lands far outside them.
    ok = CPU_GBPS[0] <= hbm <= CPU_GBPS[1] and CPU_TFLOPS[0] <= fp32 <= CPU_TFLOPS[1]
    return Outcome(
        ok,
        f"CPU: bandwidth {hbm:,.1f} GB/s (plausible {CPU_GBPS[0]}-{CPU_GBPS[1]:,}), fp32 GEMM {fp32 * 1e3:,.1f} GFLOP/s "
        f"(plausible {CPU_TFLOPS[0] * 1e3:g}-{CPU_TFLOPS[1] * 1e3:,.0f})",
        figures,
    )


CPU_GBPS = (0.5, 2_000)  # main-memory triad bandwidth of a CPU, GB/s
CPU_TFLOPS = (1e-3, 100.0)  # fp32 GEMM rate of a CPU, TFLOP/s


#: Each GPU comparison's CPU half (a function returning a ``gpu_checks.Outcome``), or why it has none.
CPU_HALVES: dict[str, Callable[[], Any] | str] = {
    "alloc.model_vs_real": _alloc_model_half,
    "roofline.ceilings": _roofline_cpu_half,
    "async.launch_returns_early": "no CPU half: a CPU op returns when its work is done, so there is no launch to time "
    "apart from the kernel",
    "streams.copy_compute_overlap": "no CPU half: CUDA streams and pinned host-to-device copies exist only on a GPU",
}


def run_cpu_halves(progress: Progress) -> tuple[dict[str, dict[str, Any]], dict[str, str]]:
    """Run the CPU half of every registered GPU comparison; return (comparisons, skipped: {name: reason})."""
    from torchcontracts.publish import gpu_checks

    gpu_checks.load_modules()
    halves, skipped = {}, {}
    for name, comp in sorted(gpu_checks.REGISTRY.items()):
        half = CPU_HALVES.get(name, "no CPU half written for it yet (add one to publish/rehearsal.CPU_HALVES)")
        if isinstance(half, str):
            skipped[name] = half
            progress.write("comparison", name=name, lesson=comp.lesson, status="skipped", seconds=0.0, detail=half)
        else:
            halves[name] = gpu_checks.Comparison(name, comp.lesson, comp.what + " (CPU half)", half)
    saved = dict(gpu_checks.REGISTRY)
    try:
        gpu_checks.REGISTRY.clear()
        gpu_checks.REGISTRY.update(halves)
        out = gpu_checks.run_all(progress=False)
    finally:
        gpu_checks.REGISTRY.clear()
        gpu_checks.REGISTRY.update(saved)
    progress.comparisons(out)
    return out, skipped


def cpu_device() -> dict[str, Any]:
    """The rehearsal's device block: says it is a CPU, never a GPU's name."""
    import torch

    try:
        gib = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
    except (ValueError, OSError, AttributeError):
        gib = 0.0
    return {
        "name": f"CPU rehearsal, not a GPU ({platform.machine()}, {os.cpu_count()} cores)",
        "capability": "0.0",
        "driver": "none",
        "cuda": str(torch.version.cuda or ""),
        "memory_gib": round(gib, 1),
        "count": 0,
    }


def load_rehearsal(path: str | os.PathLike[str]) -> dict[str, Any]:
    """A rehearsal record, validated (ValueError names the first problem); lessons never read one."""
    data = json.loads(Path(path).read_text(encoding="utf-8"))
    problems = validate(data)
    if problems or not data.get("rehearsal"):
        raise ValueError(
            f"{path}: not a valid rehearsal record: {problems[0] if problems else 'rehearsal is not true'}"
        )
    return data


def run(args: argparse.Namespace) -> int:
    """``torchcontracts record --rehearsal``: every lesson and every comparison's CPU half, on the CPU."""
    from torchcontracts.publish.record import package_record_file

    out = Path(args.out) if args.out else Path(tempfile.gettempdir()) / REHEARSAL_FILE
    if out.resolve() == package_record_file().resolve():
        print(f"record --rehearsal: refused: {out} is the package's GPU record; a rehearsal never goes there")
        return 1
    import torch

    if torch.cuda.is_available():  # the kernels inherit this: the lessons take their CPU paths, as on a CPU machine
        os.environ["CUDA_VISIBLE_DEVICES"] = ""
    progress = Progress(args.progress)
    only = list(args.only or [])
    progress.write("start", mode="rehearsal", budget_s=args.budget, torch=torch.__version__, only=only)
    lessons, claims = run_lessons_logged(args, progress, desc="lessons on the CPU (rehearsal)", deadline=None)
    comparisons, skipped = run_cpu_halves(progress)
    seconds = progress.elapsed()
    record = assemble(
        lessons,
        claims,
        comparisons,
        device=cpu_device(),
        seconds=seconds,
        torch_version=torch.__version__,
        partial=bool(args.only),
        rehearsal=True,
        skipped=skipped,
    )
    problems = validate(record)
    if problems:
        print(f"record --rehearsal: the record came out malformed ({problems[0]}): please report this")
        progress.write("end", status="failed", exit=1, record="", failed=[problems[0]])
        return 1
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(record, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    total = 0.0
    print(
        f"record --rehearsal: per lesson, against the record's {args.budget:.0f} s budget (CPU times, not GPU times):"
    )
    for name, les in lessons.items():
        total += les["seconds"]
        flag = "ok" if not les["error"] else f"FAILED: {les['error']}"
        print(f"  {name:<32} {les['seconds']:7.1f} s   total {total:7.1f} s of {args.budget:.0f}   {flag}")
    for name, comp in comparisons.items():
        print(f"  {name} (lesson {comp['lesson']}, CPU half): {'ok' if comp['ok'] else 'NOT OK'}: {comp['detail']}")
    for name, why in skipped.items():
        print(f"  {name}: skipped: {why}")
    failed = [n for n, les in lessons.items() if les["error"]] + [n for n, c in comparisons.items() if not c["ok"]]
    verdict = "within" if seconds <= args.budget else "OVER"
    print(
        f"record --rehearsal: {len(lessons)} lessons, {len(claims)} claims with a verdict, {seconds:.0f} s in all "
        f"({verdict} the {args.budget:.0f} s budget); {len(failed)} failed; wrote {out} (a rehearsal, not a GPU record)"
    )
    code = 1 if failed else 0
    progress.write("end", status="failed" if failed else "ok", exit=code, record=str(out), failed=failed)
    return code
