"""The course manifest: what each lesson is, in one table that every tool and test reads.

A lesson is one row here and nothing else: its notebook, the package folder that holds its helpers,
Try-it exercises, lab checks and GPU comparisons, the labs that practise it, and what needs CUDA.
The time estimate is not copied here: it lives in the notebook's header (``**Time:** about N
minutes``), and :func:`header_minutes` reads it, so the README, the workshop kit and the site agree
with what the learner sees. ``torchcontracts new-lesson`` appends a row.

No tool enumerates lessons any other way (no glob over ``notebooks/``, no lesson table elsewhere):
``tests/test_course.py`` greps for the old ways and fails on them.
"""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path
from typing import Iterable, Sequence

__all__ = ["LESSONS", "Lesson", "header_minutes", "lab_ids", "lesson", "lesson_of_lab", "lessons", "package_of_lab"]


@dataclasses.dataclass(frozen=True)
class Lesson:
    """One lesson of the course (a row of the manifest)."""

    number: str  # "04": two digits, the notebook's prefix
    slug: str  # "async_and_timing": the notebook's name after the prefix
    title: str  # the title the course map and the site show
    package: str  # "l04_async": the folder under torchcontracts/lessons/
    labs: tuple[str, ...] = ()  # lab ids ("lab04_timing"); lab and lesson numbers differ from 05 on
    cpu: str = "all"  # what runs on a CPU
    cuda: str = "nothing"  # what needs CUDA
    lab_note: str = ""  # shown beside the lab in the course map ("optional"; or why a lesson has none)

    @property
    def notebook(self) -> str:
        """The notebook's path from the course root."""
        return f"notebooks/{self.number}_{self.slug}.ipynb"

    @property
    def stem(self) -> str:
        return f"{self.number}_{self.slug}"

    @property
    def module(self) -> str:
        """The dotted name of the lesson's package folder."""
        return f"torchcontracts.lessons.{self.package}"


LESSONS: tuple[Lesson, ...] = (
    Lesson(
        "00",
        "start_here",
        "Start here: your machine's contract",
        "l00_start",
        cuda="per-GPU capability and free memory",
    ),
    Lesson(
        "01",
        "tensor_contracts",
        "Tensor contracts: storage, strides, views, dtypes, with a stride explorer",
        "l01_tensors",
        labs=("lab01_strides",),
        cuda="nothing (a CUDA timing comparison is extra)",
    ),
    Lesson(
        "02",
        "autograd_engine",
        "The autograd engine, proved on live graphs",
        "l02_autograd",
        labs=("lab02_autograd",),
        cuda="nothing (cross-device sync demo is extra)",
    ),
    Lesson(
        "03",
        "memory_contracts",
        "Memory contracts and a model of the CUDA caching allocator",
        "l03_memory",
        labs=("lab03_memory",),
        cpu="all, CUDA parts run on an allocator model",
        cuda="live allocator, fragmentation, snapshots",
    ),
    Lesson(
        "04",
        "async_and_timing",
        "Asynchronous execution, honest timing and the roofline",
        "l04_async",
        labs=("lab04_timing",),
        cuda="launch vs kernel time, sync debug mode, events, pinned transfers, the unsafe D2H read, stream "
        "overlap, the cudnn.benchmark probe, the GPU roofline",
    ),
    Lesson(
        "05",
        "data_pipeline",
        "Data pipeline contracts: workers, seeding, start methods, throughput",
        "l05_data",
        cpu="all (fork, spawn and forkserver workers live)",
        cuda="real pinned memory and its transfer speed, `.cuda()` in a forked worker",
        lab_note="lab05 uses its loader recipe",
    ),
    Lesson(
        "06",
        "training_contracts",
        "Training contracts: modes, steps, mixed precision, determinism, an exact resume",
        "l06_training",
        labs=("lab05_reproducible_training",),
        cpu='all (bf16 autocast and GradScaler("cpu"))',
        cuda="fp16 autocast and a real GradScaler overflow, per-device seeds, cuDNN determinism, "
        "CUBLAS_WORKSPACE_CONFIG, a CUDA resume",
    ),
    Lesson(
        "07",
        "compile_and_profile",
        "Compile and profile: what torch.compile really does, and when it pays",
        "l07_compile",
        cpu="all (needs a C++ compiler for Inductor)",
        cuda="reduce-overhead CUDA graphs, kernel-time profile and GPU FLOP/s",
    ),
    Lesson(
        "08",
        "deployment",
        "Deployment: saving, torch.export, ONNX in a real runtime, quantization, serving",
        "l08_deploy",
        labs=("lab06_deployment",),
        cpu="all (onnxruntime and torchao on CPU)",
        cuda="export, onnxruntime and AOTInductor on CUDA (optional)",
    ),
    Lesson(
        "09",
        "distributed",
        "Distributed training on real process groups: torchrun, collectives, DDP, FSDP2, timeouts",
        "l09_distributed",
        labs=("lab07_ddp",),
        cpu="all (gloo on CPU)",
        cuda="NCCL (1 GPU); SyncBatchNorm and DataParallel's imbalance (2+ GPUs)",
        lab_note="optional",
    ),
    Lesson(
        "10",
        "claims_ledger",
        "The claims ledger: every verdict of the course in one table",
        "l10_ledger",
        cpu="all (reads the cached ledger)",
        cuda="the CUDA column needs a GPU record (`torchcontracts record`)",
    ),
)


def lessons(only: Iterable[str] | None = None) -> list[Lesson]:
    """The lessons in course order; ``only`` keeps those whose number starts with one of its prefixes."""
    picked = list(LESSONS)
    if only:
        prefixes = tuple(only)
        picked = [les for les in picked if les.number.startswith(prefixes)]
    return picked


def lesson(number: str) -> Lesson:
    """The lesson with this two-digit number; KeyError names the known ones."""
    for les in LESSONS:
        if les.number == number:
            return les
    raise KeyError(f"no lesson {number!r} in the course manifest (known: {', '.join(x.number for x in LESSONS)})")


def lab_ids() -> list[str]:
    """Every lab id, in course order."""
    return [lab for les in LESSONS for lab in les.labs]


def lesson_of_lab(lab_id: str) -> Lesson:
    """The lesson a lab practises; KeyError names the known labs."""
    for les in LESSONS:
        if lab_id in les.labs:
            return les
    raise KeyError(f"no lab {lab_id!r} in the course manifest (known: {', '.join(lab_ids())})")


def package_of_lab(lab_id: str) -> str:
    """The dotted module that holds a lab's tasks and public checks (``lab = LabSpec(...)``)."""
    return f"{lesson_of_lab(lab_id).module}.{lab_id}"


_HEADER = re.compile(r"\*\*Time:?\*\*:?\s*(?:about\s+)?(\d+)(?:\s*(?:to|-|–)\s*(\d+))?\s*min", re.IGNORECASE)


def header_minutes(source: str | Path) -> str:
    """'45' or '60-90': the time estimate of a notebook, from its first cell (a path or that cell's text)."""
    if isinstance(source, Path):
        import json

        cells: Sequence[dict] = json.loads(source.read_text(encoding="utf-8"))["cells"]
        first = cells[0]["source"]
        source = "".join(first) if isinstance(first, list) else first
    found = _HEADER.search(source)
    if not found:
        raise ValueError("its first cell has no '**Time:** about N minutes' line")
    return found.group(1) + (f"-{found.group(2)}" if found.group(2) else "")
