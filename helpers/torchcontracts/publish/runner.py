"""Run the course's lessons headless: one notebook in a fresh kernel, and the one loop over the lessons.

The claims ledger, the static site and the GPU record all execute lessons the same way: :func:`lesson_paths`
reads which lessons from the course manifest (``torchcontracts.course``, with ``--only`` number prefixes), and
:func:`run_lessons` executes them in order with nbclient (the engine nbval and JupyterLab use), one progress bar
over all their code cells, collecting each lesson's verdicts (:class:`LessonRun`).

Every code cell has ``cell_timeout`` seconds (default 120). A cell that takes longer stops that lesson with
:class:`CellTimeout`, whose message names the notebook and the cell, e.g.
``ledger: 03_memory_contracts.ipynb cell 43 (`box = explorer()`) did not finish in 120 s``
(cells are counted from 1 at the top of the notebook, markdown cells included).

With ``TORCHCONTRACTS_EXEC_CACHE`` set to a folder, a lesson that ran clean is kept there, keyed by a hash of
the notebook's bytes, the torch version and the ``TORCHCONTRACTS_*`` environment: the same lesson asked for again
(by the ledger, then the site, in one test run) is read back instead of executed again. The test suite sets it
for one run; nothing else does, so a learner's ledger always executes.
"""

from __future__ import annotations

import dataclasses
import fcntl
import hashlib
import json
import os
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator, Sequence

from jupyter_client.kernelspec import KernelSpec, KernelSpecManager
from jupyter_client.manager import AsyncKernelManager
from nbclient import NotebookClient
from nbclient.exceptions import CellExecutionError, CellTimeoutError

from torchcontracts import course
from torchcontracts.core.claims import LEDGER_ENV
from torchcontracts.publish.ledger_cli import CELL_TIMEOUT
from torchcontracts.core.nbio import nbformat

__all__ = [
    "CELL_TIMEOUT",
    "CellTimeout",
    "LessonRun",
    "code_cells",
    "execute",
    "execute_notebook",
    "lesson_paths",
    "run_lesson",
    "run_lessons",
    "this_python_kernel",
]

CACHE_ENV = "TORCHCONTRACTS_EXEC_CACHE"  # a folder: lessons that ran clean, keyed by content (tests set it)


class CellTimeout(RuntimeError):
    """A cell of a lesson did not finish within the per-cell timeout."""

    def __init__(self, notebook: str, cell: int, source: str, seconds: float) -> None:
        self.notebook, self.cell, self.seconds = notebook, cell, seconds
        lines = [ln.strip() for ln in source.splitlines() if ln.strip()]
        first = lines[0] if lines else ""
        self.source = (first[:60] + "...") if len(first) > 60 or len(lines) > 1 else first
        super().__init__(f"ledger: {notebook} cell {cell} (`{self.source}`) did not finish in {seconds:g} s")


class _ThisPythonSpecs(KernelSpecManager):
    """Kernel specs in which "python3" is always this interpreter.

    Jupyter looks up "python3" in the user's data folder first, so a kernelspec left behind by an old,
    deleted venv (``~/.local/share/jupyter/kernels/python3``) would run the lessons on another Python
    with another torch, or fail to start at all. The ledger and the tests must measure this environment.
    """

    def get_kernel_spec(self, kernel_name: str) -> KernelSpec:
        if kernel_name == "python3":
            from ipykernel import kernelspec

            return self.kernel_spec_class(resource_dir=kernelspec.RESOURCES, **kernelspec.get_kernel_dict())
        return super().get_kernel_spec(kernel_name)


def this_python_kernel() -> AsyncKernelManager:
    """A kernel manager for nbclient that starts ipykernel on ``sys.executable``, whatever kernelspecs say."""
    return AsyncKernelManager(kernel_name="python3", kernel_spec_manager=_ThisPythonSpecs())


def code_cells(path: Path) -> int:
    """How many code cells of a notebook run (nbclient skips empty ones); the progress bar counts these."""
    return sum(c.cell_type == "code" and bool(c.source.strip()) for c in nbformat.read(path, as_version=4).cells)


def execute_notebook(
    path: Path,
    *,
    cell_timeout: float = CELL_TIMEOUT,
    cwd: Path | None = None,
    on_cell: Callable[[int, int], None] | None = None,
    timeout: float | None = None,
) -> float:
    """Execute one notebook in a fresh kernel, in memory (the file is not rewritten); return seconds.

    ``on_cell(cell_index, code_cells_done)`` is called after each code cell has finished. A cell that
    runs longer than ``cell_timeout`` seconds raises :class:`CellTimeout`. ``timeout`` is the old
    name of ``cell_timeout`` (nbclient's timeout has always been per cell).
    """
    if timeout is not None:
        cell_timeout = timeout
    return execute(
        nbformat.read(path, as_version=4), path.name, cwd=cwd or path.parent, cell_timeout=cell_timeout, on_cell=on_cell
    )


