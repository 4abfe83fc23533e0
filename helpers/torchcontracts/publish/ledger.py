"""The claims ledger: run the lessons headless and collect every verdict they assert.

Notebooks record verdicts through ``torchcontracts.core.claims.verdict``; with the environment
variable ``TORCHCONTRACTS_LEDGER`` set, each verdict is appended to a JSON-lines file.
This module executes the lessons with nbclient (the same engine nbval and JupyterLab use)
and joins those records with ``claims.csv``, so uncovered claims show as ``not covered``.

Every code cell has ``cell_timeout`` seconds (default 120). A cell that takes longer stops the
run with :class:`CellTimeout`, whose message names the notebook and the cell, e.g.
``ledger: 03_memory_contracts.ipynb cell 43 (`box = explorer()`) did not finish in 120 s``
(cells are counted from 1 at the top of the notebook, markdown cells included). The progress
bar moves once per executed code cell.
"""

from __future__ import annotations

import argparse
import csv
import dataclasses
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Callable, Iterable, Sequence

from torchcontracts.core.nbio import nbformat
from jupyter_client.kernelspec import KernelSpec, KernelSpecManager
from jupyter_client.manager import AsyncKernelManager
from nbclient import NotebookClient
from nbclient.exceptions import CellExecutionError, CellTimeoutError

from torchcontracts.core.claims import LEDGER_ENV, all_claims

__all__ = [
    "CACHE_CSV",
    "COLUMNS",
    "CELL_TIMEOUT",
    "CellTimeout",
    "LedgerRow",
    "LessonRun",
    "add_arguments",
    "build_ledger",
    "code_cells",
    "execute",
    "execute_notebook",
    "run",
    "run_lesson",
    "this_python_kernel",
]

COLUMNS = ["id", "claim", "verdict", "evidence", "source", "notebook", "device", "torch"]
CACHE_CSV = (
    "ledger_cpu.csv"  # the cached CPU ledger in the package's data/ (lesson 10 reads it), with a .json beside it
)
CELL_TIMEOUT = 120  # seconds one code cell may run
LedgerRow = dict[str, str]


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


def run_lesson(
    path: Path, *, cell_timeout: float = CELL_TIMEOUT, on_cell: Callable[[int, int], None] | None = None
) -> LessonRun:
    """Execute one lesson and collect its verdicts; a failing cell ends the run and is reported, never raised.

    Verdicts asserted before the failure are kept, so a GPU record still holds what a lesson proved
    before the cell that broke.
    """
    nb = nbformat.read(path, as_version=4)
    error = ""
    start = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:
        record_file = Path(tmp) / "verdicts.jsonl"
        old = os.environ.get(LEDGER_ENV)
        os.environ[LEDGER_ENV] = str(record_file)
        try:
            execute(nb, path.name, cwd=path.parent, cell_timeout=cell_timeout, on_cell=on_cell)
        except CellTimeout as err:
            error = str(err)
        except CellExecutionError as err:
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
            error = f"{path.name}: {type(err).__name__}: {_first_line(str(err))}"
        finally:
            if old is None:
                os.environ.pop(LEDGER_ENV, None)
            else:
                os.environ[LEDGER_ENV] = old
        lines = record_file.read_text(encoding="utf-8").splitlines() if record_file.exists() else []
    records = [{**json.loads(line), "notebook": path.name} for line in lines]
    return LessonRun(path.name, time.perf_counter() - start, records, error, nb)


def _first_line(text: str, limit: int = 200) -> str:
    lines = [ln.strip() for ln in text.strip().splitlines() if ln.strip()]
    return (lines[-1] if lines else "")[:limit]


def build_ledger(
    notebooks: Iterable[Path],
    *,
    progress: bool = True,
    cell_timeout: float = CELL_TIMEOUT,
    timeout: float | None = None,
) -> tuple[list[LedgerRow], dict[str, float]]:
    """Execute the notebooks and return one row per claim, plus each notebook's run time.

    The progress bar counts code cells over all the notebooks. ``timeout`` is the old name of
    ``cell_timeout``.
    """
    from tqdm.auto import tqdm

    if timeout is not None:
        cell_timeout = timeout
    paths = list(notebooks)
    counts = {p: code_cells(p) for p in paths}
    seen: dict[str, LedgerRow] = {}
    times: dict[str, float] = {}
    with tempfile.TemporaryDirectory() as tmp:
        old = os.environ.get(LEDGER_ENV)
        bar = tqdm(total=sum(counts.values()), desc="executing lessons", unit="cell", disable=not progress)
        try:
            for path in paths:
                bar.set_postfix_str(f"{path.name} 0/{counts[path]}")

                def on_cell(cell_index: int, done: int, path: Path = path) -> None:
                    bar.set_postfix_str(f"{path.name} {done}/{counts[path]}", refresh=False)
                    bar.update(1)

                record_file = Path(tmp) / f"{path.stem}.jsonl"
                os.environ[LEDGER_ENV] = str(record_file)
                times[path.name] = execute_notebook(path, cell_timeout=cell_timeout, on_cell=on_cell)
                if record_file.exists():
                    for line in record_file.read_text(encoding="utf-8").splitlines():
                        rec = json.loads(line)
                        rec["notebook"] = path.name
                        seen[rec["id"]] = rec
        finally:
            bar.close()
            if old is None:
                os.environ.pop(LEDGER_ENV, None)
            else:
                os.environ[LEDGER_ENV] = old
    rows = []
    for cid, claim in all_claims().items():
        rec = seen.get(cid, {})
        rows.append(
            {
                "id": cid,
                "claim": claim.en,
                "verdict": rec.get("verdict", "not covered"),
                "evidence": rec.get("evidence", ""),
                "source": rec.get("source", ""),
                "notebook": rec.get("notebook", ""),
                "device": rec.get("device", ""),
                "torch": rec.get("torch", ""),
            }
        )
    return rows, times


