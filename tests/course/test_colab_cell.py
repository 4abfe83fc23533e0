"""Lesson 00's Colab cell, with Colab detection mocked: what it installs, and that elsewhere it does nothing."""

from __future__ import annotations

import sys

from conftest import ROOT, notebook_functions

LESSON_00 = ROOT / "notebooks" / "00_start_here.ipynb"


def _cell(monkeypatch, installed: bool):
    fn = notebook_functions(LESSON_00, "colab_install")["colab_install"]
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util,
        "find_spec",
        lambda name, *a: (real("torch") if installed else None) if name == "torchcontracts" else real(name, *a),
    )
    return fn


def test_outside_colab_it_runs_nothing(monkeypatch):
    calls: list = []
    msg = _cell(monkeypatch, installed=False)(
        dict(sys.modules), "https://example.invalid/x.git", [str(ROOT)], calls.append
    )
    assert calls == [] and msg.startswith("not Colab")


def test_on_colab_with_the_package_already_there_it_runs_nothing(monkeypatch):
    calls: list = []
    msg = _cell(monkeypatch, installed=True)({"google.colab": object()}, "", [], calls.append)
    assert calls == [] and "already installed" in msg


def test_on_colab_an_uploaded_course_folder_is_installed_editable(monkeypatch):
    calls: list = []
    run = lambda cmd: calls.append(cmd) or 0  # noqa: E731
    msg = _cell(monkeypatch, installed=False)({"google.colab": object()}, "", ["/nowhere", str(ROOT)], run)
    assert calls and calls[0][-2:] == ["-e", str(ROOT)] and calls[0][1:4] == ["-m", "pip", "install"]
    assert msg.startswith("Colab: installed")


def test_on_colab_without_a_folder_it_installs_from_the_repository(monkeypatch):
    calls: list = []
    run = lambda cmd: calls.append(cmd) or 0  # noqa: E731
    _cell(monkeypatch, installed=False)({"google.colab": object()}, "https://git.example/course.git", ["/nowhere"], run)
    assert calls and calls[0][-1] == "git+https://git.example/course.git"


def test_on_colab_with_nothing_to_install_it_says_what_to_do_in_one_line(monkeypatch):
    calls: list = []
    msg = _cell(monkeypatch, installed=False)({"google.colab": object()}, "", ["/nowhere"], calls.append)
    assert calls == [] and "upload the course folder" in msg and "\n" not in msg


def test_a_failed_pip_is_one_line_not_a_traceback(monkeypatch):
    msg = _cell(monkeypatch, installed=False)(
        {"google.colab": object()}, "https://git.example/c.git", ["/nowhere"], lambda cmd: 1
    )
    assert "failed (exit 1)" in msg and "\n" not in msg
