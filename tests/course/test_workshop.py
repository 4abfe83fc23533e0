"""The workshop kit (docs/WORKSHOP.md) stays in step with the notebooks' times, their Try-it exercises and the CLI."""

from __future__ import annotations

import importlib
import re

from conftest import ROOT
from torchcontracts.course import header_minutes, lesson

DOC = ROOT / "docs" / "WORKSHOP.md"
_ROW = re.compile(r"^\| (\d\d) \| [^|]+ \| (\d+(?:-\d+)?) min \| [^|]* \| [^|]* \| ([^|]*) \|", re.M)


def _rows() -> dict[str, tuple[str, str]]:
    return {n: (minutes, tryit) for n, minutes, tryit in _ROW.findall(DOC.read_text(encoding="utf-8"))}


def test_each_scheduled_lesson_has_its_headers_time():
    rows = _rows()
    assert {"00", "01", "10"} <= set(rows), rows
    for number, (minutes, _) in rows.items():
        path = ROOT / lesson(number).notebook
        assert minutes == header_minutes(path), f"lesson {number}: WORKSHOP.md says {minutes} min"


def test_each_scheduled_lesson_lists_exactly_its_try_it_exercises():
    for number, (_, tryit) in _rows().items():
        listed = re.findall(r"\b(\d\d\.\d)\b", tryit)
        have = sorted(importlib.import_module(f"{lesson(number).module}.tryit").EXERCISES)
        assert sorted(listed) == have, f"lesson {number}: WORKSHOP.md lists {listed}, the lesson has {have}"


def test_the_checklist_names_commands_that_exist():
    from torchcontracts.cli import build_parser

    import argparse

    sub = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    named = set(re.findall(r"`torchcontracts (\w+)", DOC.read_text(encoding="utf-8")))
    assert {"doctor", "ledger", "labs", "grade", "site", "record"} <= named
    assert named <= set(sub.choices), named - set(sub.choices)
