"""`torchcontracts ledger` times out per cell with a one-line message and shows progress per cell."""

from __future__ import annotations

import argparse
import time

import nbformat
from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook

from torchcontracts.publish import ledger


def _write(path, *cells):
    nb = new_notebook(cells=list(cells))
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    nbformat.write(nb, path)
    return path


def _args(tmp_path, **kw):
    return argparse.Namespace(out=str(tmp_path / "ledger.csv"), only=None, quiet=True, **kw)


def test_a_cell_over_the_cell_timeout_stops_the_run_with_one_line_naming_notebook_and_cell(tmp_path, capsys):
    nb = _write(
        tmp_path / "slow.ipynb",
        new_markdown_cell("# slow"),
        new_code_cell("x = 1"),
        new_code_cell("import time; time.sleep(120)"),
        new_code_cell("y = 2"),
    )
    t0 = time.monotonic()
    rc = ledger.run(_args(tmp_path, cell_timeout=10), notebooks=[nb])  # 10 s: `x = 1`, a fresh kernel's first, fits
    took = time.monotonic() - t0
    out = capsys.readouterr().out
    assert rc == 1
    # cells count from 1 at the top, the markdown cell included
    assert out == "ledger: slow.ipynb cell 3 (`import time; time.sleep(120)`) did not finish in 10 s\n"
    assert took < 100, f"the run waited {took:.0f} s: the cell timeout did not stop the sleeping cell"
    assert not (tmp_path / "ledger.csv").exists()


def test_the_timeout_message_shows_the_first_line_of_a_long_cell():
    err = ledger.CellTimeout("03_memory_contracts.ipynb", 43, "\nbox = explorer()\n", 120)
    assert str(err) == "ledger: 03_memory_contracts.ipynb cell 43 (`box = explorer()`) did not finish in 120 s"
    err = ledger.CellTimeout("a.ipynb", 2, "for i in range(3):\n    pass", 1.5)
    assert str(err) == "ledger: a.ipynb cell 2 (`for i in range(3):...`) did not finish in 1.5 s"


def test_the_cell_timeout_is_an_option_of_the_command_defaulting_to_120_s():
    import argparse as ap

    p = ledger.add_arguments(ap.ArgumentParser())
    assert p.parse_args([]).cell_timeout == 120
    assert p.parse_args(["--cell-timeout", "7", "--quiet", "--only", "01"]).cell_timeout == 7


class _Bar:
    """A stand-in for tqdm that records what the ledger tells it."""

    made: list["_Bar"] = []

    def __init__(self, iterable=None, total=None, unit=None, disable=False, **kw):
        self.total, self.unit, self.events = total, unit, []
        self.postfix = ""
        _Bar.made.append(self)

    def set_postfix_str(self, s="", refresh=True):
        self.postfix = s

    def update(self, n=1):
        self.events.append((n, self.postfix))

    def close(self):
        self.events.append(("close", self.postfix))

    def __iter__(self):  # the old, per-notebook bar iterated over the paths
        raise AssertionError("the progress bar must count cells, not iterate over notebooks")


def test_the_progress_bar_moves_once_per_code_cell_across_notebooks(tmp_path, monkeypatch):
    import tqdm.auto

    _Bar.made = []
    monkeypatch.setattr(tqdm.auto, "tqdm", _Bar)
    a = _write(
        tmp_path / "a.ipynb",
        new_markdown_cell("# a"),
        new_code_cell("x = 1"),
        new_code_cell(""),
        new_code_cell("y = x + 1"),
    )
    b = _write(tmp_path / "b.ipynb", new_code_cell("z = 3"))
    rows, times = ledger.build_ledger([a, b], progress=True, cell_timeout=60)
    assert set(times) == {"a.ipynb", "b.ipynb"}
    assert all(r["verdict"] == "not covered" for r in rows)
    [bar] = _Bar.made
    assert bar.total == 3 and bar.unit == "cell"  # the empty code cell does not run, so it is not counted
    assert bar.events == [(1, "a.ipynb 1/2"), (1, "a.ipynb 2/2"), (1, "b.ipynb 1/1"), ("close", "b.ipynb 1/1")]
