"""The claims ledger: run the lessons headless and collect every verdict they assert.

Notebooks record verdicts through ``torchcontracts.claims.verdict``; with the environment
variable ``TORCHCONTRACTS_LEDGER`` set, each verdict is appended to a JSON-lines file.
This module executes the lessons with nbclient (the same engine nbval and JupyterLab use)
and joins those records with ``claims.csv``, so uncovered claims show as ``not covered``.
"""

from __future__ import annotations

import json
import os
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Iterable

import nbformat
from nbclient import NotebookClient

from .claims import LEDGER_ENV, all_claims

__all__ = ["LedgerRow", "build_ledger", "execute_notebook", "COLUMNS"]

COLUMNS = ["id", "claim", "verdict", "evidence", "source", "notebook", "device", "torch"]
LedgerRow = dict[str, str]


def execute_notebook(path: Path, *, timeout: int = 600, cwd: Path | None = None) -> float:
    """Execute one notebook in a fresh kernel, in memory (the file is not rewritten); return seconds."""
    nb = nbformat.read(path, as_version=4)
    start = time.perf_counter()
    # The kernel process's own stderr holds only ipykernel's start-up warnings and C-level noise;
    # cell errors and warnings arrive through Jupyter messages, so nothing a learner needs is lost.
    NotebookClient(nb, timeout=timeout, kernel_name="python3",
                   resources={"metadata": {"path": str(cwd or path.parent)}}).execute(stderr=subprocess.DEVNULL)
    return time.perf_counter() - start


def build_ledger(notebooks: Iterable[Path], *, progress: bool = True, timeout: int = 600) -> tuple[list[LedgerRow], dict[str, float]]:
    """Execute the notebooks and return one row per claim, plus each notebook's run time."""
    from tqdm.auto import tqdm

    paths = list(notebooks)
    seen: dict[str, LedgerRow] = {}
    times: dict[str, float] = {}
    with tempfile.TemporaryDirectory() as tmp:
        old = os.environ.get(LEDGER_ENV)
        bar = tqdm(paths, desc="executing lessons", unit="nb", disable=not progress)
        try:
            for path in bar:
                bar.set_postfix_str(path.name)
                record_file = Path(tmp) / f"{path.stem}.jsonl"
                os.environ[LEDGER_ENV] = str(record_file)
                times[path.name] = execute_notebook(path, timeout=timeout)
                if record_file.exists():
                    for line in record_file.read_text(encoding="utf-8").splitlines():
                        rec = json.loads(line)
                        rec["notebook"] = path.name
                        seen[rec["id"]] = rec
        finally:
            if old is None:
                os.environ.pop(LEDGER_ENV, None)
            else:
                os.environ[LEDGER_ENV] = old
    rows = []
    for cid, claim in all_claims().items():
        rec = seen.get(cid, {})
        rows.append({
            "id": cid,
            "claim": claim.en,
            "verdict": rec.get("verdict", "not covered"),
            "evidence": rec.get("evidence", ""),
            "source": rec.get("source", ""),
            "notebook": rec.get("notebook", ""),
            "device": rec.get("device", ""),
            "torch": rec.get("torch", ""),
        })
    return rows, times
