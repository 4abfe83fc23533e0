"""Verdicts across torch versions: the ledgers the package keeps, one per CI build, and how CI makes and checks them.

* `ledger --compare A B C` names exactly the claims that differ in any of the ledgers, and `--check` fails on one;
* `ledger --from-records DIR` turns a test run's per-lesson verdict files into the ledger; junk is refused in a line;
* `--keep` writes the package's copy for the rows' one torch build, and refuses rows of two builds;
* each kept ledger is whole (124 claims, one build, the one its name says), and every torch build CI pins has one.
"""

from __future__ import annotations

import csv
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import ROOT
from torchcontracts.course import lessons
from torchcontracts.publish import ledger_versions
from torchcontracts.publish.ledger import COLUMNS, cache_paths, rows_from_records
from torchcontracts.publish.ledger_compare import read_ledger
from torchcontracts.publish.ledger_versions import kept, kept_path, version_key, version_table


FIRST, SECOND = (les.stem for les in lessons()[1:3])  # two lessons of the manifest


def _cached() -> list[dict[str, str]]:
    with open(cache_paths()[0], newline="", encoding="utf-8") as fh:
        return list(csv.DictReader(fh))


def _write(path: Path, rows: list[dict[str, str]]) -> Path:
    with open(path, "w", newline="", encoding="utf-8") as fh:
        writer = csv.DictWriter(fh, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    return path


def _cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "torchcontracts", "ledger", *args], cwd=ROOT, capture_output=True, text=True, timeout=60
    )


def test_three_ledgers_name_the_claims_that_differ_in_any_and_check_fails_only_then(tmp_path):
    rows = _cached()
    a = _write(tmp_path / "a.csv", [dict(r, torch="2.11.0") for r in rows])
    b = _write(tmp_path / "b.csv", [dict(r, torch="2.13.0") for r in rows])
    third = [dict(r, torch="2.14.1") for r in rows]
    third[5]["verdict"] = "false" if third[5]["verdict"] != "false" else "true"
    c = _write(tmp_path / "c.csv", third)
    proc = _cli("--compare", str(a), str(b), str(c))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert rows[5]["id"] in proc.stdout and f"1 of {len(rows)} claims changed" in proc.stdout
    assert all(f"verdict (torch {v})" in proc.stdout for v in ("2.11.0", "2.13.0", "2.14.1"))
    assert _cli("--compare", str(a), str(b), str(c), "--check").returncode == 1
    same = _cli("--compare", str(a), str(b), "--check")
    assert same.returncode == 0 and "no claim changed" in same.stdout
    assert _cli("--compare", str(a)).returncode == 1  # one ledger is nothing to compare


def _records(folder: Path, lesson: str, recs: list[dict]) -> None:
    folder.mkdir(exist_ok=True)
    with open(folder / f"{lesson}.jsonl", "a", encoding="utf-8") as fh:
        for rec in recs:
            fh.write(json.dumps(rec) + "\n")


def test_from_records_joins_each_lessons_verdicts_with_the_claims(tmp_path):
    rec = {"id": "C001", "verdict": "false", "evidence": "e", "source": "measured on cpu", "device": "cpu"}
    _records(tmp_path / "v", FIRST, [dict(rec, torch="2.11.0+cu130")])
    rows = {r["id"]: r for r in rows_from_records(tmp_path / "v")}
    assert len(rows) == 124 and list(rows["C001"]) == COLUMNS
    assert rows["C001"]["verdict"] == "false" and rows["C001"]["notebook"] == f"{FIRST}.ipynb"
    assert sum(r["verdict"] == "not covered" for r in rows.values()) == 123


def test_from_records_refuses_an_empty_folder_and_a_bad_line_in_one_line(tmp_path):
    (tmp_path / "empty").mkdir()
    proc = _cli("--from-records", str(tmp_path / "empty"), "--out", str(tmp_path / "x.csv"))
    assert proc.returncode == 1 and "no <lesson>.jsonl" in proc.stdout and proc.stdout.count("\n") == 1
    (tmp_path / "bad").mkdir()
    (tmp_path / "bad" / f"{SECOND}.jsonl").write_text('{"id": "C001"}\nnot json\n', encoding="utf-8")
    proc = _cli("--from-records", str(tmp_path / "bad"), "--out", str(tmp_path / "x.csv"))
    assert (
        proc.returncode == 1 and "line 1 is not a verdict record" in proc.stdout and not (tmp_path / "x.csv").exists()
    )


def test_keep_writes_the_builds_copy_and_refuses_rows_of_two_builds(tmp_path, monkeypatch):
    from torchcontracts.publish import ledger

    monkeypatch.setattr(ledger_versions, "KEPT_DIR", tmp_path / "kept")
    rec = {"id": "C001", "verdict": "false", "evidence": "e", "source": "measured on cpu", "device": "cpu"}
    _records(tmp_path / "one", FIRST, [dict(rec, torch="9.9.0+cpu")])
    args = ledger.add_arguments(__import__("argparse").ArgumentParser()).parse_args(
        ["--from-records", str(tmp_path / "one"), "--out", str(tmp_path / "o.csv"), "--keep"]
    )
    assert ledger.run(args) == 0
    assert read_ledger(tmp_path / "kept" / "torch-9.9.0+cpu.csv")["C001"]["verdict"] == "false"
    _records(tmp_path / "two", FIRST, [dict(rec, torch="9.9.0+cpu")])
    _records(tmp_path / "two", SECOND, [dict(rec, id="C002", torch="9.8.0+cpu")])
    args.from_records = str(tmp_path / "two")
    assert ledger.run(args) == 1


def test_versions_sort_by_release_and_a_bad_version_is_refused():
    assert sorted(["2.14.1+cu130", "2.9.0", "2.11.0+cu130", "2.13.0+cpu"], key=version_key) == [
        "2.9.0",
        "2.11.0+cu130",
        "2.13.0+cpu",
        "2.14.1+cu130",
    ]
    with pytest.raises(ValueError):
        kept_path("../../etc/passwd")


def test_the_version_table_names_a_changed_claim(tmp_path):
    rows = _cached()
    a = _write(tmp_path / "torch-1.csv", rows)
    other = [dict(r) for r in rows]
    other[7]["verdict"] = "outdated" if other[7]["verdict"] != "outdated" else "true"
    b = _write(tmp_path / "torch-2.csv", other)
    table, changed = version_table({"1": a, "2": b})
    assert changed == [rows[7]["id"]] and list(table.columns) == ["torch 1", "torch 2"] and len(table) == len(rows)


def test_each_kept_ledger_is_whole_and_of_the_build_its_name_says():
    found = kept()
    assert found, "the package keeps no ledger (data/ledgers/torch-<version>.csv)"
    for version, path in found.items():
        rows = read_ledger(path)
        assert len(rows) == 124, (path.name, len(rows))
        assert {r["torch"] for r in rows.values()} == {version}, path.name
        assert not [cid for cid, r in rows.items() if r["verdict"] == "not covered"], path.name


def test_every_torch_build_ci_pins_has_a_kept_ledger():
    pinned = re.findall(r'run_leg \w+ "torch==([0-9.]+)"', (ROOT / ".ci" / "run").read_text(encoding="utf-8"))
    assert len(pinned) >= 2, pinned
    for version in pinned:
        assert any(v.split("+")[0] == version for v in kept()), f"no kept ledger for torch {version} (CI pins it)"