def execute(
    nb: Any,
    name: str,
    *,
    cwd: Path,
    cell_timeout: float = CELL_TIMEOUT,
    on_cell: Callable[[int, int], None] | None = None,
) -> float:
    """Execute a notebook node in place (outputs and widget state are kept in ``nb``); return seconds.

    The engine behind :func:`execute_notebook`; the site builder keeps the executed node to export it.
    ``name`` is the notebook's file name, for the :class:`CellTimeout` message.
    """
    path = Path(name)
    started: dict[str, float] = {}
    done = [0]

    def cell_started(cell: Any, cell_index: int) -> None:
        started["index"], started["t"] = cell_index, time.monotonic()

    def cell_executed(cell: Any, cell_index: int, execute_reply: Any) -> None:
        # nbclient raises CellTimeoutError only when no reply has come by the deadline; a reply
        # picked up late (at the deadline) is a timeout for the ledger too.
        if time.monotonic() - started["t"] >= cell_timeout:
            raise CellTimeout(path.name, cell_index + 1, cell.source, cell_timeout)
        done[0] += 1
        if on_cell is not None:
            on_cell(cell_index, done[0])

    start = time.perf_counter()
    km = this_python_kernel()
    client = NotebookClient(
        nb,
        timeout=max(1, int(cell_timeout + 0.999)),
        km=km,
        resources={"metadata": {"path": str(cwd)}},
        on_cell_execute=cell_started,
        on_cell_executed=cell_executed,
    )
    try:
        # The kernel process's own stderr holds only ipykernel's start-up warnings and C-level noise;
        # cell errors and warnings arrive through Jupyter messages, so nothing a learner needs is lost.
        client.execute(stderr=subprocess.DEVNULL)
    except CellTimeoutError:
        i = started.get("index", 0)
        raise CellTimeout(path.name, i + 1, nb.cells[i].source, cell_timeout) from None
    finally:
        _shut_down(km)  # nbclient shuts down only a kernel manager it made itself; this one is ours
    return time.perf_counter() - start


def _shut_down(km: AsyncKernelManager) -> None:
    """Stop the kernel (and its process) that ``km`` started, if it still runs; never raises."""
    from jupyter_core.utils import run_sync

    try:
        if km.has_kernel:
            run_sync(km.shutdown_kernel)(now=True)
    except Exception:  # a kernel that died already leaves nothing to stop
        pass


@dataclasses.dataclass
class LessonRun:
    """One lesson executed with its verdicts collected (for the site and a GPU record), and how it ended."""

    notebook: str
    seconds: float
    records: list[dict[str, str]]  # the verdicts it asserted, in order, each with its "notebook"
    error: str = ""  # "" when every cell ran; else one line naming the failing cell
    nb: Any = None  # the executed notebook node (outputs and widget state)
    ran: bool = True  # False: not started (the time budget ran out)
    exception: BaseException | None = dataclasses.field(default=None, repr=False)  # what ended the run, if anything


def _cache_key(path: Path) -> str:
    """What a lesson's run depends on besides the package: its bytes, the torch build, the course's environment."""
    import torch

    env = sorted((k, v) for k, v in os.environ.items() if k.startswith("TORCHCONTRACTS_") and k != CACHE_ENV)
    return hashlib.sha256(path.read_bytes() + repr((torch.__version__, env)).encode()).hexdigest()[:24]


def run_lesson(
    path: Path, *, cell_timeout: float = CELL_TIMEOUT, on_cell: Callable[[int, int], None] | None = None
) -> LessonRun:
    """Execute one lesson and collect its verdicts; a failing cell ends the run and is reported, never raised.

    Verdicts asserted before the failure are kept, so a GPU record still holds what a lesson proved
    before the cell that broke. Under ``TORCHCONTRACTS_EXEC_CACHE`` a clean run is kept, and read back.
    """
    folder = os.environ.get(CACHE_ENV)
    if not folder:
        return _run_lesson(path, cell_timeout=cell_timeout, on_cell=on_cell)
    base = Path(folder) / f"{path.stem}-{_cache_key(path)}"
    base.parent.mkdir(parents=True, exist_ok=True)
    with open(f"{base}.lock", "w") as lock:  # two test workers asking at once: the second waits, then reads
        fcntl.flock(lock, fcntl.LOCK_EX)
        if Path(f"{base}.json").exists():
            kept = json.loads(Path(f"{base}.json").read_text(encoding="utf-8"))
            nb = nbformat.read(f"{base}.ipynb", as_version=4)
            for n in range(code_cells(path)):
                if on_cell:
                    on_cell(n, n + 1)
            return LessonRun(path.name, kept["seconds"], kept["records"], "", nb)
        run = _run_lesson(path, cell_timeout=cell_timeout, on_cell=on_cell)
        if not run.error and run.nb is not None:
            nbformat.write(run.nb, f"{base}.ipynb")
            Path(f"{base}.json").write_text(json.dumps({"seconds": run.seconds, "records": run.records}))
        return run


