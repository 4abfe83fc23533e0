"""Shared fixtures: the course root and its notebooks."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

# The suite runs 3 xdist workers, their kernels, graders and browsers on 2 cores. By default an idle OpenMP
# thread of torch spins for a while before it sleeps, burning CPU the other processes need (a lesson ran with
# about 10% less CPU time without it). Tests only: lessons, labs and learners keep the default, and a user's
# own setting wins. Kernels, graders and launched ranks inherit it from this process.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

# A lesson that the ledger, the site or the GPU record executes once in a test run is read back by the next of them
# (torchcontracts.publish.runner keeps clean runs in this folder, keyed by the notebook's bytes, the torch version and
# the TORCHCONTRACTS_* environment). xdist gives its workers one run id, so they share it; nbval runs each notebook
# on its own, in its own kernel.
os.environ.setdefault(
    "TORCHCONTRACTS_EXEC_CACHE",
    os.path.join(tempfile.gettempdir(), f"tc-exec-{os.environ.get('PYTEST_XDIST_TESTRUNUID') or os.getpid()}"),
)

import nbformat
import pytest
import torch

from torchcontracts.course import lab_ids, lessons

ROOT = Path(__file__).resolve().parents[1]

# The autograd engine decides once per process, at its first backward, whether to start device threads. On a
# CUDA build with no GPU (measured on 2.11.0+cu130 and 2.14.1+cu130) a first backward *after* any torch.compile
# starts them, and from then on no fork of the process can run backward; with a GPU, any first backward does. The
# lab 07, lesson 09 and rank-runner tests fork ranks from the same pytest worker that ran lesson 07's compile tests,
# so each worker does its first backward here, before any test: on this GPU-less machine that keeps forks usable.
# (It would not on a GPU machine, where the suite does not run. What learners use does not rely on it: the lab 07
# and Try-it 09.2 judges never run backward in the kernel, lesson 09 computes its references in a fork, and
# tests/lessons/l09/test_fork_poison.py grades lab 07 in a poisoned fresh interpreter.)
torch.ones(1, requires_grad=True).sum().backward()


# Verdicts of this run, per lesson: with TORCHCONTRACTS_LEDGER_DIR set (CI sets it for README command 2), each lesson
# notebook's kernel, as nbval starts it, appends its verdicts to <dir>/<lesson>.jsonl (core.claims' LEDGER_ENV), and
# `torchcontracts ledger --from-records <dir>` makes the run's ledger of them: no second execution of the lessons.
# Only nbval's kernels of notebooks/ see the variable; tests in this process never do, so none can add a verdict.
LEDGER_DIR_ENV = "TORCHCONTRACTS_LEDGER_DIR"
_LESSON_NOTEBOOKS = {les.notebook for les in lessons()}


def _lesson_notebook(item: pytest.Item) -> Path | None:
    path = Path(str(item.fspath)).resolve()
    try:
        rel = path.relative_to(ROOT).as_posix()
    except ValueError:
        return None
    return path if rel in _LESSON_NOTEBOOKS else None


class _LessonVerdicts:
    """Registered as a plugin, not as conftest hooks: a conftest's runtest hooks see only tests under its folder."""

    @pytest.hookimpl(tryfirst=True)
    def pytest_runtest_setup(self, item: pytest.Item) -> None:
        from torchcontracts.core.claims import LEDGER_ENV

        folder = os.environ.get(LEDGER_DIR_ENV)
        notebook = _lesson_notebook(item) if folder else None
        if notebook is not None:  # before nbval's setup starts the notebook's kernel, which inherits it
            Path(folder).mkdir(parents=True, exist_ok=True)
            os.environ[LEDGER_ENV] = str(Path(folder) / f"{notebook.stem}.jsonl")

    @pytest.hookimpl(trylast=True)
    def pytest_runtest_teardown(self, item: pytest.Item) -> None:
        from torchcontracts.core.claims import LEDGER_ENV

        if os.environ.get(LEDGER_DIR_ENV) and _lesson_notebook(item) is not None:
            os.environ.pop(LEDGER_ENV, None)


def pytest_configure(config: pytest.Config) -> None:
    config.pluginmanager.register(_LessonVerdicts(), "torchcontracts-lesson-verdicts")


