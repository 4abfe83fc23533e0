"""Shared fixtures: the course root and its notebooks."""

from __future__ import annotations

from pathlib import Path

import nbformat
import pytest

ROOT = Path(__file__).resolve().parents[1]


def lesson_paths() -> list[Path]:
    return sorted((ROOT / "notebooks").glob("*.ipynb"))


def all_notebook_paths() -> list[Path]:
    return lesson_paths() + sorted((ROOT / "solutions").glob("*.ipynb")) + sorted((ROOT / "labs").glob("*.ipynb"))


@pytest.fixture
def root() -> Path:
    return ROOT


def read(path: Path) -> nbformat.NotebookNode:
    return nbformat.read(path, as_version=4)
