"""Student labs run up to their TODOs: every graded cell raises NotImplementedError, nothing else fails.

nbval's raises-exception marker only *allows* an exception, so this test executes each lab
itself (nbclient, allow_errors) and requires the exact exception in exactly the graded cells.
"""

from __future__ import annotations

import pytest
from nbclient import NotebookClient

from conftest import ROOT, read

LABS = sorted((ROOT / "labs").glob("lab*.ipynb"))


@pytest.mark.parametrize("path", LABS, ids=lambda p: p.name)
def test_each_todo_cell_raises_not_implemented_and_other_cells_run(path, tmp_path):
    nb = read(path)
    NotebookClient(nb, timeout=300, kernel_name="python3", allow_errors=True,
                   resources={"metadata": {"path": str(tmp_path)}}).execute()
    graded = 0
    for n, cell in enumerate(nb.cells):
        if cell.cell_type != "code":
            continue
        errors = [o for o in cell.outputs if o.output_type == "error"]
        if cell.metadata.get("torchcontracts", {}).get("role") == "solution":
            graded += 1
            assert [e.ename for e in errors] == ["NotImplementedError"], \
                f"{path.name} cell {n}: a TODO cell must raise NotImplementedError, got {[e.ename for e in errors]}"
        else:
            assert not errors, f"{path.name} cell {n} failed: {errors[0].ename}: {errors[0].evalue}"
    assert graded >= 3, f"{path.name}: a lab needs at least 3 graded cells, found {graded}"
