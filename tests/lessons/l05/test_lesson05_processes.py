"""Lesson 05 in live processes: its seeding demo is deterministic, and no DataLoader worker outlives the notebook.

The seeding demo (``seeding_demo`` with the lesson's ``my_seed_worker``, loaded from the notebook) is run
twice in this process and once in a fresh interpreter; all three must record the same draws per
(epoch, worker, index). The notebook is executed whole by nbclient in a kernel that is its own session
leader (jupyter_client starts kernels with ``start_new_session``), so every process the lesson starts,
workers, the fork server and multiprocessing's resource tracker included, carries the kernel's session
id: after the kernel shuts down, none may be left.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import time

import nbformat
import pytest

from conftest import ROOT, notebook_functions
from torchcontracts.lessons.l05_data.data_pipeline import dataloader_workers

pytestmark = pytest.mark.slow  # executes notebooks, grades whole submissions or drives a browser

NB = ROOT / "notebooks" / "05_data_pipeline.ipynb"


def test_seeding_demo_records_the_same_draws_twice_and_in_a_fresh_interpreter():
    f = notebook_functions(NB, "seeding_demo", "my_seed_worker")
    first, second = (f["seeding_demo"](f["my_seed_worker"], seed=7) for _ in range(2))
    assert len(first) == 16 and first.equals(second), "the same seeded loader recorded different draws"
    script = textwrap.dedent(f"""
        import sys
        sys.path.insert(0, {str(ROOT / "tests")!r})
        from conftest import notebook_functions
        f = notebook_functions(__import__("pathlib").Path({str(NB)!r}), "seeding_demo", "my_seed_worker")
        print(f["seeding_demo"](f["my_seed_worker"], seed=7).to_json(orient="records"))
    """)
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300, check=True)
    assert json.loads(out.stdout.strip().splitlines()[-1]) == json.loads(first.to_json(orient="records"))
    assert dataloader_workers() == []


def _session_of(pid: int) -> int | None:
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as fh:
            return int(fh.read().rsplit(") ", 1)[1].split()[3])
    except (OSError, IndexError, ValueError):
        return None


def _in_session(sid: int) -> list[int]:
    return [int(p) for p in os.listdir("/proc") if p.isdigit() and _session_of(int(p)) == sid]


@pytest.mark.skipif(not os.path.isdir("/proc"), reason="reads process sessions from Linux's /proc")
def test_no_process_the_lesson_starts_outlives_its_kernel():
    from jupyter_client.utils import run_sync
    from nbclient import NotebookClient

    from torchcontracts.publish.ledger import this_python_kernel

    nb = nbformat.read(NB, as_version=4)
    nb.cells.append(
        nbformat.v4.new_code_cell(
            "import json as _j, os as _o\nfrom torchcontracts.lessons.l05_data.data_pipeline import descendants as _d, dataloader_workers as _w\n"
            "print(_j.dumps({'pid': _o.getpid(), 'sid': _o.getsid(0), 'below': _d(), 'workers': _w()}))"
        )
    )
    km = this_python_kernel()
    client = NotebookClient(nb, timeout=300, km=km, resources={"metadata": {"path": str(NB.parent)}})
    try:
        client.execute(stderr=subprocess.DEVNULL)
    finally:  # nbclient leaves a kernel manager it was given running: shut the kernel down as a learner would
        if km.has_kernel:
            run_sync(km.shutdown_kernel)()
    errors = [o for c in nb.cells if c.cell_type == "code" for o in c.outputs if o.output_type == "error"]
    assert not errors, f"the lesson raised: {errors[0].ename}: {errors[0].evalue}"
    seen = json.loads(next(o.text for o in nb.cells[-1].outputs if o.output_type == "stream").strip().splitlines()[-1])
    assert seen["sid"] == seen["pid"], "the kernel is not a session leader: this test cannot see its orphans"
    assert seen["workers"] == [], f"DataLoader workers were alive at the end of the lesson: {seen['workers']}"
    deadline, left = time.monotonic() + 15, _in_session(seen["sid"])
    while left and time.monotonic() < deadline:
        time.sleep(0.2)
        left = _in_session(seen["sid"])
    names = {p: open(f"/proc/{p}/comm").read().strip() for p in left if os.path.exists(f"/proc/{p}/comm")}
    assert not left, f"processes of the lesson's kernel outlived it: {names} (the kernel had below it: {seen['below']})"