# -- the command -----------------------------------------------------------------------------------
def add_arguments(p: argparse.ArgumentParser) -> argparse.ArgumentParser:
    """The options of ``torchcontracts ledger``."""
    p.add_argument("--out", default="ledger.csv")
    p.add_argument("--only", nargs="*", help="lesson number prefixes, e.g. 01 02")
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    p.add_argument(
        "--cell-timeout",
        type=float,
        default=CELL_TIMEOUT,
        metavar="SECONDS",
        help=f"seconds one code cell may run (default {CELL_TIMEOUT})",
    )
    p.add_argument(
        "--cache",
        action="store_true",
        help=f"write the course's cached CPU ledger (data/{CACHE_CSV} and its .json) instead of --out",
    )
    return p


def cache_paths() -> tuple[Path, Path]:
    """Where the cached CPU ledger lives in the package (lesson 10 reads it): the CSV and its JSON sidecar."""
    data = Path(__file__).resolve().parents[1] / "data"
    return data / CACHE_CSV, (data / CACHE_CSV).with_suffix(".json")


def _write_cache_meta(path: Path, times: dict[str, float], covered: int, only: Sequence[str] | None = None) -> None:
    """The sidecar that says when, where and how the cached ledger was made, and each lesson's run time."""
    import platform

    import torch

    command = "torchcontracts ledger --cache" + (f" --only {' '.join(only)}" if only else "")
    meta = {
        "made": time.strftime("%Y-%m-%d"),
        "command": command,
        "torch": torch.__version__,
        "python": platform.python_version(),
        "machine": f"{platform.system()} {platform.machine()}",
        "cpus": os.cpu_count(),
        "load_average": [round(x, 2) for x in os.getloadavg()],
        "covered": covered,
        "seconds": {name: round(secs, 1) for name, secs in times.items()},
    }
    path.write_text(json.dumps(meta, indent=1) + "\n", encoding="utf-8")


def run(args: argparse.Namespace, notebooks: Sequence[Path] | None = None) -> int:
    """``torchcontracts ledger``: execute the lessons, write the CSV, say what happened in one line."""
    if notebooks is None:
        from torchcontracts.labs.format import find_root

        root = find_root()
        notebooks = sorted((root / "notebooks").glob("[0-9][0-9]_*.ipynb"))
        if args.only:
            notebooks = [p for p in notebooks if any(p.name.startswith(o) for o in args.only)]
    if not notebooks:
        print("ledger: no lesson notebooks found in notebooks/: run this from the course root")
        return 1
    cache = bool(getattr(args, "cache", False))
    out = cache_paths()[0] if cache else Path(args.out)
    if cache:
        import torch

        if torch.cuda.is_available():
            print(
                "ledger --cache: this machine has CUDA, and the cached ledger is the CPU one: run "
                "`torchcontracts record` here, or hide the GPU with CUDA_VISIBLE_DEVICES=''"
            )
            return 1
    try:
        rows, times = build_ledger(
            notebooks, progress=not args.quiet, cell_timeout=getattr(args, "cell_timeout", CELL_TIMEOUT)
        )
    except CellTimeout as err:
        print(err)
        return 1
    except Exception as err:  # a failing lesson: say which, in one line
        print(f"ledger: a lesson failed to run: {type(err).__name__}: {str(err).strip().splitlines()[-1][:200]}")
        return 1
    with open(out, "w", newline="", encoding="utf-8") as fh:
        writer = csv.DictWriter(fh, fieldnames=COLUMNS)
        writer.writeheader()
        writer.writerows(rows)
    covered = sum(r["verdict"] != "not covered" for r in rows)
    if cache:
        _write_cache_meta(cache_paths()[1], times, covered, getattr(args, "only", None))
    for name, secs in times.items():
        print(f"  {name}: {secs:.1f} s")
    print(f"ledger: {covered}/{len(rows)} claims covered; wrote {out}")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m torchcontracts.publish.ledger [--cell-timeout S] ...``, the same as ``torchcontracts ledger``."""
    p = add_arguments(
        argparse.ArgumentParser(
            prog="torchcontracts ledger", description="run the lessons headless and write one row per claim"
        )
    )
    return run(p.parse_args(argv))


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
