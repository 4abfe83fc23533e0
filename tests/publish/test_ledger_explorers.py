"""The lesson explorers run headless without making nbclient talk back to the kernel mid-cell.

An explorer that captures its drawing through an ``ipywidgets.Output`` context makes nbclient's
Output-widget stand-in send one ``comm_msg`` on the shell socket per captured output while nbclient
waits on that socket for the cell's ``execute_reply``; under CPU load that wait could miss the reply
and sit out the whole cell timeout (lesson 03 stalled in `torchcontracts ledger`). The explorers
therefore draw by setting widget values. This test counts what the client sends: no timing involved.
"""

from __future__ import annotations

import subprocess

from nbclient import NotebookClient
from nbformat.v4 import new_code_cell, new_notebook

from conftest import ROOT
import pytest
from torchcontracts.publish.ledger import this_python_kernel

pytestmark = pytest.mark.slow  # executes notebooks, grades whole submissions or drives a browser


def test_explorers_make_nbclient_send_nothing_but_execute_requests_while_their_cells_run(tmp_path):
    cells = [
        new_code_cell(
            "import matplotlib\nfrom torchcontracts.lessons.l03_memory.alloc_viz import explorer\n"
            "from torchcontracts.lessons.l01_tensors.viz import stride_explorer"
        ),
        new_code_cell("box = explorer()"),
        new_code_cell('stride_explorer(shape="(2, 3)", op="transpose(0, -1)")'),
        new_code_cell(
            "first = getattr(box.children[-1], 'value', '')\n"
            "box.children[1].children[0].value = 'first half'   # redraw, as a learner's click does\n"
            "print(first)\nprint(getattr(box.children[-1], 'value', ''))"
        ),
    ]
    nb = new_notebook(cells=cells)
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    client = NotebookClient(
        nb, timeout=300, km=this_python_kernel(), resources={"metadata": {"path": str(ROOT / "notebooks")}}
    )
    sent: list[tuple[str, str]] = []

    def spy(notebook):
        send = client.kc.shell_channel.send

        def recording_send(msg):
            sent.append((msg["msg_type"], str(msg.get("content", {}).get("data", {}).get("method", ""))))
            return send(msg)

        client.kc.shell_channel.send = recording_send

    client.on_notebook_start = spy
    client.execute(stderr=subprocess.DEVNULL)
    assert [t for t, _ in sent if t not in ("execute_request", "kernel_info_request")] == [], sent
    assert sum(t == "execute_request" for t, _ in sent) == len(cells)
    # the explorers drew: lesson 03's shows the numbers of the experiment, lesson 01's a picture
    widgets = nb.metadata["widgets"]["application/vnd.jupyter.widget-state+json"]["state"]
    models = [m["model_name"] for m in widgets.values()]
    assert models.count("ImageModel") == 2 and "OutputModel" not in models
    first, second = "".join(o.get("text", "") for o in nb.cells[3].outputs).strip().splitlines()
    assert "reserved 72.00 MiB" in first and "reserved" in second and second != first
