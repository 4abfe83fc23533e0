"""`torchcontracts ledger --compare A.csv B.csv` names exactly the claims whose verdict or evidence changed."""

from __future__ import annotations

import csv
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import ROOT
from torchcontracts.publish.ledger import cache_paths
from torchcontracts.publish.ledger_compare import compare, evidence_kind, read_ledger


def _write(path: Path, rows: list[dict[str, str]]) -> Path:
    with open(path, "w", newline="", encoding="utf-8") as fh:
        writer = csv.DictWriter(fh, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    return path


def _cached() -> list[dict[str, str]]:
    with open(cache_paths()[0], newline="", encoding="utf-8") as fh:
        return list(csv.DictReader(fh))


@pytest.mark.parametrize(
    "source, kind",
    [
        ("measured on cpu", "measured"),
        ("measured on cuda (NVIDIA H200)", "measured"),
        ("torch source (c10/core/AllocatorConfig.h)", "source"),
        ("allocator model", "model"),
        ("docs: torch.compile", "docs"),
        ("pytorch/serve README", "citation"),
        ("not covered", "not covered"),
    ],
)
def test_the_kind_of_evidence_is_read_from_the_source(source, kind):
    assert evidence_kind(source) == kind


def test_a_changed_verdict_a_changed_basis_and_a_missing_claim_are_named_and_nothing_else(tmp_path):
    rows = _cached()
    a = _write(tmp_path / "a.csv", rows)
    other = [dict(r, torch="2.11.0+cu130") for r in rows]
    other[0]["verdict"] = "true" if other[0]["verdict"] != "true" else "false"
    other[1]["basis"] = "source" if other[1]["basis"] != "source" else "measured"
    other[2]["evidence"] = "other words, same verdict and basis"  # not a change
    dropped = other.pop(3)
    b = _write(tmp_path / "b.csv", other)
    changes = compare(read_ledger(a), read_ledger(b))
    assert [c[0] for c in changes] == sorted([rows[0]["id"], rows[1]["id"], dropped["id"]])
    assert next(c for c in changes if c[0] == dropped["id"])[2] == "absent"
    proc = subprocess.run(
        [sys.executable, "-m", "torchcontracts", "ledger", "--compare", str(a), str(b)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "torch 2.11.0+cu130" in proc.stdout and f"3 of {len(rows)} claims changed" in proc.stdout
    assert rows[2]["id"] not in proc.stdout


def test_the_same_ledger_says_in_one_line_that_nothing_changed_and_a_bad_file_is_refused(tmp_path):
    a = _write(tmp_path / "a.csv", _cached())
    same = subprocess.run(
        [sys.executable, "-m", "torchcontracts", "ledger", "--compare", str(a), str(a)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert same.returncode == 0 and same.stdout.count("\n") == 1 and "no claim changed" in same.stdout
    bad = subprocess.run(
        [sys.executable, "-m", "torchcontracts", "ledger", "--compare", str(a), str(ROOT / "README.md")],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert bad.returncode == 1 and "is not a ledger" in bad.stdout
