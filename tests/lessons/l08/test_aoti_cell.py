"""Lesson 08's AOTInductor cell (section 18) on a machine that cannot compile C++: one line of reason, no failure.

On a GPU box the cell always compiles (for CUDA), and a missing compiler or CUDA header would stop lesson 08 there,
and with it the GPU record. The test runs the cell's own source with RUN_AOTI = True and a C++ compiler that does
not exist, and shows it says so in one line and goes on; an error that is not about the toolchain still raises.
"""

from __future__ import annotations

import os
import tempfile
import types
from pathlib import Path

import pytest
import torch
import torch.nn as nn
from torch.export import Dim, export

from conftest import ROOT, read
from torchcontracts.course import lesson


def _aoti_cell() -> str:
    nb = read(ROOT / lesson("08").notebook)
    (source,) = [c.source for c in nb.cells if c.cell_type == "code" and "aoti_compile_and_package" in c.source]
    assert "RUN_AOTI = False" in source
    return source.replace("RUN_AOTI = False", "RUN_AOTI = True", 1)


def _run(source: str) -> None:
    ns = {
        "torch": torch,
        "nn": nn,
        "export": export,
        "Dim": Dim,
        "Path": Path,
        "CUDA": False,
        "tc": types.SimpleNamespace(cuda_or_skip=lambda key: False),
        "work": Path(tempfile.mkdtemp()),
        "deploy": types.SimpleNamespace(AOTI_ON_CPU={"recorded": "a stand-in"}),
    }
    exec(compile(source, "<lesson 08 AOTI cell>", "exec"), ns)


def test_no_compiler_gives_one_line_and_the_recorded_run(monkeypatch, capsys):
    monkeypatch.setenv("CXX", "/nonexistent/g++")
    monkeypatch.setattr(torch._inductor.config.cpp, "cxx", (None, os.environ["CXX"]))
    _run(_aoti_cell())
    out = capsys.readouterr().out
    assert "AOTInductor could not compile for cpu here" in out and "InvalidCxxCompiler" in out, out
    assert "a stand-in" in out and "compiled for" not in out


def test_an_error_that_is_not_the_toolchain_still_raises(monkeypatch):
    def broken(*args, **kwargs):
        raise torch._inductor.exc.InductorError(ValueError("a real bug"), None)

    monkeypatch.setattr(torch._inductor, "aoti_compile_and_package", broken)
    with pytest.raises(torch._inductor.exc.InductorError):
        _run(_aoti_cell())
