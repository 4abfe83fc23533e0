"""Every CUDA-only branch and every skipped cell is listed, with a reason, in data/skips.csv."""

from __future__ import annotations

import re

import pytest
import torch

import torchcontracts as tc
from torchcontracts.core.skips import manifest

from conftest import lesson_paths, read, solution_paths

NOTEBOOKS = lesson_paths() + solution_paths()
KEY_CALL = re.compile(r"cuda_or_skip\(\s*[\"']([^\"']+)[\"']")


def _used_keys() -> dict[str, str]:
    used = {}
    for path in NOTEBOOKS:
        for cell in read(path).cells:
            for key in KEY_CALL.findall(cell.source):
                used[key] = path.stem
    return used


def test_every_skip_key_used_in_a_notebook_is_listed_with_a_reason():
    listed = manifest()
    for key, notebook in _used_keys().items():
        assert key in listed, f"{notebook}: cuda_or_skip({key!r}) is not in data/skips.csv"
        entry = listed[key]
        assert entry.reason.strip() and entry.cpu_path.strip(), f"{key}: give a reason and the CPU path"
        assert entry.notebook == notebook, f"{key}: listed under {entry.notebook}, used in {notebook}"


def test_every_listed_skip_is_used_somewhere():
    stale = set(manifest()) - set(_used_keys())
    assert not stale, f"data/skips.csv lists keys no notebook uses: {sorted(stale)}"


def test_cells_skipped_by_nbval_name_a_listed_key():
    listed = manifest()
    for path in NOTEBOOKS:
        for n, cell in enumerate(read(path).cells):
            tags = cell.get("metadata", {}).get("tags", [])
            if "NBVAL_SKIP" in cell.source or "nbval-skip" in tags:
                m = re.search(r"#\s*skip-key:\s*(\S+)", cell.source)
                assert m and m.group(1) in listed, f"{path.name} cell {n}: NBVAL_SKIP without a listed '# skip-key:'"


def test_unlisted_key_raises_instead_of_skipping_silently():
    with pytest.raises(KeyError, match="not in torchcontracts/data/skips.csv"):
        tc.cuda_or_skip("no-such-key")


def test_listed_key_prints_reason_on_cpu(capsys, monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    key = next(iter(manifest()))
    assert tc.cuda_or_skip(key) is False
    out = capsys.readouterr().out
    assert "SKIPPED" in out and manifest()[key].reason in out
