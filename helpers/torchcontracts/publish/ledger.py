"""The claims ledger: run the lessons headless and collect every verdict they assert.

Notebooks record verdicts through ``torchcontracts.core.claims.verdict``; with the environment
variable ``TORCHCONTRACTS_LEDGER`` set, each verdict is appended to a JSON-lines file.
This module executes the manifest's lessons (``torchcontracts.course``) with the shared loop of
``torchcontracts.publish.runner`` and joins those records with ``claims.csv``, so uncovered claims
show as ``not covered``. A cell over ``--cell-timeout`` seconds stops the run with one line naming the
notebook and the cell; the progress bar moves once per executed code cell.
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import sys
import time
from pathlib import Path
from typing import Iterable, Sequence

from torchcontracts.core.claims import all_claims
from torchcontracts.publish.runner import (  # the engine lives there; these names are part of this module's API
    CELL_TIMEOUT,
    CellTimeout,
    LessonRun,
    code_cells,
    execute,
    execute_notebook,
    lesson_paths,
    run_lesson,
    run_lessons,
    this_python_kernel,
)

__all__ = [
    "CACHE_CSV",
    "COLUMNS",
    "CELL_TIMEOUT",
    "CellTimeout",
    "LedgerRow",
    "LessonRun",
    "add_arguments",
    "build_ledger",
    "cache_paths",
    "code_cells",
    "execute",
    "execute_notebook",
    "lesson_paths",
    "run",
    "run_lesson",
    "run_lessons",
    "this_python_kernel",
]

COLUMNS = ["id", "claim", "verdict", "evidence", "source", "notebook", "device", "torch"]
CACHE_CSV = "ledger_cpu.csv"  # the cached CPU ledger in the package's data/ (lesson 10 reads it), with a .json beside
LedgerRow = dict[str, str]


def build_ledger(
    notebooks: Iterable[Path],
    *,
    progress: bool = True,
    cell_timeout: float = CELL_TIMEOUT,
    timeout: float | None = None,
) -> tuple[list[LedgerRow], dict[str, float]]:
    """Execute the notebooks and return one row per claim, plus each notebook's run time.

    The progress bar counts code cells over all the notebooks. The first lesson that fails raises what stopped it
    (:class:`CellTimeout`, nbclient's ``CellExecutionError``). ``timeout`` is the old name of ``cell_timeout``.
    """
    if timeout is not None:
        cell_timeout = timeout
    seen: dict[str, dict[str, str]] = {}
    times: dict[str, float] = {}
    for result in run_lessons(notebooks, cell_timeout=cell_timeout, progress=progress, stop_on_error=True):
        times[result.notebook] = result.seconds
        seen.update({rec["id"]: rec for rec in result.records})
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
    p.add_argument(
        "--compare",
        nargs=2,
        metavar=("A.csv", "B.csv"),
        help="run nothing: print the claims whose verdict or evidence differs between two ledgers",
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
    if getattr(args, "compare", None):
        from torchcontracts.publish.ledger_compare import run_compare

        return run_compare(Path(args.compare[0]), Path(args.compare[1]))
    if notebooks is None:
        from torchcontracts.labs.format import find_root

        try:
            notebooks = lesson_paths(find_root(), args.only)
        except FileNotFoundError as err:
            print(f"ledger: {err}")
            return 1
    if not notebooks:
        print(f"ledger: no lesson of the course manifest matches --only {' '.join(args.only or [])}")
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
