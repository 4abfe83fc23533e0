"""Grader-only modules: the code that computes answers, which the grader loads and a graded kernel cannot see.

A lab's judges and references run in the grader's own process (``judge``), never next to the learner's
code; yet the package is importable inside the kernel, so a solution cell could import a reference and
return what it computes. In ``bwrap`` mode the sandbox therefore binds ``grader_only.py`` (a module of
placeholders that raise when called) over the source of each module in ``GRADER_ONLY``, and an empty,
read-only folder over its ``__pycache__`` (so no compiled copy can be loaded with a sourceless loader).
This holds wherever the package lives: an editable install (the course's ``helpers/``) or a copy in
site-packages; a copy of the course's ``helpers/`` that the sandbox happens to show is covered too.

A module goes in ``GRADER_ONLY`` only when nothing the kernel runs needs a real name of it: no
``call`` driver, no lab setup cell, no module-level code of a module the kernel imports (a name it
imports from a grader-only module is a placeholder there). ``NOT_YET_HIDDEN`` lists the judge modules
that still hold something the kernel needs, and what that is; ``tests/grading/test_importable_answers.py``
checks both lists against what a sandboxed kernel can import. ``--sandbox none`` hides nothing (README).
"""

from __future__ import annotations

from pathlib import Path

__all__ = ["GRADER_ONLY", "NOT_YET_HIDDEN", "bwrap_hide_args", "module_file"]

GRADER_ONLY = (
    "torchcontracts.lessons.l02_autograd.lab02_judges",
    "torchcontracts.lessons.l03_memory.lab03_judges",
    "torchcontracts.lessons.l04_async.lab04_intensity",
    "torchcontracts.lessons.l04_async.lab04_judges",
    "torchcontracts.lessons.l06_training.lab05_judges",
    "torchcontracts.lessons.l08_deploy.lab06_judges",
    "torchcontracts.lessons.l09_distributed.lab07_accum_judges",
    "torchcontracts.lessons.l09_distributed.lab07_judges",
)

# Judge modules the kernel still needs real names from (module -> those names); each must move to a
# kernel-side module before its judge module can join GRADER_ONLY. Lab 01 keeps its judges in the lab's own
# module (not split yet), so it is not listed here either. Lab 03's t3 judge (and the allocator model's answer,
# ``model_answer``) is in the grader-only ``lab03_judges``; its t1 and t2 judges (``judge_budget``,
# ``growth_rows``, ``value_rows``, ``reference_history``) stay in ``lab03_memory`` beside their drivers.
NOT_YET_HIDDEN: dict[str, str] = {}

_STUB = Path(__file__).resolve().with_name("grader_only.py")


def module_file(root: Path, name: str) -> Path:
    """The source file of a ``torchcontracts`` module under a package folder ``root`` (nothing is imported)."""
    return root.joinpath(*name.split(".")[1:]).with_suffix(".py")


def _package_roots(bound: list[Path], course: Path) -> list[Path]:
    """Every copy of the package the sandbox shows: the one Python imports, and the course's ``helpers/``."""
    import torchcontracts

    roots = [Path(torchcontracts.__file__).resolve().parent, (course / "helpers" / "torchcontracts").resolve()]
    seen: list[Path] = []
    for root in roots:
        if root.is_dir() and root not in seen and any(p == root or p in root.parents for p in bound):
            seen.append(root)
    return seen


def bwrap_hide_args(bound: list[Path], course: Path) -> list[str]:
    """bwrap arguments that replace each grader-only module with the stub and empty its ``__pycache__``.

    ``bound`` are the folders the sandbox shows read-only (these arguments must come after them).
    """
    args: list[str] = []
    caches: list[Path] = []
    for root in _package_roots(bound, course):
        for name in GRADER_ONLY:
            source = module_file(root, name)
            if not source.is_file():
                raise RuntimeError(f"grader-only module {name} has no source at {source}")
            args += ["--ro-bind", str(_STUB), str(source)]
            cache = source.parent / "__pycache__"
            if cache not in caches:
                caches.append(cache)
    for cache in caches:
        try:  # made here if missing, so that a compiled copy written later cannot show through either
            cache.mkdir(exist_ok=True)
        except OSError:
            pass
        if cache.is_dir():
            args += ["--perms", "0755", "--tmpfs", str(cache), "--remount-ro", str(cache)]
    return args
