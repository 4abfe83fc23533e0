"""`torchcontracts ledger` executes lessons headless and writes one row per claim."""

from __future__ import annotations

import csv
import subprocess
import sys


from torchcontracts.core.claims import owned_by

import pytest
from conftest import ROOT

pytestmark = pytest.mark.slow  # executes notebooks, grades whole submissions or drives a browser


def test_ledger_writes_a_row_per_claim_with_lesson_01_verdicts(tmp_path):
    out = tmp_path / "ledger.csv"
    proc = subprocess.run(
        [sys.executable, "-m", "torchcontracts", "ledger", "--only", "00", "01", "--quiet", "--out", str(out)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
    )
    print(proc.stdout)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    rows = {r["id"]: r for r in csv.DictReader(out.open(encoding="utf-8"))}
    assert len(rows) == 124
    for cid in owned_by("01"):
        row = rows[cid]
        assert row["verdict"] in {"true", "false", "partly", "outdated", "gpu-only"}, (cid, row)
        assert row["notebook"] == "01_tensor_contracts.ipynb" and row["evidence"] and row["device"] == "cpu"
    assert rows["C002"]["verdict"] == "not covered"  # an autograd claim: lesson 02 was not run here


def test_a_stale_user_kernelspec_cannot_hijack_the_ledger(tmp_path, monkeypatch):
    """A `python3` kernelspec left by a deleted venv (seen on a CI machine) must not run the lessons."""
    import json
    import sys

    import nbformat
    from nbformat.v4 import new_code_cell, new_notebook

    from torchcontracts.publish.ledger import execute_notebook

    spec = tmp_path / "data" / "kernels" / "python3"
    spec.mkdir(parents=True)
    (spec / "kernel.json").write_text(
        json.dumps(
            {
                "argv": ["/nonexistent/venv/bin/python", "-m", "ipykernel_launcher", "-f", "{connection_file}"],
                "display_name": "stale",
                "language": "python",
            }
        )
    )
    monkeypatch.setenv("JUPYTER_DATA_DIR", str(tmp_path / "data"))
    monkeypatch.setenv("JUPYTER_PREFER_ENV_PATH", "0")  # user folder first, as outside a venv (CI's venv has a spec)
    from jupyter_client.kernelspec import KernelSpecManager

    assert KernelSpecManager().get_kernel_spec("python3").argv[0] == "/nonexistent/venv/bin/python"  # the trap is set
    out = tmp_path / "exe.txt"
    nb = new_notebook(cells=[new_code_cell(f"import sys; open({str(out)!r}, 'w').write(sys.executable)")])
    path = tmp_path / "probe.ipynb"
    nbformat.write(nb, path)
    execute_notebook(path, cell_timeout=60)
    assert out.read_text() == sys.executable


def test_executing_a_notebook_leaves_no_kernel_running(tmp_path):
    """nbclient shuts down only a kernel manager it made; the ledger passes its own, so it must stop the kernel."""
    import time

    import nbformat
    from nbformat.v4 import new_code_cell, new_notebook

    from torchcontracts.lessons.l09_distributed.dist_tools import live_children
    from torchcontracts.publish.ledger import execute_notebook

    before = set(live_children())
    path = tmp_path / "probe.ipynb"
    nbformat.write(new_notebook(cells=[new_code_cell("x = 1")]), path)
    execute_notebook(path, cell_timeout=60)
    deadline = time.monotonic() + 5
    while set(live_children()) - before and time.monotonic() < deadline:
        time.sleep(0.1)
    assert set(live_children()) - before == set(), "the lesson's kernel outlived execute_notebook"
