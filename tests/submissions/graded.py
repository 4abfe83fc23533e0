"""Grade one notebook through the real command line in bwrap mode, as an instructor would (for the labs' graded
shortcut tests): a fixed seed, one JSON result."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import nbformat

ROOT = Path(__file__).resolve().parents[2]


def grade_bwrap(tmp_path: Path, nb: nbformat.NotebookNode, lab: str, name: str = "submission.ipynb") -> dict:
    """`torchcontracts grade FILE --lab LAB --sandbox bwrap --seed 4242 --json`; the one result, as a dict."""
    sub = tmp_path / name
    nbformat.write(nb, sub)
    proc = subprocess.run(
        [sys.executable, "-m", "torchcontracts", "grade", str(sub), "--course", str(ROOT), "--lab", lab]
        + ["--json", "--quiet", "--sandbox", "bwrap", "--seed", "4242", "--cell-timeout", "60"],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    got = json.loads(proc.stdout)  # one submission: one result
    assert got["sandbox"] == "bwrap"
    return got
