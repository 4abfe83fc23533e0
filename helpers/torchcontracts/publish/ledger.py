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
from torchcontracts.publish.ledger_cli import CACHE_CSV, add_arguments
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
    "rows_from_records",
    "run",
    "run_lesson",
    "run_lessons",
    "this_python_kernel",
]

# basis: what the verdict rests on (core.claims.BASES); expect: what a gpu-only verdict expects a GPU run to show
COLUMNS = ["id", "claim", "verdict", "basis", "expect", "evidence", "source", "notebook", "device", "torch"]
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
    return _rows(seen), times


# -- the command -----------------------------------------------------------------------------------
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

        return run_compare([Path(x) for x in args.compare], check=bool(getattr(args, "check", False)))
    if getattr(args, "from_records", None):
        try:
            rows = rows_from_records(Path(args.from_records))
        except (OSError, ValueError) as err:
            print(f"ledger --from-records: {err}")
            return 1
        return _write(rows, Path(args.out), keep=bool(getattr(args, "keep", False)))
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
        where = getattr(err, "lesson", "a lesson")
        print(f"ledger: {where} failed to run: {type(err).__name__}: {str(err).strip().splitlines()[-1][:200]}")
        return 1
    if cache:
        _write_cache_meta(
            cache_paths()[1], times, sum(r["verdict"] != "not covered" for r in rows), getattr(args, "only", None)
        )
    for name, secs in times.items():
        print(f"  {name}: {secs:.1f} s")
    return _write(rows, out, keep=bool(getattr(args, "keep", False)))


def _write(rows: list[LedgerRow], out: Path, *, keep: bool = False) -> int:
    """Write the ledger CSV (and, with ``keep``, the package's copy for this torch build); say so in one line."""
    outs = [out]
    if keep:
        from torchcontracts.publish.ledger_versions import kept_path

        builds = sorted({r["torch"] for r in rows} - {""})
        if len(builds) != 1:
            print(f"ledger --keep: the rows come from {len(builds)} torch builds ({', '.join(builds)}), not one")
            return 1
        outs.append(kept_path(builds[0]))
        outs[-1].parent.mkdir(parents=True, exist_ok=True)
    for path in outs:
        with open(path, "w", newline="", encoding="utf-8") as fh:
            writer = csv.DictWriter(fh, fieldnames=COLUMNS)
            writer.writeheader()
            writer.writerows(rows)
    covered = sum(r["verdict"] != "not covered" for r in rows)
    print(f"ledger: {covered}/{len(rows)} claims covered; wrote {' and '.join(map(str, outs))}")
    return 0


def rows_from_records(folder: Path) -> list[LedgerRow]:
    """The ledger rows of the verdict files a test run left in ``folder`` (one ``<lesson stem>.jsonl`` per lesson).

    ValueError when the folder holds no verdict file, or a line is not a verdict record.
    """
    files = sorted(folder.glob("*.jsonl"))
    if not files:
        raise ValueError(f"{folder} holds no <lesson>.jsonl verdict files (was TORCHCONTRACTS_LEDGER_DIR set?)")
    seen: dict[str, dict[str, str]] = {}
    for path in files:
        for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            try:
                rec = json.loads(line)
                if not isinstance(rec.get("id"), str) or not isinstance(rec.get("verdict"), str):
                    raise KeyError("id")
                seen[rec["id"]] = {**rec, "notebook": f"{path.stem}.ipynb"}
            except (ValueError, KeyError, TypeError, AttributeError):
                raise ValueError(f"{path.name} line {n} is not a verdict record") from None
    return _rows(seen)


def _rows(seen: dict[str, dict[str, str]]) -> list[LedgerRow]:
    """One row per claim of claims.csv, joined with the records seen (a claim with none reads ``not covered``)."""
    rows = []
    for cid, claim in all_claims().items():
        rec = seen.get(cid, {})
        rows.append(
            {
                "id": cid,
                "claim": claim.en,
                "verdict": rec.get("verdict", "not covered"),
                "basis": rec.get("basis", "measured" if rec else ""),
                "expect": rec.get("expect", ""),
                "evidence": rec.get("evidence", ""),
                "source": rec.get("source", ""),
                "notebook": rec.get("notebook", ""),
                "device": rec.get("device", ""),
                "torch": rec.get("torch", ""),
            }
        )
    return rows


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