def lesson_paths() -> list[Path]:
    """The lesson notebooks, in course order, from the course manifest."""
    return [ROOT / les.notebook for les in lessons()]


def solution_paths() -> list[Path]:
    return [ROOT / "solutions" / f"{lab}.ipynb" for lab in lab_ids()]


def lab_paths() -> list[Path]:
    return [ROOT / "labs" / f"{lab}.ipynb" for lab in lab_ids()]


def all_notebook_paths() -> list[Path]:
    return lesson_paths() + solution_paths() + lab_paths()


@pytest.fixture
def root() -> Path:
    return ROOT


def read(path: Path) -> nbformat.NotebookNode:
    return nbformat.read(path, as_version=4)


def course_imports(nb: nbformat.NotebookNode) -> dict:
    """A namespace holding the top-level imports of a notebook's course cells (what graded cells rely on)."""
    import ast

    from torchcontracts.labs.format import cell_meta

    ns: dict = {}
    for cell in nb.cells:
        if cell.cell_type != "code" or cell_meta(cell).get("role"):
            continue
        try:
            tree = ast.parse(cell.source)
        except SyntaxError:  # IPython magics (%%writefile ...) hold no imports the graded cells use
            continue
        imports = [node for node in tree.body if isinstance(node, (ast.Import, ast.ImportFrom))]
        exec(compile(ast.Module(body=imports, type_ignores=[]), "<course imports>", "exec"), ns)
    return ns


def solution_functions(lab_id: str, namespace: dict | None = None) -> dict:
    """The reference functions of a lab, exec'd (quietly) from its solution's graded cells, after the
    solution's own imports (or in ``namespace`` when given)."""
    import contextlib
    import io

    from torchcontracts.labs.format import graded_cells
    from torchcontracts.labs.load import load

    spec = load(lab_id)
    nb = read(ROOT / "solutions" / f"{lab_id}.ipynb")
    ns = dict(namespace) if namespace is not None else course_imports(nb)
    for cell in graded_cells(nb).values():
        with contextlib.redirect_stdout(io.StringIO()):
            exec(compile(cell.source, f"<{lab_id} cell>", "exec"), ns)
    return {t.target: ns[t.target] for t in spec.tasks.values()}


def checks_by_task(lab_id: str) -> dict:
    """Public and hidden checks by task, loaded by the grader's own loader. It returns a copy:
    the module's public `lab` is never changed, so other tests in the process see public checks only."""
    from torchcontracts.grading.plan import lab_spec

    spec = lab_spec(ROOT, lab_id)
    return {task: spec.checks_for(task) for task in spec.tasks}


def notebook_functions(path: Path, *names: str) -> dict:
    """Functions defined in a notebook's code cells, exec'd alone (after the notebook's imports).

    A claim cell states its proof as a small predicate over measured values (``def proof_c137(...)``);
    a test loads that very predicate here and feeds it the behaviour the seed describes, to show the
    proof would fail if PyTorch behaved the other way. Only the ``def`` statements run, not the cells.
    """
    import ast

    nb = read(path)
    ns = course_imports(nb)
    found: dict = {}
    for cell in nb.cells:
        if cell.cell_type != "code":
            continue
        try:
            tree = ast.parse(cell.source)
        except SyntaxError:  # a cell with IPython magics holds no proof predicate
            continue
        for node in tree.body:
            if isinstance(node, ast.FunctionDef) and node.name in names:
                exec(compile(ast.Module(body=[node], type_ignores=[]), f"<{path.name}>", "exec"), ns)
                found[node.name] = ns[node.name]
    missing = sorted(set(names) - set(found))
    assert not missing, f"{path.name} defines no {missing}"
    return found


@pytest.fixture
def no_dataloader_worker_left():
    """After the test, no DataLoader worker process (``pt_data_worker``) is alive: a leak fails the test."""
    import time

    from torchcontracts.lessons.l05_data.data_pipeline import dataloader_workers

    yield
    deadline = time.monotonic() + 5
    while dataloader_workers() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert dataloader_workers() == [], "a DataLoader worker outlived its test"


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """nbval's cells execute a notebook: they belong to the slow tier (`-m "not slow"` leaves them out)."""
    for item in items:
        if item.path.suffix == ".ipynb":
            item.add_marker(pytest.mark.slow)