def _run_lesson(path: Path, *, cell_timeout: float, on_cell: Callable[[int, int], None] | None) -> LessonRun:
    nb = nbformat.read(path, as_version=4)
    error = ""
    failure: BaseException | None = None
    start = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:
        record_file = Path(tmp) / "verdicts.jsonl"
        old = os.environ.get(LEDGER_ENV)
        os.environ[LEDGER_ENV] = str(record_file)
        try:
            execute(nb, path.name, cwd=path.parent, cell_timeout=cell_timeout, on_cell=on_cell)
        except CellTimeout as err:
            error, failure = str(err), err
        except CellExecutionError as err:
            failure = err
            bad = next(
                (
                    i
                    for i, c in enumerate(nb.cells)
                    if c.cell_type == "code" and any(o.get("output_type") == "error" for o in c.get("outputs", []))
                ),
                None,
            )
            where = f" cell {bad + 1}" if bad is not None else ""
            error = f"{path.name}{where}: {err.ename}: {_first_line(str(err.evalue))}"
        except Exception as err:  # the kernel died, or would not start
            failure = err
            error = f"{path.name}: {type(err).__name__}: {_first_line(str(err))}"
        finally:
            if old is None:
                os.environ.pop(LEDGER_ENV, None)
            else:
                os.environ[LEDGER_ENV] = old
        lines = record_file.read_text(encoding="utf-8").splitlines() if record_file.exists() else []
    records = [{**json.loads(line), "notebook": path.name} for line in lines]
    return LessonRun(path.name, time.perf_counter() - start, records, error, nb, exception=failure)


def _first_line(text: str, limit: int = 500) -> str:
    lines = [ln.strip() for ln in text.strip().splitlines() if ln.strip()]
    return (lines[-1] if lines else "")[:limit]


# -- the one loop over the lessons ---------------------------------------------------------------------------------
def lesson_paths(root: Path, only: Sequence[str] | None = None) -> list[Path]:
    """The notebooks of the manifest's lessons under ``root``, in course order; ``only`` keeps number prefixes.

    FileNotFoundError names a lesson of the manifest whose notebook is missing (not the course root?).
    """
    paths = [root / les.notebook for les in course.lessons(only)]
    missing = [p for p in paths if not p.is_file()]
    if missing:
        raise FileNotFoundError(
            f"{missing[0]} is in the course manifest but not on disk: run this from the course root"
        )
    return paths


def run_lessons(
    paths: Iterable[Path],
    *,
    cell_timeout: float = CELL_TIMEOUT,
    progress: bool = True,
    desc: str = "executing lessons",
    deadline: float | None = None,
    late: str = "not run: the time budget ran out",
    stop_on_error: bool = False,
) -> Iterator[LessonRun]:
    """Execute the lessons one after another and yield each one's :class:`LessonRun`.

    One progress bar counts the code cells of all of them (``name done/total`` beside it). A lesson not started
    by ``deadline`` (a ``time.monotonic()`` value) is yielded unrun, with ``late`` as its error. With
    ``stop_on_error`` the first failing lesson's exception (e.g. :class:`CellTimeout`) is raised instead.
    """
    from tqdm.auto import tqdm

    paths = list(paths)
    counts = {p: code_cells(p) for p in paths}
    bar = tqdm(total=sum(counts.values()), desc=desc, unit="cell", disable=not progress)
    try:
        for path in paths:
            if deadline is not None and time.monotonic() > deadline:
                yield LessonRun(path.name, 0.0, [], late, ran=False)
                continue
            bar.set_postfix_str(f"{path.name} 0/{counts[path]}")

            def on_cell(cell_index: int, done: int, path: Path = path) -> None:
                bar.set_postfix_str(f"{path.name} {done}/{counts[path]}", refresh=False)
                bar.update(1)

            result = run_lesson(path, cell_timeout=cell_timeout, on_cell=on_cell)
            if stop_on_error and result.exception is not None:
                result.exception.lesson = path.name  # the ledger's one line names it
                raise result.exception
            yield result
    finally:
        bar.close()
